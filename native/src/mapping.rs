//! A source's mapping (`streamdedup.core.stages.source`): what each of its positions maps to, from what its
//! contents told it, with a fingerprint per position, and the rows of the `source-mappings` record when those
//! changed. The twin the tests compare this with is `mapping_in_python` (from `current_mapping`, `_fingerprint`
//! and `records.mapping_row`).
//!
//! A source keeps what its contents last told it as one packed list (`state.pack_statuses`): MessagePack, an
//! array of `StatusEntry` arrays sorted by content hash. The content stage sends a source the statuses of a batch
//! in the same form (`SourceStatuses`), and `merge_statuses` takes them in.

use std::collections::BTreeMap;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyString};

use streamdedup_kernels::json::Writer as JsonWriter;
use streamdedup_kernels::keys::round6;
use streamdedup_kernels::mapping::{fingerprint, read_statuses, write_statuses, Status};

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
    let held = read_statuses(statuses).map_err(malformed)?;
    let count = held.len();
    let mut merged: BTreeMap<&str, Status<'_>> = held
        .into_iter()
        .filter(|s| listed.contains(s.content_hash))
        .map(|s| (s.content_hash, s))
        .collect();
    let mut changed = merged.len() != count;
    for blob in &incoming {
        for status in read_statuses(blob).map_err(malformed)? {
            if !listed.contains(status.content_hash) {
                continue;
            }
            if let Some(known) = merged.get(status.content_hash) {
                if (known.seq, known.version) >= (status.seq, status.version) {
                    continue;
                }
            }
            merged.insert(status.content_hash, status);
            changed = true;
        }
    }
    Ok(changed.then(|| PyBytes::new(py, &write_statuses(merged.values()))))
}

/// One position's entry: relation and Jaccard similarity.
struct Entry {
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
/// ``statuses`` (its packed status list), for its ``version``: None until every position's content answered for
/// that version. Else ``(prints, changed)``: the fingerprint of each entry (8 bytes each), and, unless those equal
/// ``before`` and ``sent`` says the mapping sent last was for this version, the value of the source's
/// `source-mappings` record as msgspec writes it in JSON (`records.mapping_of_rows` of each entry's
/// `records.mapping_row`) with the ``(position, chunk_id)`` of each exact copy whose fingerprint is not what
/// ``before`` holds for its position.
#[pyfunction]
pub fn source_mapping<'py>(
    py: Python<'py>,
    source_id: &str,
    chunks: Vec<Bound<'py, PyString>>,
    statuses: &[u8],
    version: i64,
    before: &[u8],
    sent: bool,
) -> PyResult<Option<(Bound<'py, PyBytes>, Option<Changed<'py>>)>> {
    let told: HashMap<&str, Status<'_>> = read_statuses(statuses)
        .map_err(malformed)?
        .into_iter()
        .map(|s| (s.content_hash, s))
        .collect();
    let mut entries = Vec::with_capacity(chunks.len());
    let mut hashes = Vec::with_capacity(chunks.len());
    let mut ids = Vec::with_capacity(chunks.len());
    for (position, content_hash) in chunks.iter().enumerate() {
        let content_hash = content_hash.to_str()?;
        let Some(status) = told.get(content_hash).filter(|s| s.answers(version)) else {
            return Ok(None);
        };
        let entry = if status.near {
            Entry {
                relation: "near",
                jaccard: status.jaccard,
            }
        } else {
            Entry {
                relation: if status.canonical_position == position as i64 {
                    "canonical"
                } else {
                    "exact"
                },
                jaccard: 1.0,
            }
        };
        entries.push(entry);
        hashes.push(content_hash);
        ids.push(if status.chunk_id == "=" {
            content_hash
        } else {
            status.chunk_id
        });
    }
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
