"""The query side: what retrieval reads of the outputs.

- :mod:`~streamdedup.query.live_view`: the live view (``View``), the outputs' last value per key with lookups;
- :mod:`~streamdedup.query.safety_net`: the safety net (``SafetyNet``) over a retriever's hits;
- :mod:`~streamdedup.query.outdated`: which chunks only outdated versions of a document hold (``current_only``);
- :mod:`~streamdedup.query.evaluation` and :mod:`~streamdedup.query.calibration` (over a
  :mod:`~streamdedup.query.corpus`): ``streamdedup eval`` and ``streamdedup calibrate``.

The framework adapters are :mod:`streamdedup.adapters`. ``streamdedup.view`` and ``streamdedup.retrieval`` are the
documented import paths of ``View`` and ``SafetyNet``.
"""
