//! The content stage (`streamdedup.core.stages.content`), compiled: its records as msgspec encodes them (`mp.rs`,
//! `model.rs`), the canonical policy and clustering (`policy.rs`), messages and outputs as Python objects (`py.rs`),
//! and the batch itself (`stage.rs`).

pub mod model;
pub mod mp;
mod policy;
mod py;
pub mod stage;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// Decode a content-stage record (``kind``: ``content``, ``ref`` or ``ids``) and encode it again.
#[pyfunction]
pub fn content_reencode<'py>(
    py: Python<'py>,
    kind: &str,
    raw: &[u8],
) -> PyResult<Bound<'py, PyBytes>> {
    let out = model::reencode(kind, raw)
        .map_err(|e| PyValueError::new_err(format!("malformed {kind} record: {e}")))?;
    Ok(PyBytes::new(py, &out))
}
