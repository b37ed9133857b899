//! The band stage's batch: LSH buckets joined and left, and each joining content's candidates
//! (`streamdedup.core.stages.bands`, whose `apply_in_python` is the twin the tests compare this with).
//!
//! A bucket is fixed-width entries sorted by content id: 8 bytes of id (the content hash's first 16 hex digits),
//! then 4 bytes of epoch, big-endian.

use rustc_hash::FxHashMap as HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};

const ID: usize = 8;
const ENTRY: usize = ID + 4;

/// One join (`true`) or leave: content hash, epoch, band keys.
type Op<'py> = (bool, Bound<'py, PyString>, u32, Vec<Bound<'py, PyString>>);
/// A changed bucket: its key and new value, `None` once it is empty.
type Write<'py> = (Bound<'py, PyString>, Option<Bound<'py, PyBytes>>);
/// The answer to one joining content and epoch: the bands it joined and its best candidates.
type Answer<'py> = (
    Bound<'py, PyString>,
    u32,
    Bound<'py, PyTuple>,
    Bound<'py, PyTuple>,
);

fn content_id(content_hash: &str) -> PyResult<[u8; ID]> {
    let digits = content_hash.as_bytes();
    let invalid = || PyValueError::new_err(format!("not a content hash: {content_hash:?}"));
    if digits.len() < 2 * ID {
        return Err(invalid());
    }
    let mut id = [0u8; ID];
    for (i, byte) in id.iter_mut().enumerate() {
        let pair = std::str::from_utf8(&digits[2 * i..2 * i + 2]).map_err(|_| invalid())?;
        *byte = u8::from_str_radix(pair, 16).map_err(|_| invalid())?;
    }
    Ok(id)
}

/// The offset at which `member` is or would be inserted in `raw`, and whether it is there.
fn find(raw: &[u8], member: &[u8; ID]) -> (usize, bool) {
    let (mut low, mut high) = (0, raw.len() / ENTRY);
    while low < high {
        let middle = (low + high) / 2;
        if raw[middle * ENTRY..middle * ENTRY + ID] < member[..] {
            low = middle + 1;
        } else {
            high = middle;
        }
    }
    let offset = low * ENTRY;
    let present = raw.len() >= offset + ID && raw[offset..offset + ID] == member[..];
    (offset, present)
}

fn epoch_at(raw: &[u8], offset: usize) -> u32 {
    u32::from_be_bytes(
        raw[offset + ID..offset + ENTRY]
            .try_into()
            .expect("4 bytes"),
    )
}

/// Count one shared band for each of the first `limit` ids of a bucket other than `member`.
fn count_others(raw: &[u8], member: &[u8; ID], limit: usize, counts: &mut HashMap<[u8; ID], u32>) {
    if raw.len() == ENTRY {
        return;
    }
    let end = raw.len().min(limit.saturating_add(1).saturating_mul(ENTRY));
    let mut seen = 0;
    for entry in raw[..end].chunks_exact(ENTRY) {
        let other: [u8; ID] = entry[..ID].try_into().expect("8 bytes");
        if other != *member && seen < limit {
            *counts.entry(other).or_insert(0) += 1;
            seen += 1;
        }
    }
}

struct Joined {
    op: usize,
    bands: Vec<usize>,
    counts: HashMap<[u8; ID], u32>,
}

