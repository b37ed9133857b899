//! A source's mapping and the merge of its statuses, for Python (`streamdedup_kernels::mapping` holds them and
//! describes the packed status lists).

use rustc_hash::FxHashSet as HashSet;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::{PyBackedBytes, PyBackedStr};
use pyo3::types::{PyBytes, PyString};
use streamdedup_kernels::mapping::{merge, Mapped, MappedAttrs};

fn malformed(e: streamdedup_kernels::mp::Malformed) -> PyErr {
    PyValueError::new_err(format!("malformed status list: {e}"))
}

/// merge_statuses(chunks, statuses, incoming)
/// --
///
/// Take the packed lists ``incoming`` (a content stage's `SourceStatuses`, in the order they came) into a
/// source's packed ``statuses``, for its chunk list ``chunks`` (a content hash per position): a status is kept if
/// its content is still in the list and it is newer, by (seq, version), than the one held; the statuses of
/// contents no longer in the list are dropped. Return the new packed list, or None if it did not change
/// (`source.merge_in_python` is the twin).
#[pyfunction]
pub fn merge_statuses<'py>(
    py: Python<'py>,
    chunks: Vec<Bound<'py, PyString>>,
    statuses: &[u8],
    incoming: Vec<PyBackedBytes>,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let listed = chunks
        .iter()
        .map(|c| c.to_str())
        .collect::<PyResult<HashSet<&str>>>()?;
    let merged = merge(&listed, statuses, &incoming).map_err(malformed)?;
    Ok(merged.map(|packed| PyBytes::new(py, &packed)))
}

/// The `source-mappings` value as JSON, and the (position, chunk id) of each exact copy whose entry changed.
type Changed<'py> = (Bound<'py, PyBytes>, Vec<(usize, String)>);

/// What a `mapping/v2` record says of its source (`records.MappedAttrs`): readers (sorted), modified_at, uri,
/// title.
type Attrs = (
    Vec<PyBackedStr>,
    PyBackedStr,
    Option<PyBackedStr>,
    Option<PyBackedStr>,
);

/// source_mapping(source_id, attrs, describe, chunks, statuses, version, before, sent)
/// --
///
/// A source's mapping (`source.current_mapping`) from ``chunks`` (its content hash per position) and
/// ``statuses`` (its packed status list), for its ``version``: None until every position's content answered for
/// that version. Else ``(prints, changed)``: the fingerprint of each entry (8 bytes each), and, unless those equal
/// ``before`` and ``sent`` says the mapping sent last was for this version, the value of the source's
/// `source-mappings` record as msgspec writes it in JSON (`records.mapping_of_rows` of ``describe(attrs)``, a
/// `records.MappedAttrs` of the source's ``attrs``, and of each entry's `records.mapping_row`) with the
/// ``(position, chunk_id)`` of each exact copy whose fingerprint is not what ``before`` holds for its position.
/// ``describe`` is called only when the record is written.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn source_mapping<'py>(
    py: Python<'py>,
    source_id: &str,
    attrs: &Bound<'py, PyAny>,
    describe: &Bound<'py, PyAny>,
    chunks: Vec<Bound<'py, PyString>>,
    statuses: &[u8],
    version: i64,
    before: &[u8],
    sent: bool,
) -> PyResult<Option<(Bound<'py, PyBytes>, Option<Changed<'py>>)>> {
    let chunks = chunks
        .iter()
        .map(|c| c.to_str())
        .collect::<PyResult<Vec<&str>>>()?;
    let Some(mapped) = Mapped::of(&chunks, statuses, version).map_err(malformed)? else {
        return Ok(None);
    };
    let prints = PyBytes::new(py, &mapped.prints);
    if mapped.unchanged(before, sent) {
        return Ok(Some((prints, None)));
    }
    let (acl, modified_at, uri, title): Attrs = describe.call1((attrs,))?.extract()?;
    let acl: Vec<&str> = acl.iter().map(|p| &**p).collect();
    let described = MappedAttrs {
        acl: &acl,
        modified_at: &modified_at,
        uri: uri.as_deref(),
        title: title.as_deref(),
    };
    let (json, merged) = mapped.record(source_id, &described, version, before);
    Ok(Some((prints, Some((PyBytes::new(py, &json), merged)))))
}
