"""Drivers move messages between stages and persist state: embedded (one process) and its JSONL feed."""

__all__: list[str] = []
