//! The compiled kernels of streamdedup for Python (`streamdedup.core._native`): thin PyO3 bindings of the core crate
//! (`streamdedup_kernels`, in `core/`), which holds their logic without Python. Here are MinHash signatures of a
//! batch of texts and their LSH band hashes (on NumPy buffers), Kafka's partitioner hash, the content stage's batch
//! with its Python host (`content/`), the band stage's batch (`bands.rs`), the collection stage's line counts
//! (`lines.rs`), the normalization of ASCII text and line keys (`text.rs`), a source's chunks, references and
//! mapping (`chunks.rs`, `refs.rs`, `mapping.rs`), the record cache (`cache.rs`), a store commit's loop over its
//! changes (`batch.rs`) and the record structs' field lists (`fields.rs`).
//!
//! Each kernel has a NumPy or pure-Python twin in the package that gives the same results
//! (`streamdedup.core.numpy_kernels`, `streamdedup.core.partitioning.murmur2`,
//! `streamdedup.core.stages.content.ContentStageInPython`,
//! `streamdedup.core.stages.bands.apply_in_python`, `streamdedup.core.stages.collection.count_in_python`,
//! `streamdedup.core.normalize.words`, `streamdedup.core.stages.source.mapping_in_python`);
//! the tests compare them on random and hostile input. The hash functions are spelled out in
//! `streamdedup/core/signatures.py`. The commit loop has none: the store contract tests read back what it wrote.

// The content stage builds and drops many small records per message: mimalloc does that in a fraction of the time
// glibc's allocator takes in a process whose heap Python shares (copies of a text: 2.3 against 0.5 us a message to
// drop a batch's working set).
// Built with `no_thp`: mimalloc then leaves its memory to the system's huge page setting instead of asking for huge
// pages. Each huge page is zeroed in full when first touched, however little of it a batch uses; without them,
// `streamdedup run` on 10,000 positions took 1.02-1.03 instead of 1.16-1.18 s (best of 10-12 alternated runs) in two
// sessions, and the same time in a third: the gain depends on the machine, and it never measured slower.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_decommits` (`mimalloc.h`, the v3 that libmimalloc-sys builds).
const MI_OPTION_PURGE_DECOMMITS: libmimalloc_sys::mi_option_t = 5;

/// Let mimalloc purge freed memory with `MADV_FREE` instead of `MADV_DONTNEED` (unless `MIMALLOC_PURGE_DECOMMITS`
/// says otherwise). mimalloc purges memory left free for a second; with `MADV_DONTNEED` the next batch that needs it
/// faults every page in again, zeroed. With `MADV_FREE` the system takes the pages back only when it is short of
/// memory, and until then they are reused as they are. The Django docs in one process: 7.30-7.99 against 8.11-8.16 s
/// (four alternated runs each), 120,000 fewer page faults. The pages kept count in the resident size until the
/// system reclaims them (the same run's peak: 1.41 against 1.05-1.11 GB).
fn keep_purged_pages() {
    if std::env::var_os("MIMALLOC_PURGE_DECOMMITS").is_none() {
        // SAFETY: sets one of mimalloc's options, which it reads at each purge.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DECOMMITS, 0) };
    }
}

mod bands;
mod batch;
mod cache;
mod chunks;
mod content;
mod fields;
mod json;
mod lines;
mod mapping;
mod refs;
mod text;

use pyo3::buffer::{Element, PyBuffer};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::PyBytes;
use streamdedup_kernels::signature::{
    self, band_keys, band_seeds, hash_bands, text_signature, Features,
};

/// A stored value as a read returned it: Python bytes, decoded in place.
pub struct Bytes<'py>(pub Bound<'py, PyBytes>);

impl AsRef<[u8]> for Bytes<'_> {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// Refuse a buffer whose format names the other byte order (PyO3 checks the item's kind and size, not its order).
fn native_order<T: Element>(buffer: &PyBuffer<T>, name: &str) -> PyResult<()> {
    let other: &[u8] = if cfg!(target_endian = "little") {
        b">!"
    } else {
        b"<"
    };
    match buffer.format().to_bytes().first() {
        Some(order) if other.contains(order) => Err(PyValueError::new_err(format!(
            "{name} must be in the machine's byte order"
        ))),
        _ => Ok(()),
    }
}

/// A copy of a buffer's elements: the computation then runs on memory of its own, without the GIL, whatever
/// other threads do to the buffer meanwhile.
fn elements<T: Element + Copy>(
    py: Python<'_>,
    buffer: &PyBuffer<T>,
    name: &str,
) -> PyResult<Vec<T>> {
    native_order(buffer, name)?;
    buffer.to_vec(py)
}

