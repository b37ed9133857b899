"""The sections of docs/benchmarks.md, one module per benchmark, and what they share (:mod:`.figures`)."""
