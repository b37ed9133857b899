//! A store commit's inner loop (`streamdedup.store.rocksdb.RocksDBStore.commit`): the changes of one stage
//! partition handed to a RocksDB write batch, each key under the partition's prefix. In Python, that loop was a
//! third of a commit; here it leaves only the write batch's own calls.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};

/// Call `put(prefix + key, value, family)` for every key of `writes` with a value, and `delete(prefix + key,
/// family)` for every key whose value is None, in the dict's order (keys are UTF-8 encoded).
#[pyfunction]
pub fn fill_write_batch(
    py: Python<'_>,
    put: &Bound<'_, PyAny>,
    delete: &Bound<'_, PyAny>,
    family: &Bound<'_, PyAny>,
    prefix: &[u8],
    writes: &Bound<'_, PyDict>,
) -> PyResult<()> {
    let mut address = Vec::with_capacity(prefix.len() + 96);
    for (key, value) in writes.iter() {
        let key = key.cast::<PyString>()?.to_str()?;
        address.clear();
        address.extend_from_slice(prefix);
        address.extend_from_slice(key.as_bytes());
        let address = PyBytes::new(py, &address);
        if value.is_none() {
            delete.call1((address, family))?;
        } else {
            put.call1((address, value, family))?;
        }
    }
    Ok(())
}
