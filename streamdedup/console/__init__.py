"""The review console (``streamdedup review``): a local web application where reviewers act on the engine's flags.

- :mod:`~streamdedup.console.data`: the fold of the output records the console shows (flags, decisions, chunks);
- :mod:`~streamdedup.console.stats`: the calibration sample's draw, the precision of merges, a suggested threshold;
- :mod:`~streamdedup.console.verdicts`: the sample's verdicts, kept in a JSON file;
- :mod:`~streamdedup.console.reader`: what the console reads from a state directory, opened for one call at a time;
- :mod:`~streamdedup.console.feeds`: the outputs from an embedded run's output file or a deployment's topics;
- :mod:`~streamdedup.console.pages`: what each tab shows, as plain values for its template;
- :mod:`~streamdedup.console.app`: the aiohttp application, its templates and static files.
"""

__all__: list[str] = []
