//! The compiled kernels of streamdedup (`streamdedup._native`): MinHash signatures of a batch of texts, their LSH
//! band hashes, Kafka's partitioner hash, the content stage's batch (`content/`), the band stage's batch
//! (`bands.rs`), the collection stage's line counts (`lines.rs`), the normalization of ASCII text (`text.rs`), a
//! source's mapping (`mapping.rs`) and a store commit's loop over its changes (`batch.rs`).
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

/// Lowercase hex of `bytes`, as Python's `bytes.hex()`.
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(2 * bytes.len());
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    out
}

const FNV_OFFSET: u64 = 0xCBF2_9CE4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01B3;
const COMBINE: u64 = 0x9E37_79B9_7F4A_7C15;

#[inline]
fn mix64(mut h: u64) -> u64 {
    h = (h ^ (h >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    h ^ (h >> 31)
}

#[inline]
fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85EB_CA6B);
    h ^= h >> 13;
    h = h.wrapping_mul(0xC2B2_AE35);
    h ^ (h >> 16)
}

/// Fill `out` (one slot per permutation) with the signature of one normalized text and return its number of
/// distinct shingles. `words` and `shingles` are scratch space kept across texts.
fn text_signature(
    text: &[u8],
    size: usize,
    a: &[u32],
    b: &[u32],
    out: &mut [u32],
    words: &mut Vec<u64>,
    shingles: &mut Vec<u32>,
) -> i64 {
    words.clear();
    let mut h = FNV_OFFSET;
    let mut inside = false;
    for &byte in text {
        if byte == b' ' {
            if inside {
                words.push(mix64(h));
                inside = false;
            }
        } else {
            if !inside {
                h = FNV_OFFSET;
                inside = true;
            }
            h = (h ^ u64::from(byte)).wrapping_mul(FNV_PRIME);
        }
    }
    if inside {
        words.push(mix64(h));
    }
    out.fill(u32::MAX);
    if words.is_empty() {
        return 0;
    }
    // Shingles of `size` words, or the one shingle of all words of a shorter text.
    let width = size.clamp(1, words.len());
    shingles.clear();
    shingles.extend(words.windows(width).map(|window| {
        let acc = mix64(window.iter().fold(0u64, |acc, &word| {
            acc.wrapping_mul(COMBINE).wrapping_add(word)
        }));
        (acc ^ (acc >> 32)) as u32
    }));
    shingles.sort_unstable();
    shingles.dedup();
    for &shingle in shingles.iter() {
        let hv = fmix32(shingle);
        for ((slot, &ap), &bp) in out.iter_mut().zip(a).zip(b) {
            *slot = (*slot).min(ap.wrapping_mul(hv).wrapping_add(bp));
        }
    }
    shingles.len() as i64
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

/// The 64-bit hash of each band of a signature: the band's seed, then each of its `rows` values folded in with
/// the 64-bit finalizer.
fn hash_bands<'a>(
    signature: &'a [u32],
    seeds: &'a [u64],
    rows: usize,
) -> impl Iterator<Item = u64> + 'a {
    seeds.iter().enumerate().map(move |(band, &seed)| {
        signature[band * rows..(band + 1) * rows]
            .iter()
            .fold(seed, |h, &value| mix64(h ^ u64::from(value)))
    })
}

