//! A source version's reference updates, packed, for Python (`streamdedup_kernels::refs` holds the kernels and
//! describes the packed form).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::PyBytes;

use streamdedup_kernels::refs::{content_hashes, pack_refs, split_packed};

/// What `source_refs` returns: the version's content hashes, position by position, and the packed list.
type SourceRefs<'py> = (Vec<String>, Bound<'py, PyBytes>);

/// source_refs(plains, originals, old, normalize)
/// --
///
/// The content hashes of a new version's chunks and what the version tells their contents: ``plains`` and
/// ``originals`` are its chunks' plain and original texts, ``old`` the content hashes of the version before (one
/// per position; empty for none). Each plain text is normalized (ASCII here, any other by calling
/// ``normalize``) and hashed (the hex SHA-256 of the normalized text). Return ``(hashes, refs)``: the hash of
/// each position and the packed list of every content of either version, sorted by hash (empty bytes for
/// none).
#[pyfunction]
pub fn source_refs<'py>(
    py: Python<'py>,
    plains: Vec<PyBackedStr>,
    originals: Vec<PyBackedStr>,
    old: Vec<PyBackedStr>,
    normalize: Bound<'py, PyAny>,
) -> PyResult<SourceRefs<'py>> {
    if plains.len() != originals.len() {
        return Err(PyValueError::new_err(
            "plains and originals differ in length",
        ));
    }
    let norms = plains
        .iter()
        .map(|plain| crate::text::normalized(plain, &normalize))
        .collect::<PyResult<Vec<_>>>()?;
    let hashes = content_hashes(&norms);
    let packed = pack_refs(&hashes, &originals, &norms, &old);
    Ok((hashes, PyBytes::new(py, &packed)))
}

/// split_refs(refs, partitions)
/// --
///
/// Divide a packed list among ``partitions`` content partitions: ``(partition, refs)`` for each partition that
/// holds some of its contents, in the order of their first content, each list holding its entries in their
/// order (``messages.split_refs_in_python`` is the twin).
#[pyfunction]
pub fn split_refs<'py>(
    py: Python<'py>,
    refs: &[u8],
    partitions: usize,
) -> PyResult<Vec<(usize, Bound<'py, PyBytes>)>> {
    let groups = split_packed(refs, partitions)
        .map_err(|e| PyValueError::new_err(format!("malformed reference list: {e}")))?;
    Ok(groups
        .into_iter()
        .map(|(partition, packed)| (partition, PyBytes::new(py, &packed)))
        .collect())
}
