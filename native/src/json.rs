//! JSON as msgspec writes it, for the tests that hold the writer (`streamdedup_kernels::json`) to msgspec's.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use streamdedup_kernels::json::Writer;
use streamdedup_kernels::mp::Reader;

/// Write one MessagePack value as JSON (for the tests that hold this writer to msgspec's).
#[pyfunction]
pub fn json_from_msgpack<'py>(py: Python<'py>, raw: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
    let mut reader = Reader::new(raw);
    let value = reader
        .value()
        .map_err(|e| PyValueError::new_err(format!("malformed MessagePack: {e}")))?;
    let mut w = Writer::with_capacity(raw.len() * 2);
    if !w.value(&value) {
        return Err(PyValueError::new_err("a value JSON cannot hold"));
    }
    Ok(PyBytes::new(py, &w.out))
}