fn band_seeds(bands: usize) -> Vec<u64> {
    (0..bands as u64)
        .map(|band| mix64((band + 1).wrapping_mul(COMBINE)))
        .collect()
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
    const M: u32 = 0x5BD1_E995;
    let mut h: u32 = 0x9747_B28C ^ (data.len() as u32);
    let mut blocks = data.chunks_exact(4);
    for block in &mut blocks {
        let mut k = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let rest = blocks.remainder();
    if rest.len() == 3 {
        h ^= u32::from(rest[2]) << 16;
    }
    if rest.len() >= 2 {
        h ^= u32::from(rest[1]) << 8;
    }
    if !rest.is_empty() {
        h ^= u32::from(rest[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    i64::from(h & 0x7FFF_FFFF)
}

/// NumPy's legacy Mersenne Twister (``numpy.random.RandomState``) seeded with an integer: what datasketch draws
/// its permutations from.
struct Mt19937 {
    key: [u32; 624],
    pos: usize,
}

impl Mt19937 {
    fn new(seed: u32) -> Self {
        let mut key = [0u32; 624];
        key[0] = seed;
        for i in 1..624 {
            key[i] = 1_812_433_253u32
                .wrapping_mul(key[i - 1] ^ (key[i - 1] >> 30))
                .wrapping_add(i as u32);
        }
        Self { key, pos: 624 }
    }

    fn next_u32(&mut self) -> u32 {
        const UPPER: u32 = 0x8000_0000;
        const LOWER: u32 = 0x7FFF_FFFF;
        if self.pos == 624 {
            for i in 0..624 {
                let y = (self.key[i] & UPPER) | (self.key[(i + 1) % 624] & LOWER);
                let mag = if y & 1 == 1 { 0x9908_B0DF } else { 0 };
                self.key[i] = self.key[(i + 397) % 624] ^ (y >> 1) ^ mag;
            }
            self.pos = 0;
        }
        let mut y = self.key[self.pos];
        self.pos += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9D2C_5680;
        y ^= (y << 15) & 0xEFC6_0000;
        y ^ (y >> 18)
    }
}

/// The ``a`` and ``b`` of datasketch's affine permutations for ``seed``: ``RandomState(seed)``, then
/// ``randint(0, 2**31, num_perm, uint32) * 2 + 1`` and ``randint(0, 2**32, num_perm, uint32)``.
fn draw_permutations(seed: u32, num_perm: usize) -> (Vec<u32>, Vec<u32>) {
    let mut mt = Mt19937::new(seed);
    let a = (0..num_perm)
        .map(|_| {
            (mt.next_u32() & 0x7FFF_FFFF)
                .wrapping_mul(2)
                .wrapping_add(1)
        })
        .collect();
    let b = (0..num_perm).map(|_| mt.next_u32()).collect();
    (a, b)
}

/// The two-bit sketch of a signature: each value times 0x9E3779B1, its top two bits, four values
/// per byte from the low bits up (``streamdedup.core.sketches``).
fn sketch(signature: &[u32]) -> Vec<u8> {
    signature
        .chunks(4)
        .map(|four| {
            four.iter().enumerate().fold(0u8, |byte, (i, &v)| {
                byte | (((v.wrapping_mul(0x9E37_79B1) >> 30) as u8) << (2 * i))
            })
        })
        .collect()
}

/// One signature scheme: ``num_perm`` permutations drawn from ``seed``, shingles of ``shingle_size`` words.
#[pyclass(frozen, module = "streamdedup.core._native")]
pub(crate) struct Scheme {
    a: Vec<u32>,
    b: Vec<u32>,
    shingle_size: usize,
}

/// What `Scheme.features` returns for one text: distinct shingles, band keys, sketch.
type TextFeatures<'py> = (i64, Option<Vec<String>>, Bound<'py, PyBytes>);

/// The `width` last decimal digits of a non-negative `value`, zero-padded, written without the formatting machinery.
pub(crate) fn push_digits(text: &mut String, value: i64, width: u32) {
    let mut divisor = 10_i64.pow(width - 1);
    while divisor > 0 {
        text.push(char::from(b'0' + (value / divisor % 10) as u8));
        divisor /= 10;
    }
}

/// A band key as ``SignatureScheme.band_keys`` spells it: the band as three decimal digits, then the band's hash
/// as 16 hex digits (written directly: through the formatting machinery, the keys of a new text took some 25,000
/// instructions).
fn band_key(band: usize, hash: u64) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    if band > 999 {
        return format!("{band:03}{hash:016x}"); // more digits than three: rare enough for the slow way
    }
    let mut key = String::with_capacity(19);
    push_digits(&mut key, band as i64, 3);
    for shift in (0..16).rev() {
        key.push(char::from(HEX[(hash >> (4 * shift)) as usize & 0xf]));
    }
    key
}

/// What `Scheme.features` computes for one text.
pub(crate) struct Features {
    pub(crate) distinct: i64,
    pub(crate) bands: Option<Vec<u64>>,
    pub(crate) sketch: Vec<u8>,
}

#[pymethods]
impl Scheme {
    #[new]
    fn new(num_perm: usize, seed: u32, shingle_size: usize) -> PyResult<Self> {
        if num_perm == 0 || shingle_size == 0 {
            return Err(PyValueError::new_err(
                "num_perm and shingle_size must be positive",
            ));
        }
        let (a, b) = draw_permutations(seed, num_perm);
        Ok(Self { a, b, shingle_size })
    }

    /// The permutations' ``a`` and ``b``, as lists.
    fn permutations(&self) -> (Vec<u32>, Vec<u32>) {
        (self.a.clone(), self.b.clone())
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
        let perms = self.a.len();
        if bands.checked_mul(rows).is_none_or(|n| n > perms) {
            return Err(PyValueError::new_err(
                "bands x rows must not exceed num_perm",
            ));
        }
        Ok(py.detach(|| {
            let seeds = band_seeds(bands);
            let mut words = Vec::new();
            let mut shingles = Vec::new();
            let mut row = vec![0u32; perms];
            texts
                .iter()
                .map(|text| {
                    let distinct = text_signature(
                        text.as_bytes(),
                        self.shingle_size,
                        &self.a,
                        &self.b,
                        &mut row,
                        &mut words,
                        &mut shingles,
                    );
                    let bands = (distinct >= min_shingles)
                        .then(|| hash_bands(&row, &seeds, rows).collect());
                    Features {
                        distinct,
                        bands,
                        sketch: sketch(&row),
                    }
                })
                .collect()
        }))
    }
}

/// The band keys of a text's band hashes, in band order (`band_key`).
pub(crate) fn band_keys(hashes: &[u64]) -> Vec<String> {
    hashes
        .iter()
        .enumerate()
        .map(|(band, h)| band_key(band, *h))
        .collect()
}

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    keep_purged_pages();
    module.add_class::<Scheme>()?;
    module.add_class::<cache::RecordCache>()?;
    module.add_class::<content::stage::ContentKernel>()?;
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
    Ok(())
}
