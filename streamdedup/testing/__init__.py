"""Testing aids shipped with the library: a reference model, invariant checks, random feeds."""

__all__: list[str] = []
