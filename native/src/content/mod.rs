//! The content stage (`streamdedup.core.stages.content`), compiled: its records, MessagePack and the canonical
//! policy are in the core crate (`streamdedup_kernels::{model, mp, policy}`); here are messages and outputs as
//! Python objects (`py.rs`, `messages.rs`), the batch's host in Python (`host.rs`) and the kernel (`kernel.rs`).

mod host;
pub mod kernel;
mod messages;
mod py;

use streamdedup_kernels::{model, mp};

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
