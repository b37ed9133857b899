//! The band stage's batch for Python (`streamdedup_kernels::bands` holds it and describes the buckets).

use rustc_hash::FxHashMap as HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};
use streamdedup_kernels::bands::{apply, BandOp};

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
    let mut batch: Vec<BandOp<'_>> = Vec::with_capacity(ops.len());
    for (join, content_hash, epoch, keys) in &ops {
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
        batch.push(BandOp {
            join: *join,
            content_hash: content_hash.to_str()?,
            epoch: *epoch,
            bands: at,
        });
    }
    let stored: Vec<Option<Vec<u8>>> = read.call1((names.clone(),))?.extract()?;
    if stored.len() != names.len() {
        return Err(PyValueError::new_err("read returned a value per key"));
    }
    let mut buckets: Vec<Vec<u8>> = stored.into_iter().map(Option::unwrap_or_default).collect();
    let mut changed = vec![false; buckets.len()];
    let joined = apply(&batch, &mut buckets, &mut changed, limit).map_err(PyValueError::new_err)?;
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
        let candidates = answer
            .candidates
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
