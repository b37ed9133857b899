//! The collection stage's line counts: the documents of a collection containing each normalized line
//! (`streamdedup.core.stages.collection`, whose `count_in_python` is the twin the tests compare this with).
//!
//! Records are MessagePack arrays, as msgspec writes the package's `array_like` structs: a line is
//! `[count, text]` (`LineRecord`), a source's last counted version `[version, counted]` (`CollectionMember`).

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::{PyBackedBytes, PyBackedStr};
use pyo3::types::{PyBytes, PyDict, PyString};

/// collection, source_id, version, counted, added (packed `[line hash, normalized line]` arrays), removed line
/// hashes.
type Update = (
    PyBackedStr,
    PyBackedStr,
    i64,
    bool,
    PyBackedBytes,
    Vec<PyBackedStr>,
);

fn malformed(what: &str, key: &str) -> PyErr {
    PyValueError::new_err(format!("malformed {what} record at {key:?}"))
}

/// Read a record's two fields, `[first, second]`: a shorter array leaves the defaults, a longer one is refused
/// (this version writes two; msgspec would ignore the rest).
fn fields<'a>(raw: &'a [u8], what: &str, key: &str) -> PyResult<(u32, &'a [u8])> {
    let mut rest = raw;
    let length = rmp::decode::read_array_len(&mut rest).map_err(|_| malformed(what, key))?;
    if length > 2 {
        return Err(malformed(what, key));
    }
    Ok((length, rest))
}

fn decode_line(raw: &[u8], key: &str) -> PyResult<(i64, String)> {
    let (length, mut rest) = fields(raw, "line", key)?;
    let mut line = (0, String::new());
    if length >= 1 {
        line.0 = rmp::decode::read_int(&mut rest).map_err(|_| malformed("line", key))?;
    }
    if length == 2 {
        let (text, tail) =
            rmp::decode::read_str_from_slice(rest).map_err(|_| malformed("line", key))?;
        line.1 = text.to_owned();
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(malformed("line", key));
    }
    Ok(line)
}

fn decode_member(raw: &[u8], key: &str) -> PyResult<(i64, bool)> {
    let (length, mut rest) = fields(raw, "member", key)?;
    let mut member = (-1, false);
    if length >= 1 {
        member.0 = rmp::decode::read_int(&mut rest).map_err(|_| malformed("member", key))?;
    }
    if length == 2 {
        member.1 = rmp::decode::read_bool(&mut rest).map_err(|_| malformed("member", key))?;
    }
    if !rest.is_empty() {
        return Err(malformed("member", key));
    }
    Ok(member)
}

/// The fields of a line record (`LineRecord`) and a collection member (`CollectionMember`) by the names they are
/// encoded under, in the order `encode_line` and `encode_member` write them.
pub(crate) const LINE_RECORD_FIELDS: &[&str] = &["count", "text"];
pub(crate) const COLLECTION_MEMBER_FIELDS: &[&str] = &["version", "counted"];

fn encode_line(count: i64, text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + 16);
    // Writing to a Vec cannot fail.
    rmp::encode::write_array_len(&mut out, 2).expect("write to a Vec");
    rmp::encode::write_sint(&mut out, count).expect("write to a Vec");
    rmp::encode::write_str(&mut out, text).expect("write to a Vec");
    out
}

fn encode_member(version: i64, counted: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(12);
    rmp::encode::write_array_len(&mut out, 2).expect("write to a Vec");
    rmp::encode::write_sint(&mut out, version).expect("write to a Vec");
    rmp::encode::write_bool(&mut out, counted).expect("write to a Vec");
    out
}

/// Keys in order of first use, each with its slot.
#[derive(Default)]
struct Keys {
    names: Vec<String>,
    slot: HashMap<String, usize>,
}

impl Keys {
    fn add(&mut self, key: String) -> usize {
        if let Some(&at) = self.slot.get(&key) {
            return at;
        }
        let at = self.names.len();
        self.slot.insert(key.clone(), at);
        self.names.push(key);
        at
    }
}