/// Check that a buffer can take `count` results.
fn writable<T: Element>(buffer: &PyBuffer<T>, name: &str, count: Option<usize>) -> PyResult<()> {
    native_order(buffer, name)?;
    if buffer.readonly() {
        return Err(PyValueError::new_err(format!("{name} must be writable")));
    }
    if count != Some(buffer.item_count()) {
        return Err(PyValueError::new_err(format!(
            "{name} has {} slots, not the {} the results need",
            buffer.item_count(),
            count.map_or_else(|| "too many".to_owned(), |n| n.to_string())
        )));
    }
    Ok(())
}

/// signatures(data, offsets, size, a, b, out, distinct)
/// --
///
/// Fill ``out`` (texts x permutations, uint32) and ``distinct`` (texts, int64) with the signature and the number
/// of distinct shingles of each text ``data[offsets[i]:offsets[i + 1]]`` (UTF-8 bytes of normalized text; words
/// are runs of bytes other than a space), as ``numpy_kernel`` does. Computes on copies, without the GIL.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn signatures(
    py: Python<'_>,
    data: PyBuffer<u8>,
    offsets: PyBuffer<i64>,
    size: usize,
    a: PyBuffer<u32>,
    b: PyBuffer<u32>,
    out: PyBuffer<u32>,
    distinct: PyBuffer<i64>,
) -> PyResult<()> {
    let (a, b) = (elements(py, &a, "a")?, elements(py, &b, "b")?);
    if b.len() != a.len() {
        return Err(PyValueError::new_err("a and b must have the same length"));
    }
    let offsets = elements(py, &offsets, "offsets")?;
    let texts = offsets.len().saturating_sub(1);
    writable(&out, "out", texts.checked_mul(a.len()))?;
    writable(&distinct, "distinct", Some(texts))?;
    let data = elements(py, &data, "data")?;
    let spans = offsets
        .windows(2)
        .map(
            |pair| match (usize::try_from(pair[0]), usize::try_from(pair[1])) {
                (Ok(start), Ok(end)) if start <= end && end <= data.len() => Ok(start..end),
                _ => Err(PyValueError::new_err("offsets must rise within data")),
            },
        )
        .collect::<PyResult<Vec<_>>>()?;
    let (rows, counts) = py.detach(|| {
        let perms = a.len();
        let mut rows = vec![0u32; texts * perms];
        let mut counts = Vec::with_capacity(texts);
        let (mut words, mut shingles) = (Vec::new(), Vec::new());
        for (c, span) in spans.into_iter().enumerate() {
            counts.push(text_signature(
                &data[span],
                size,
                &a,
                &b,
                &mut rows[c * perms..(c + 1) * perms],
                &mut words,
                &mut shingles,
            ));
        }
        (rows, counts)
    });
    out.copy_from_slice(py, &rows)?;
    distinct.copy_from_slice(py, &counts)
}

/// band_hashes(signatures, perms, bands, rows, out)
/// --
///
/// Fill ``out`` (texts x bands, uint64) with the 64-bit hash of each band of every signature row of
/// ``signatures`` (texts x perms, uint32), as ``SignatureScheme.band_hashes`` spells it. Computes on a copy,
/// without the GIL.
#[pyfunction]
fn band_hashes(
    py: Python<'_>,
    signatures: PyBuffer<u32>,
    perms: usize,
    bands: usize,
    rows: usize,
    out: PyBuffer<u64>,
) -> PyResult<()> {
    let values = elements(py, &signatures, "signatures")?;
    if perms == 0 || values.len() % perms != 0 || bands.checked_mul(rows).is_none_or(|n| n > perms)
    {
        return Err(PyValueError::new_err(
            "signatures must be texts x perms, with bands x rows <= perms",
        ));
    }
    let texts = values.len() / perms;
    writable(&out, "out", texts.checked_mul(bands))?;
    let hashes = py.detach(|| {
        let seeds = band_seeds(bands);
        values
            .chunks_exact(perms)
            .flat_map(|signature| hash_bands(signature, &seeds, rows))
            .collect::<Vec<u64>>()
    });
    out.copy_from_slice(py, &hashes)
}

/// positive_murmur2(data)
/// --
///
/// Return ``murmur2(data) & 0x7FFFFFFF``: Kafka's default partitioner hash, before the modulo.
#[pyfunction]
fn positive_murmur2(data: &[u8]) -> i64 {
    signature::positive_murmur2(data)
}

