"""streamdedup: exact and near-duplicate removal for document chunks on their way into RAG indexes."""

__version__ = "0.1.0"

__all__ = ["__version__"]
