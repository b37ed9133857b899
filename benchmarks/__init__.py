"""Benchmarks: every figure is a ratio to a baseline measured in the same run (see docs/benchmarks.md)."""
