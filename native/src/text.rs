//! Normalization of ASCII text and the boilerplate keys of a document's lines, for Python (the kernels are in
//! `streamdedup_kernels::text`).

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::PyBytes;

use streamdedup_kernels::text::{kept_lines, normalized_ascii};

/// normalize_ascii(text)
/// --
///
/// Return the normalized form of an ASCII ``text`` (``normalize.normalize``), or None if it is not ASCII.
#[pyfunction]
pub fn normalize_ascii(text: PyBackedStr) -> Option<String> {
    normalized_ascii(&text)
}

/// The normalized form of any ``text``: compiled for ASCII, else by ``normalize`` (``normalize.normalize``).
pub(crate) fn normalized(text: &str, normalize: &Bound<'_, PyAny>) -> PyResult<String> {
    match normalized_ascii(text) {
        Some(norm) => Ok(norm),
        None => normalize.call1((text,))?.extract(),
    }
}

/// line_hashes(text, max_chars)
/// --
///
/// Return ``(line_hash(normalized), normalized)`` for each line of an ASCII ``text`` (split on newlines) whose
/// normalized form is not empty and at most ``max_chars`` long, in order (``collection.line_hash``: the hex
/// BLAKE2b-64 of the normalized line); None if ``text`` is not ASCII.
#[pyfunction]
pub fn line_hashes(text: PyBackedStr, max_chars: usize) -> Option<Vec<(String, String)>> {
    let bytes = text.as_bytes();
    if !bytes.is_ascii() {
        return None;
    }
    Some(
        kept_lines(bytes, max_chars)
            .map(|(key, line)| {
                (
                    std::str::from_utf8(&key).expect("hex digits").to_owned(),
                    line,
                )
            })
            .collect(),
    )
}

/// What `line_update` returns: lines and added lines packed, removed hashes, the number of lines.
type LineUpdateParts<'py> = (Bound<'py, PyBytes>, Bound<'py, PyBytes>, Vec<String>, usize);

/// line_update(text, max_chars, others, old)
/// --
///
/// The lines a document counts in its collection and how they changed: those of an ASCII ``text`` (as
/// ``line_hashes`` finds them) with ``others`` (``(line hash, normalized line)`` found elsewhere in it), against
/// ``old``, the packed hashes its last version counted. Return ``(lines, added, removed, count)``: the packed
/// sorted hashes of its lines (empty bytes for none), the packed ``[hash, line]`` of those not in ``old``, the
/// hashes in ``old`` no longer among them (sorted), and the number of lines; None if ``text`` is not ASCII
/// (``source.line_update_in_python`` is the twin).
#[pyfunction]
pub fn line_update<'py>(
    py: Python<'py>,
    text: PyBackedStr,
    max_chars: usize,
    others: Vec<(String, String)>,
    old: &[u8],
) -> PyResult<Option<LineUpdateParts<'py>>> {
    let bytes = text.as_bytes();
    if !bytes.is_ascii() {
        return Ok(None);
    }
    let (lines, added, removed, count) =
        streamdedup_kernels::text::line_update(bytes, max_chars, others, old)
            .map_err(pyo3::exceptions::PyValueError::new_err)?;
    Ok(Some((
        PyBytes::new(py, &lines),
        PyBytes::new(py, &added),
        removed,
        count,
    )))
}
