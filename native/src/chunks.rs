//! Chunking of plain text for Python (`streamdedup_kernels::chunks` holds it).

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::PyDict;
use streamdedup_kernels::chunks::PlainChunks;

/// Whether a line is kept: its key (`collection.line_hash` of the normalized line) is not among `known`'s.
fn keep_line(
    line: &str,
    known: &Bound<'_, PyDict>,
    normalize: &Bound<'_, PyAny>,
) -> PyResult<bool> {
    let key = streamdedup_kernels::text::line_key(&crate::text::normalized(line, normalize)?);
    Ok(!known.contains(std::str::from_utf8(&key).expect("hex digits"))?)
}

/// plain_chunks(text, headings, max_chars, known, normalize)
/// --
///
/// Chunk a text that is neither Markdown nor HTML as `chunking.chunk_document` does: its paragraphs
/// (`markup.paragraphs`), without the lines whose normalized form's key is in ``known`` (a dict; None for none;
/// ``normalize`` normalizes a line that is not ASCII), a heading-like paragraph joined to the one it introduces
/// where ``headings`` (a `text/plain` document), and a paragraph longer than ``max_chars`` code points split at
/// sentence ends. Return ``(paragraphs, originals, plains)``: the paragraphs as they were (what the document's
/// boilerplate lines are counted from) and the original and plain text of each chunk.
#[pyfunction]
#[pyo3(signature = (text, headings, max_chars, known, normalize))]
pub fn plain_chunks(
    text: PyBackedStr,
    headings: bool,
    max_chars: usize,
    known: Option<Bound<'_, PyDict>>,
    normalize: Bound<'_, PyAny>,
) -> PyResult<PlainChunks> {
    let known = known.filter(|k| !k.is_empty());
    let keep = known
        .as_ref()
        .map(|known| |line: &str| keep_line(line, known, &normalize));
    streamdedup_kernels::chunks::plain_chunks(&text, headings, max_chars, keep)
}