/// One signature scheme: ``num_perm`` permutations drawn from ``seed``, shingles of ``shingle_size`` words.
#[pyclass(frozen, module = "streamdedup.core._native")]
pub(crate) struct Scheme {
    inner: signature::Scheme,
}

/// What `Scheme.features` returns for one text: distinct shingles, band keys, sketch.
type TextFeatures<'py> = (i64, Option<Vec<String>>, Bound<'py, PyBytes>);

#[pymethods]
impl Scheme {
    #[new]
    fn new(num_perm: usize, seed: u32, shingle_size: usize) -> PyResult<Self> {
        match signature::Scheme::new(num_perm, seed, shingle_size) {
            Some(inner) => Ok(Self { inner }),
            None => Err(PyValueError::new_err(
                "num_perm and shingle_size must be positive",
            )),
        }
    }

    /// The permutations' ``a`` and ``b``, as lists.
    fn permutations(&self) -> (Vec<u32>, Vec<u32>) {
        (self.inner.a.clone(), self.inner.b.clone())
    }

    /// features(texts, bands, rows, min_shingles)
    /// --
    ///
    /// Return, for each normalized text, ``(distinct shingles, band keys or None, sketch)``: the LSH band keys
    /// (``SignatureScheme.band_keys``) only for a text of at least ``min_shingles`` distinct shingles, and the
    /// two-bit sketch of its signature (``sketches.sketches``). Computed without the GIL.
    fn features<'py>(
        &self,
        py: Python<'py>,
        texts: Vec<PyBackedStr>,
        bands: usize,
        rows: usize,
        min_shingles: i64,
    ) -> PyResult<Vec<TextFeatures<'py>>> {
        let texts: Vec<&str> = texts.iter().map(|t| &**t).collect();
        Ok(self
            .compute(py, &texts, bands, rows, min_shingles)?
            .into_iter()
            .map(|f| {
                let keys = f.bands.as_deref().map(band_keys);
                (f.distinct, keys, PyBytes::new(py, &f.sketch))
            })
            .collect())
    }
}

impl Scheme {
    /// What `features` computes for each text, without the GIL, kept in Rust: the content kernel calls this
    /// directly, so a new text's band keys do not cross into Python and back before they join their bands.
    pub(crate) fn compute(
        &self,
        py: Python<'_>,
        texts: &[&str],
        bands: usize,
        rows: usize,
        min_shingles: i64,
    ) -> PyResult<Vec<Features>> {
        if !self.inner.fits(bands, rows) {
            return Err(PyValueError::new_err(
                "bands x rows must not exceed num_perm",
            ));
        }
        Ok(py.detach(|| self.inner.features(texts, bands, rows, min_shingles)))
    }
}

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    keep_purged_pages();
    module.add_class::<Scheme>()?;
    module.add_class::<cache::RecordCache>()?;
    module.add_class::<content::kernel::ContentKernel>()?;
    module.add_function(wrap_pyfunction!(signatures, module)?)?;
    module.add_function(wrap_pyfunction!(band_hashes, module)?)?;
    module.add_function(wrap_pyfunction!(positive_murmur2, module)?)?;
    module.add_function(wrap_pyfunction!(bands::apply_bands, module)?)?;
    module.add_function(wrap_pyfunction!(batch::fill_write_batch, module)?)?;
    module.add_function(wrap_pyfunction!(lines::count_lines, module)?)?;
    module.add_function(wrap_pyfunction!(text::normalize_ascii, module)?)?;
    module.add_function(wrap_pyfunction!(text::line_hashes, module)?)?;
    module.add_function(wrap_pyfunction!(text::line_update, module)?)?;
    module.add_function(wrap_pyfunction!(mapping::source_mapping, module)?)?;
    module.add_function(wrap_pyfunction!(mapping::merge_statuses, module)?)?;
    module.add_function(wrap_pyfunction!(chunks::plain_chunks, module)?)?;
    module.add_function(wrap_pyfunction!(refs::source_refs, module)?)?;
    module.add_function(wrap_pyfunction!(refs::split_refs, module)?)?;
    module.add_function(wrap_pyfunction!(content::content_reencode, module)?)?;
    module.add_function(wrap_pyfunction!(json::json_from_msgpack, module)?)?;
    module.add_function(wrap_pyfunction!(fields::record_fields, module)?)?;
    Ok(())
}
