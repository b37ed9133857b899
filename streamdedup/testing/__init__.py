"""Testing aids shipped with the library: a reference model, invariant checks, a simulation driver, random feeds."""

__all__: list[str] = []
