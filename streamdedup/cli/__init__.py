"""The ``streamdedup`` command line."""

__all__: list[str] = []