/// A member or line record's key, `f"{kind}\0{collection}\0{name}"` (`collection.member_key`, `line_key`),
/// built without the formatting machinery (about 950 instructions a key through `format!`).
fn record_key(kind: &str, collection: &str, name: &str) -> String {
    let mut key = String::with_capacity(kind.len() + collection.len() + name.len() + 2);
    key.push_str(kind);
    key.push('\0');
    key.push_str(collection);
    key.push('\0');
    key.push_str(name);
    key
}

/// count_lines(updates, read, docs, watch, min_docs, fraction)
/// --
///
/// Apply a batch of line updates, ``updates`` as ``(collection, source_id, version, counted, added, removed)``
/// in order (``added`` as ``(line hash, normalized line)``), to the counts of their lines and their sources'
/// member records, read with one call of ``read(keys)``. An update applies only if its version is newer than its
/// source's member record. ``docs`` gives each updated collection's document count before the batch, and
/// ``watch`` the line hashes of a collection whose final state is wanted whatever it is (its boilerplate and
/// reviewed lines).
///
/// Return the changed records in key order as ``(key, value or None once gone)``, whether each update applied, the
/// document count of each collection an update applied to, and per such collection the changed lines that may be
/// boilerplate now, as ``{line hash: (count, normalized line) or None once gone}``: those watched, and, when the
/// collection has at least ``min_docs`` documents (and ``min_docs`` is positive), those found in at least
/// ``fraction`` of them.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn count_lines<'py>(
    py: Python<'py>,
    updates: Vec<Update>,
    read: &Bound<'py, PyAny>,
    docs: HashMap<String, i64>,
    watch: HashMap<String, HashSet<String>>,
    min_docs: i64,
    fraction: f64,
) -> PyResult<(
    Vec<(Bound<'py, PyString>, Option<Bound<'py, PyBytes>>)>,
    Vec<bool>,
    HashMap<String, i64>,
    Bound<'py, PyDict>,
)> {
    // Member keys first, then line keys, each once, in order of first use.
    let mut keys = Keys::default();
    let member_at: Vec<usize> = updates
        .iter()
        .map(|(collection, source_id, ..)| keys.add(record_key("m", collection, source_id)))
        .collect();
    let first_line = keys.names.len();
    let added_lines = updates
        .iter()
        .map(|(.., added, _)| streamdedup_kernels::text::read_added_lines(added))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PyValueError::new_err(format!("malformed line update: {e}")))?;
    let mut line_at: Vec<(Vec<usize>, Vec<usize>)> = Vec::with_capacity(updates.len());
    for ((collection, _, _, _, _, removed), added) in updates.iter().zip(&added_lines) {
        let mut at = |hashed: &str| keys.add(record_key("l", collection, hashed));
        let added = added.iter().map(|(hashed, _)| at(hashed)).collect();
        let removed = removed.iter().map(|hashed| at(hashed)).collect();
        line_at.push((added, removed));
    }
    let names: Vec<Bound<'py, PyString>> =
        keys.names.iter().map(|k| PyString::new(py, k)).collect();
    // The values as the Python bytes the read returned: each is decoded in place, once, not copied first.
    let stored: Vec<Option<Bound<'py, PyBytes>>> = read.call1((names.clone(),))?.extract()?;
    if stored.len() != names.len() {
        return Err(PyValueError::new_err("read returned a value per key"));
    }
    // Decoded records by slot, once read: members (version, counted) before `first_line`, then lines
    // (count, text); the inner None where absent.
    let mut members: Vec<Option<Option<(i64, bool)>>> = vec![None; first_line];
    let mut lines: Vec<Option<Option<(i64, String)>>> = vec![None; names.len() - first_line];
    let mut changed = vec![false; names.len()];
    let mut applied = Vec::with_capacity(updates.len());
    let mut totals: HashMap<String, i64> = HashMap::default();
    // Per collection, in order of first application, the lines changed, once each: (line slot, line hash).
    let mut touched: Vec<(String, Vec<(usize, &str)>)> = Vec::new();
    let mut touched_at: HashMap<String, usize> = HashMap::default();
    for (u, ((collection, _, version, counted, _, removed), added)) in
        updates.iter().zip(&added_lines).enumerate()
    {
        let slot = member_at[u];
        let member = loaded(
            &mut members[slot],
            &stored[slot],
            &keys.names[slot],
            decode_member,
        )?;
        let (was_version, was_counted) = member.unwrap_or((-1, false));
        if *version <= was_version {
            applied.push(false);
            continue;
        }
        applied.push(true);
        *member = Some((*version, *counted));
        changed[slot] = true;
        *totals
            .entry(collection.to_string())
            .or_insert_with(|| docs.get(&**collection).copied().unwrap_or(0)) +=
            i64::from(*counted) - i64::from(was_counted);
        let next = touched.len();
        let at = *touched_at.entry(collection.to_string()).or_insert(next);
        if at == next {
            touched.push((collection.to_string(), Vec::new()));
        }
        let changes = &mut touched[at].1;
        let (added_at, removed_at) = &line_at[u];
        for ((hashed, text), &slot) in added.iter().zip(added_at) {
            let cell = &mut lines[slot - first_line];
            let line = loaded(cell, &stored[slot], &keys.names[slot], decode_line)?;
            let count = line.as_ref().map_or(0, |(count, _)| *count);
            *line = Some((count + 1, text.to_string()));
            if !std::mem::replace(&mut changed[slot], true) {
                changes.push((slot, hashed)); // each line once, however many updates change it
            }
        }
        for (hashed, &slot) in removed.iter().zip(removed_at) {
            let cell = &mut lines[slot - first_line];
            let line = loaded(cell, &stored[slot], &keys.names[slot], decode_line)?;
            let Some((count, _)) = line else {
                continue;
            };
            if *count > 1 {
                *count -= 1;
            } else {
                *line = None;
            }
            if !std::mem::replace(&mut changed[slot], true) {
                changes.push((slot, hashed));
            }
        }
    }
    let mut order: Vec<usize> = (0..names.len()).filter(|&k| changed[k]).collect();
    order.sort_unstable_by(|&x, &y| keys.names[x].cmp(&keys.names[y]));
    let mut writes = Vec::with_capacity(order.len());
    for slot in order {
        let value = if slot < first_line {
            members[slot]
                .flatten()
                .map(|(version, counted)| encode_member(version, counted))
        } else {
            lines[slot - first_line]
                .as_ref()
                .and_then(Option::as_ref)
                .map(|(count, text)| encode_line(*count, text))
        };
        writes.push((names[slot].clone(), value.map(|raw| PyBytes::new(py, &raw))));
    }
    let found = PyDict::new(py);
    for (collection, changes) in &touched {
        let total = totals[collection];
        let enabled = min_docs > 0 && total >= min_docs;
        let threshold = fraction * total as f64;
        let watched = watch.get(collection);
        let per = PyDict::new(py);
        for &(slot, hashed) in changes {
            let line = lines[slot - first_line].as_ref().and_then(Option::as_ref);
            let wanted = watched.is_some_and(|w| w.contains(hashed))
                || (enabled && line.is_some_and(|(count, _)| *count as f64 >= threshold));
            match line {
                _ if !wanted => {}
                Some((count, text)) => per.set_item(hashed, (*count, text))?,
                None => per.set_item(hashed, py.None())?,
            }
        }
        found.set_item(collection, per)?;
    }
    Ok((writes, applied, totals, found))
}

/// The record in `cell` (None where absent), decoded from `raw` on first use.
fn loaded<'a, T>(
    cell: &'a mut Option<Option<T>>,
    raw: &Option<Bound<'_, PyBytes>>,
    key: &str,
    decode: fn(&[u8], &str) -> PyResult<T>,
) -> PyResult<&'a mut Option<T>> {
    if cell.is_none() {
        *cell = Some(match raw {
            Some(raw) => Some(decode(raw.as_bytes(), key)?),
            None => None,
        });
    }
    Ok(cell.as_mut().expect("loaded above"))
}
