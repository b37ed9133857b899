//! A source's mapping (`streamdedup.core.stages.source`): what each of its positions maps to, from what its
//! contents told it, with a fingerprint per position, and the rows of the `source-mappings` record when those
//! changed. The twin the tests compare this with is `mapping_in_python` (from `current_mapping`, `_fingerprint`
//! and `records.mapping_row`).

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};

use crate::content::stage::round6;
use crate::json::{python_repr, Writer as JsonWriter};
use crate::text::blake2b_64;

/// Python's `repr` of a float (`nan`, `inf` and `-inf` included), as `source._fingerprint` writes it.
fn py_float_repr(x: f64) -> String {
    if x == 1.0 {
        return "1.0".to_owned(); // the Jaccard value of every exact copy and canonical
    }
    if x.is_nan() {
        return "nan".to_owned();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    python_repr(x)
}

/// The fingerprint of one mapping entry: the BLAKE2b-64 of
/// `f"{content_hash}\x00{chunk_id}\x00{relation}\x00{jaccard!r}"` (`source._fingerprint`). `text` is scratch.
fn fingerprint(
    text: &mut String,
    content_hash: &str,
    chunk_id: &str,
    relation: &str,
    jaccard: f64,
) -> [u8; 8] {
    text.clear();
    for part in [content_hash, "\0", chunk_id, "\0", relation, "\0"] {
        text.push_str(part);
    }
    text.push_str(&py_float_repr(jaccard));
    blake2b_64(text.as_bytes())
}

/// One position's entry: chunk id (None: the content's own hash), relation and Jaccard similarity.
struct Entry<'py> {
    chunk_id: Option<Bound<'py, PyString>>,
    relation: &'static str,
    jaccard: f64,
}

/// The `source-mappings` value as JSON, and the (position, chunk id) of each exact copy whose entry changed.
type Changed<'py> = (Bound<'py, PyBytes>, Vec<(usize, String)>);

const MAPPING_SCHEMA: &str = "streamdedup.mapping/v1";

/// source_mapping(source_id, chunks, statuses, version, before, sent)
/// --
///
/// A source's mapping (`source.current_mapping`) from ``chunks`` (its content hash per position) and
/// ``statuses`` (a `StatusEntry` per content hash), for its ``version``: None until every position's content
/// answered for that version. Else ``(prints, changed)``: the fingerprint of each entry (8 bytes each), and,
/// unless those equal ``before`` and ``sent`` says the mapping sent last was for this version, the value of the
/// source's `source-mappings` record as msgspec writes it in JSON (`records.mapping_of_rows` of each entry's
/// `records.mapping_row`) with the ``(position, chunk_id)`` of each exact copy whose fingerprint is not what
/// ``before`` holds for its position.
#[pyfunction]
pub fn source_mapping<'py>(
    py: Python<'py>,
    source_id: &str,
    chunks: Vec<Bound<'py, PyString>>,
    statuses: &Bound<'py, PyDict>,
    version: i64,
    before: &[u8],
    sent: bool,
) -> PyResult<Option<(Bound<'py, PyBytes>, Option<Changed<'py>>)>> {
    let mut entries = Vec::with_capacity(chunks.len());
    let mut hashes = Vec::with_capacity(chunks.len());
    for (position, content_hash) in chunks.iter().enumerate() {
        let Some(status) = statuses.get_item(content_hash)? else {
            return Ok(None);
        };
        let chunk_id = status
            .getattr(pyo3::intern!(py, "chunk_id"))?
            .cast_into::<PyString>()?;
        if chunk_id.to_str()?.is_empty()
            || status
                .getattr(pyo3::intern!(py, "version"))?
                .extract::<i64>()?
                != version
        {
            return Ok(None);
        }
        // Held, not copied, to the end of the call.
        let chunk_id = (chunk_id.to_str()? != "=").then_some(chunk_id);
        let relation = status.getattr(pyo3::intern!(py, "relation"))?;
        let entry = if relation.cast::<PyString>()?.to_str()? == "near" {
            Entry {
                chunk_id,
                relation: "near",
                jaccard: status.getattr(pyo3::intern!(py, "jaccard"))?.extract()?,
            }
        } else {
            let canonical: i64 = status
                .getattr(pyo3::intern!(py, "canonical_position"))?
                .extract()?;
            Entry {
                chunk_id,
                relation: if canonical == position as i64 {
                    "canonical"
                } else {
                    "exact"
                },
                jaccard: 1.0,
            }
        };
        entries.push(entry);
        hashes.push(content_hash.to_str()?);
    }
    let ids = hashes
        .iter()
        .zip(&entries)
        .map(|(content_hash, e)| match &e.chunk_id {
            Some(id) => id.to_str(),
            None => Ok(*content_hash),
        })
        .collect::<PyResult<Vec<&str>>>()?;
    let mut prints = Vec::with_capacity(8 * entries.len());
    let mut text = String::new();
    for ((content_hash, chunk_id), e) in hashes.iter().zip(&ids).zip(&entries) {
        let print = fingerprint(&mut text, content_hash, chunk_id, e.relation, e.jaccard);
        prints.extend_from_slice(&print);
    }
    let prints_py = PyBytes::new(py, &prints);
    if sent && prints == before {
        return Ok(Some((prints_py, None)));
    }
    // The value as msgspec writes `records.mapping_of_rows`: the same fields in the same order.
    let mut j = JsonWriter::with_capacity(64 + source_id.len() + 200 * entries.len());
    j.raw(b"{\"schema\":");
    j.str(MAPPING_SCHEMA);
    j.raw(b",\"source_id\":");
    j.str(source_id);
    j.raw(b",\"version\":");
    j.int(version);
    j.raw(b",\"chunks\":[");
    let mut merged = Vec::new();
    for (position, ((content_hash, chunk_id), e)) in
        hashes.iter().zip(&ids).zip(&entries).enumerate()
    {
        let at = position * 8;
        if e.relation == "exact" && before.get(at..at + 8) != Some(&prints[at..at + 8]) {
            merged.push((position, (*chunk_id).to_owned()));
        }
        j.raw(if position == 0 {
            b"{\"position\":"
        } else {
            b",{\"position\":"
        });
        j.int(position as i64);
        j.raw(b",\"content_hash\":");
        j.str(content_hash);
        j.raw(b",\"chunk_id\":");
        j.str(chunk_id);
        j.raw(b",\"relation\":\"");
        j.raw(e.relation.as_bytes());
        j.raw(b"\",\"jaccard\":");
        j.float(round6(e.jaccard));
        j.raw(b"}");
    }
    j.raw(b"]}");
    Ok(Some((prints_py, Some((PyBytes::new(py, &j.out), merged)))))
}
