"""The live view's documented import path: :mod:`streamdedup.query.live_view` holds it.

>>> from streamdedup.view import View
>>> View.__module__
'streamdedup.query.live_view'
"""

from streamdedup.query.live_view import FORMAT, Pending, Record, View, ViewWriter
from streamdedup.query.output_file import Applier, OutputFile, build_view

__all__ = ["FORMAT", "Applier", "OutputFile", "Pending", "Record", "View", "ViewWriter", "build_view"]
