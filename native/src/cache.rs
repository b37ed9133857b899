//! The state's record cache for Python (`streamdedup_kernels::cache` describes it and keeps its entries).

use std::sync::{Mutex, MutexGuard};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};
use streamdedup_kernels::cache::Entries;

/// A bounded map from a key to the bytes last stored under it, dropping the least recently used first.
///
/// Its methods take the interpreter's lock and keep it while they hold the lock of the entries, so that the lock
/// is never contended; they let go of it around `fetch`, which may let another thread run (a worker opens its
/// partition stores in a thread).
#[pyclass(module = "streamdedup.core._native", frozen)]
pub struct RecordCache {
    inner: Mutex<Inner>,
}

type Inner = Entries<Py<PyBytes>>;

/// Keep the bytes object `value` under `key`.
fn insert(inner: &mut Inner, key: Box<[u8]>, value: Bound<'_, PyBytes>) {
    let len = value.as_bytes().len();
    inner.insert(key, value.unbind(), len);
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
            inner: Mutex::new(Entries::new(capacity)),
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
                match inner.get(&name[..]) {
                    Some(value) => out.push(value.bind(py).clone().into_any()),
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
                    insert(&mut inner, name, bytes.clone());
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
                Ok(bytes) => insert(&mut inner, name.as_slice().into(), bytes.clone()),
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
        self.inner().len()
    }

    /// Keys found here and keys read from the store, since it was made.
    #[getter]
    fn counts(&self) -> (u64, u64) {
        let inner = self.inner();
        (inner.hits, inner.misses)
    }
}
