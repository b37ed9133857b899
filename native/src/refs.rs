//! A source version's reference updates, packed (`messages.SourceRefs.refs`): what the source stage tells the
//! content stage of a new version's chunks, in one message a source version and content partition instead of a
//! `RefUpdate` a content.
//!
//! The packed form is MessagePack: an array of `[content_hash, positions, texts, norm]` arrays, sorted by content
//! hash. `positions` are the positions of the version that hold the content and `texts` their original chunk
//! texts; a content the version no longer holds has no positions, no texts and an empty `norm`. The twins the
//! tests compare these functions with are `source.refs_in_python` and `messages.split_refs_in_python`.

use std::collections::BTreeMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::PyBytes;
use sha2::{Digest, Sha256};

use crate::content::mp::{Reader, Result as MpResult, Writer};
use crate::content::stage::content_id;

/// One entry of a packed list, borrowed from it.
pub(crate) struct PackedRef<'a> {
    pub content_hash: &'a str,
    pub positions: Vec<i64>,
    pub texts: Vec<&'a str>,
    pub norm: &'a str,
}

/// Read a packed list's entries (empty bytes: none).
pub(crate) fn read_refs(data: &[u8]) -> MpResult<Vec<PackedRef<'_>>> {
    crate::content::mp::read_list(data, 4, "a reference of 4 fields", |r| {
        let content_hash = r.str()?;
        let positions = r.ints()?;
        let count = r.array()?;
        let texts = (0..count).map(|_| r.str()).collect::<MpResult<Vec<_>>>()?;
        Ok(PackedRef {
            content_hash,
            positions,
            texts,
            norm: r.str()?,
        })
    })
}

fn malformed(e: crate::content::mp::Malformed) -> PyErr {
    PyValueError::new_err(format!("malformed reference list: {e}"))
}

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
    let hashes: Vec<String> = norms
        .iter()
        .map(|norm| crate::hex(&Sha256::digest(norm.as_bytes())))
        .collect();
    let mut held: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (position, content_hash) in hashes.iter().enumerate() {
        held.entry(content_hash).or_default().push(position);
    }
    for content_hash in &old {
        held.entry(content_hash).or_default();
    }
    if held.is_empty() {
        return Ok((hashes, PyBytes::new(py, b"")));
    }
    let size: usize = originals.iter().map(|t| t.len()).sum::<usize>()
        + norms.iter().map(String::len).sum::<usize>()
        + 80 * held.len();
    let mut w = Writer::with_capacity(size + 8);
    w.array(held.len());
    for (content_hash, positions) in &held {
        w.array(4);
        w.str(content_hash);
        w.array(positions.len());
        for &position in positions {
            w.int(position as i64);
        }
        w.array(positions.len());
        for &position in positions {
            w.str(&originals[position]);
        }
        w.str(positions.first().map_or("", |&p| norms[p].as_str()));
    }
    Ok((hashes, PyBytes::new(py, &w.out)))
}

/// Kafka's default partitioner (`partitioning.partition_for`) on a content's id, the prefix it is routed by.
fn content_partition(content_hash: &str, partitions: usize) -> usize {
    if partitions <= 1 {
        return 0;
    }
    crate::positive_murmur2(content_id(content_hash).as_bytes()) as usize % partitions
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
    let mut groups: Vec<(usize, Vec<&[u8]>)> = Vec::new();
    if !refs.is_empty() {
        let mut r = Reader::new(refs);
        let n = r.array().map_err(malformed)?;
        for _ in 0..n {
            let start = r.at();
            r.array().map_err(malformed)?;
            let content_hash = r.str().map_err(malformed)?;
            for _ in 0..3 {
                r.skip().map_err(malformed)?;
            }
            let partition = content_partition(content_hash, partitions);
            let entry = &refs[start..r.at()];
            match groups.iter_mut().find(|(p, _)| *p == partition) {
                Some((_, entries)) => entries.push(entry),
                None => groups.push((partition, vec![entry])),
            }
        }
    }
    Ok(groups
        .into_iter()
        .map(|(partition, entries)| {
            let mut w = Writer::with_capacity(5 + entries.iter().map(|e| e.len()).sum::<usize>());
            w.array(entries.len());
            for entry in entries {
                w.out.extend_from_slice(entry);
            }
            (partition, PyBytes::new(py, &w.out))
        })
        .collect())
}
