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

use std::sync::{Mutex, MutexGuard};

use lru::LruCache;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};
use rustc_hash::FxBuildHasher;

/// Bytes an entry costs beside its key and value: the map's slot and list links, the key's allocation, and the
/// value's Python object header.
const ENTRY_OVERHEAD: usize = 128;

type Entries = LruCache<Box<[u8]>, (Py<PyBytes>, usize), FxBuildHasher>;

/// A bounded map from a key to the bytes last stored under it, dropping the least recently used first.
///
/// Its methods take the interpreter's lock and keep it while they hold the lock of the entries, so that the lock
/// is never contended; they let go of it around `fetch`, which may let another thread run (a worker opens its
/// partition stores in a thread).
#[pyclass(module = "streamdedup.core._native", frozen)]
pub struct RecordCache {
    inner: Mutex<Inner>,
}

struct Inner {
    entries: Entries,
    used: usize,
    capacity: usize,
    hits: u64,
    misses: u64,
    /// How many `update` calls it has taken: a read that let go of the lock keeps what it read only if none came
    /// meanwhile, since one may have written a newer value of the same key.
    updates: u64,
}

fn cost(key: &[u8], value: &[u8]) -> usize {
    key.len() + value.len() + ENTRY_OVERHEAD
}

impl Inner {
    fn insert(&mut self, key: Box<[u8]>, value: Bound<'_, PyBytes>) {
        let size = cost(&key, value.as_bytes());
        if size > self.capacity {
            self.remove(&key);
            return;
        }
        self.used += size;
        if let Some((_, old)) = self.entries.put(key, (value.unbind(), size)) {
            self.used -= old;
        }
        while self.used > self.capacity {
            match self.entries.pop_lru() {
                Some((_, (_, size))) => self.used -= size,
                None => break,
            }
        }
    }

    fn remove(&mut self, key: &[u8]) {
        if let Some((_, size)) = self.entries.pop(key) {
            self.used -= size;
        }
    }
}

impl RecordCache {
    fn inner(&self) -> MutexGuard<'_, Inner> {
        // A panic while the lock was held left the entries as they were between two whole steps.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[pymethods]
impl RecordCache {
    #[new]
    fn new(capacity: usize) -> Self {
        RecordCache {
            inner: Mutex::new(Inner {
                entries: LruCache::unbounded_with_hasher(FxBuildHasher),
                used: 0,
                capacity,
                hits: 0,
                misses: 0,
                updates: 0,
            }),
        }
    }

    /// Return the values of `keys` (str) under the namespace `ns`, in order, None where absent.
    ///
    /// Keys the cache lacks are read with `fetch(addresses)` (a RocksDB multi-get: a list of bytes in, a list of
    /// bytes and None out), at most `chunk` at a time; an address is a key's full name without the first `skip`
    /// bytes of `ns`. What `fetch` finds is cached; what it does not find is not (most are a new text's LSH buckets,
    /// never read again).
    fn get_many<'py>(
        &self,
        py: Python<'py>,
        ns: &[u8],
        skip: usize,
        keys: &Bound<'py, PyList>,
        fetch: &Bound<'py, PyAny>,
        chunk: usize,
    ) -> PyResult<Bound<'py, PyList>> {
        let mut out: Vec<Bound<'py, PyAny>> = Vec::with_capacity(keys.len());
        let mut wanted: Vec<(usize, Box<[u8]>)> = Vec::new();
        let updates;
        {
            let mut inner = self.inner();
            let mut name = ns.to_vec();
            for (i, key) in keys.iter().enumerate() {
                let key = key.cast::<PyString>()?.to_str()?;
                name.truncate(ns.len());
                name.extend_from_slice(key.as_bytes());
                match inner.entries.get(&name[..]) {
                    Some((value, _)) => out.push(value.bind(py).clone().into_any()),
                    None => {
                        out.push(py.None().into_bound(py));
                        wanted.push((i, name.as_slice().into()));
                    }
                }
            }
            inner.hits += (keys.len() - wanted.len()) as u64;
            inner.misses += wanted.len() as u64;
            updates = inner.updates;
        }
        let mut wanted = wanted.into_iter();
        loop {
            let part: Vec<(usize, Box<[u8]>)> = wanted.by_ref().take(chunk.max(1)).collect();
            if part.is_empty() {
                break;
            }
            let addresses = PyList::new(
                py,
                part.iter().map(|(_, name)| PyBytes::new(py, &name[skip..])),
            )?;
            let found: Vec<Bound<'py, PyAny>> = fetch
                .call1((addresses,))?
                .try_iter()?
                .collect::<PyResult<_>>()?;
            if found.len() != part.len() {
                return Err(PyValueError::new_err(format!(
                    "a multi-get of {} keys answered {} values",
                    part.len(),
                    found.len()
                )));
            }
            let mut inner = self.inner();
            let keep = inner.updates == updates;
            for ((i, name), value) in part.into_iter().zip(found) {
                if let (true, Ok(bytes)) = (keep, value.cast::<PyBytes>()) {
                    inner.insert(name, bytes.clone());
                }
                out[i] = value;
            }
        }
        PyList::new(py, out)
    }

    /// Apply a commit's `writes` (key, str or bytes, to bytes or None to remove) under the namespace `ns`: a key
    /// already cached takes its new value or goes, and a new value is cached too (what a batch writes, the next
    /// batches read most).
    fn update(&self, ns: &[u8], writes: &Bound<'_, PyDict>) -> PyResult<()> {
        let mut inner = self.inner();
        inner.updates += 1;
        let mut name = ns.to_vec();
        for (key, value) in writes.iter() {
            name.truncate(ns.len());
            match key.cast::<PyString>() {
                Ok(text) => name.extend_from_slice(text.to_str()?.as_bytes()),
                Err(_) => name.extend_from_slice(key.cast::<PyBytes>()?.as_bytes()),
            }
            match value.cast::<PyBytes>() {
                Ok(bytes) => inner.insert(name.as_slice().into(), bytes.clone()),
                Err(_) => inner.remove(&name),
            }
        }
        Ok(())
    }

    /// The bytes the entries are counted at.
    #[getter]
    fn used(&self) -> usize {
        self.inner().used
    }

    /// The bound on `used`.
    #[getter]
    fn capacity(&self) -> usize {
        self.inner().capacity
    }

    /// How many entries it holds.
    fn __len__(&self) -> usize {
        self.inner().entries.len()
    }

    /// Keys found here and keys read from the store, since it was made.
    #[getter]
    fn counts(&self) -> (u64, u64) {
        let inner = self.inner();
        (inner.hits, inner.misses)
    }
}
