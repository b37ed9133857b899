"""State stores: a protocol with memory and RocksDB implementations."""

from streamdedup.store.base import Store, Transaction, check_params
from streamdedup.store.memory import MemoryStore

__all__ = ["MemoryStore", "Store", "Transaction", "check_params"]