/// apply_bands(ops, read, limit)
/// --
///
/// Apply a batch of band joins and leaves, ``ops`` as ``(join, content_hash, epoch, band_keys)`` in order, to the
/// buckets of their keys, read with one call of ``read(keys)`` (stored values, None where absent). Return the
/// changed buckets in the order of the keys ``read`` was given, as ``(key, value or None once empty)`` (a store
/// writes them in one batch, so they need no order), and one answer per joining content and epoch, in order of
/// first join: ``(content_hash, epoch, bands joined, candidates)``, the candidates being the ``limit`` content ids
/// sharing the most of its bands (then the lowest ids) with their counts. A join counts at most ``limit`` others
/// per band, the lowest ids.
#[pyfunction]
pub fn apply_bands<'py>(
    py: Python<'py>,
    ops: Vec<Op<'py>>,
    read: &Bound<'py, PyAny>,
    limit: usize,
) -> PyResult<(Vec<Write<'py>>, Vec<Answer<'py>>)> {
    let mut names: Vec<&Bound<'py, PyString>> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::default();
    let mut op_bands: Vec<Vec<usize>> = Vec::with_capacity(ops.len());
    for (_, _, _, keys) in &ops {
        let mut at = Vec::with_capacity(keys.len());
        for key in keys {
            let text = key.to_str()?;
            let next = names.len();
            let slot = *index.entry(text).or_insert(next);
            if slot == next {
                names.push(key);
            }
            at.push(slot);
        }
        op_bands.push(at);
    }
    let stored: Vec<Option<Vec<u8>>> = read.call1((names.clone(),))?.extract()?;
    if stored.len() != names.len() {
        return Err(PyValueError::new_err("read returned a value per key"));
    }
    let mut buckets: Vec<Vec<u8>> = stored.into_iter().map(Option::unwrap_or_default).collect();
    let mut changed = vec![false; buckets.len()];
    let mut joined: Vec<Joined> = Vec::new();
    let mut joined_at: HashMap<(&str, u32), usize> = HashMap::default();
    for (i, (join, content_hash, epoch, _)) in ops.iter().enumerate() {
        let member = content_id(content_hash.to_str()?)?;
        if *join {
            let next = joined.len();
            let slot = *joined_at
                .entry((content_hash.to_str()?, *epoch))
                .or_insert(next);
            if slot == next {
                joined.push(Joined {
                    op: i,
                    bands: Vec::new(),
                    counts: HashMap::default(),
                });
            }
            let answer = &mut joined[slot];
            for &band in &op_bands[i] {
                let raw = &mut buckets[band];
                answer.bands.push(band);
                if raw.is_empty() {
                    raw.extend_from_slice(&member);
                    raw.extend_from_slice(&epoch.to_be_bytes());
                    changed[band] = true;
                    continue;
                }
                let (offset, present) = find(raw, &member);
                if !present {
                    let mut entry = member.to_vec();
                    entry.extend_from_slice(&epoch.to_be_bytes());
                    raw.splice(offset..offset, entry);
                    changed[band] = true;
                } else if epoch_at(raw, offset) < *epoch {
                    raw[offset + ID..offset + ENTRY].copy_from_slice(&epoch.to_be_bytes());
                    changed[band] = true;
                }
                count_others(raw, &member, limit, &mut answer.counts);
            }
        } else {
            for &band in &op_bands[i] {
                let raw = &mut buckets[band];
                let (offset, present) = find(raw, &member);
                if present && epoch_at(raw, offset) <= *epoch {
                    raw.drain(offset..offset + ENTRY);
                    changed[band] = true;
                }
            }
        }
    }
    let writes = (0..names.len())
        .filter(|&k| changed[k])
        .map(|k| {
            let raw = &buckets[k];
            let value = (!raw.is_empty()).then(|| PyBytes::new(py, raw));
            (names[k].clone(), value)
        })
        .collect();
    let mut answers = Vec::with_capacity(joined.len());
    for answer in joined {
        let (_, content_hash, epoch, _) = &ops[answer.op];
        let mut best: Vec<([u8; ID], u32)> = answer.counts.into_iter().collect();
        best.sort_unstable_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
        best.truncate(limit);
        let candidates = best
            .into_iter()
            .map(|(id, count)| {
                PyTuple::new(
                    py,
                    [
                        streamdedup_kernels::hex(&id).into_pyobject(py)?.into_any(),
                        count.into_pyobject(py)?.into_any(),
                    ],
                )
            })
            .collect::<PyResult<Vec<_>>>()?;
        let bands = PyTuple::new(py, answer.bands.iter().map(|&k| names[k]))?;
        answers.push((
            content_hash.clone(),
            *epoch,
            bands,
            PyTuple::new(py, candidates)?,
        ));
    }
    Ok((writes, answers))
}
