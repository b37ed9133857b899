"""The review console (``streamdedup review``): a local web application where reviewers act on the engine's flags.

- :mod:`~.data`: the fold of the output records the console shows (flags, decisions, chunks);
- :mod:`~.stats`: the calibration sample's draw, the precision of merges, a suggested threshold;
- :mod:`~.verdicts`: the sample's verdicts, kept in a JSON file;
- :mod:`~.reader`: what the console reads from a state directory, opened for one call at a time;
- :mod:`~.output_feeds`: the outputs from an embedded run's output file or a deployment's topics;
- :mod:`~.pages`: what each tab shows, as plain values for its template;
- :mod:`~.web`: the aiohttp application, its templates and static files.
"""

__all__: list[str] = []
