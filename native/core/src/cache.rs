//! The state's record cache (`streamdedup.store.rocksdb.RocksDBStore`): the values of recently read and written
//! keys, bounded in bytes, in front of RocksDB's own reads.
//!
//! RocksDB caches data blocks, and a block is cached under the table file that holds it. The stages' keys are
//! hashes, so every flushed file overlaps the whole bottom level, each compaction rewrites all of it, and the
//! blocks cached before it belong to files that no longer exist: once the state outgrows the memtables, a read of
//! a key that exists decompresses a block from the file system, whatever the block cache's size. This cache keeps
//! records, not blocks, so a compaction does not empty it, and a record costs its own size, not a block's.
//!
//! It is written through: a store writes a commit to RocksDB first, then hands the same changes here, so that
//! the cache never holds a value the store does not. A key is named by its store's namespace (a number per open
//! store and a byte per family) and its address in the family. A closed store's entries are never read again; the
//! least recently used go first, so they go before any live store's.

use lru::LruCache;
use rustc_hash::FxBuildHasher;

/// Bytes an entry costs beside its key and value: the map's slot and list links, the key's allocation, and the
/// value's object header.
pub const ENTRY_OVERHEAD: usize = 128;

/// What an entry of `key` holding `value_len` bytes costs.
pub fn cost(key: &[u8], value_len: usize) -> usize {
    key.len() + value_len + ENTRY_OVERHEAD
}

/// A bounded map from a key to the value last stored under it (`V`: the bytes, or an object holding them),
/// dropping the least recently used first, with its hits and misses.
pub struct Entries<V> {
    entries: LruCache<Box<[u8]>, (V, usize), FxBuildHasher>,
    pub used: usize,
    pub capacity: usize,
    pub hits: u64,
    pub misses: u64,
    /// How many updates it has taken: a read that let go of the owner's lock keeps what it read only if none came
    /// meanwhile, since one may have written a newer value of the same key.
    pub updates: u64,
}

impl<V> Entries<V> {
    pub fn new(capacity: usize) -> Self {
        Entries {
            entries: LruCache::unbounded_with_hasher(FxBuildHasher),
            used: 0,
            capacity,
            hits: 0,
            misses: 0,
            updates: 0,
        }
    }

    /// Keep `value` (of `value_len` bytes) under `key`, dropping the least recently used entries beyond the
    /// capacity; a value that alone exceeds it is not kept, and the key's old value goes.
    pub fn insert(&mut self, key: Box<[u8]>, value: V, value_len: usize) {
        let size = cost(&key, value_len);
        if size > self.capacity {
            self.remove(&key);
            return;
        }
        self.used += size;
        if let Some((_, old)) = self.entries.put(key, (value, size)) {
            self.used -= old;
        }
        while self.used > self.capacity {
            match self.entries.pop_lru() {
                Some((_, (_, size))) => self.used -= size,
                None => break,
            }
        }
    }

    pub fn remove(&mut self, key: &[u8]) {
        if let Some((_, size)) = self.entries.pop(key) {
            self.used -= size;
        }
    }

    /// The value under `key`, now the most recently used.
    pub fn get(&mut self, key: &[u8]) -> Option<&V> {
        self.entries.get(key).map(|(value, _)| value)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
