//! The collection stage's line counts for Python (`streamdedup_kernels::lines` holds them and describes the
//! records).

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::{PyBackedBytes, PyBackedStr};
use pyo3::types::{PyBytes, PyDict, PyString};
use streamdedup_kernels::lines::{count, plan, LineUpdate};

use crate::Bytes;

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

/// What `count_lines` returns: the writes, whether each update applied, the document counts, and the lines that
/// may be boilerplate.
type Counts<'py> = (
    Vec<(Bound<'py, PyString>, Option<Bound<'py, PyBytes>>)>,
    Vec<bool>,
    HashMap<String, i64>,
    Bound<'py, PyDict>,
);

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
pub fn count_lines<'py>(
    py: Python<'py>,
    updates: Vec<Update>,
    read: &Bound<'py, PyAny>,
    docs: HashMap<String, i64>,
    watch: HashMap<String, HashSet<String>>,
    min_docs: i64,
    fraction: f64,
) -> PyResult<Counts<'py>> {
    let updates: Vec<LineUpdate<'_, PyBackedStr>> = updates
        .iter()
        .map(
            |(collection, source_id, version, counted, added, removed)| LineUpdate {
                collection,
                source_id,
                version: *version,
                counted: *counted,
                added,
                removed,
            },
        )
        .collect();
    let plan = plan(&updates).map_err(PyValueError::new_err)?;
    let names: Vec<Bound<'py, PyString>> =
        plan.names.iter().map(|k| PyString::new(py, k)).collect();
    // The values as the Python bytes the read returned: each is decoded in place, once, not copied first.
    let stored: Vec<Option<Bound<'py, PyBytes>>> = read.call1((names.clone(),))?.extract()?;
    if stored.len() != names.len() {
        return Err(PyValueError::new_err("read returned a value per key"));
    }
    let stored: Vec<Option<Bytes<'py>>> = stored.into_iter().map(|raw| raw.map(Bytes)).collect();
    let counted = count(&updates, &plan, &stored, &docs).map_err(PyValueError::new_err)?;
    let writes = counted
        .writes
        .iter()
        .map(|(slot, value)| {
            let value = value.as_ref().map(|raw| PyBytes::new(py, raw));
            (names[*slot].clone(), value)
        })
        .collect();
    let found = PyDict::new(py);
    for (collection, lines) in counted.found(&watch, min_docs, fraction) {
        let per = PyDict::new(py);
        for (hashed, line) in lines {
            match line {
                Some((count, text)) => per.set_item(hashed, (count, text))?,
                None => per.set_item(hashed, py.None())?,
            }
        }
        found.set_item(collection, per)?;
    }
    Ok((writes, counted.applied, counted.totals, found))
}
