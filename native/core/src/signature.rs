//! MinHash signatures of normalized texts, their LSH band hashes and keys, their two-bit sketches, and Kafka's
//! partitioner hash, as `streamdedup/core/signatures.py` spells them out (`numpy_kernels` is the NumPy twin).

use crate::push_digits;

const FNV_OFFSET: u64 = 0xCBF2_9CE4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01B3;
const COMBINE: u64 = 0x9E37_79B9_7F4A_7C15;

#[inline]
pub fn mix64(mut h: u64) -> u64 {
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
pub fn text_signature(
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

/// The 64-bit hash of each band of a signature: the band's seed, then each of its `rows` values folded in with
/// the 64-bit finalizer.
pub fn hash_bands<'a>(
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

pub fn band_seeds(bands: usize) -> Vec<u64> {
    (0..bands as u64)
        .map(|band| mix64((band + 1).wrapping_mul(COMBINE)))
        .collect()
}

/// ``murmur2(data) & 0x7FFFFFFF``: Kafka's default partitioner hash, before the modulo.
pub fn positive_murmur2(data: &[u8]) -> i64 {
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
pub fn draw_permutations(seed: u32, num_perm: usize) -> (Vec<u32>, Vec<u32>) {
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
pub fn sketch(signature: &[u32]) -> Vec<u8> {
    signature
        .chunks(4)
        .map(|four| {
            four.iter().enumerate().fold(0u8, |byte, (i, &v)| {
                byte | (((v.wrapping_mul(0x9E37_79B1) >> 30) as u8) << (2 * i))
            })
        })
        .collect()
}

/// A band key as ``SignatureScheme.band_keys`` spells it: the band as three decimal digits, then the band's hash
/// as 16 hex digits (written directly: through the formatting machinery, the keys of a new text took some 25,000
/// instructions).
pub fn band_key(band: usize, hash: u64) -> String {
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
pub struct Features {
    pub distinct: i64,
    pub bands: Option<Vec<u64>>,
    pub sketch: Vec<u8>,
}

/// The band keys of a text's band hashes, in band order (`band_key`).
pub fn band_keys(hashes: &[u64]) -> Vec<String> {
    hashes
        .iter()
        .enumerate()
        .map(|(band, h)| band_key(band, *h))
        .collect()
}

/// One signature scheme: ``num_perm`` permutations drawn from ``seed``, shingles of ``shingle_size`` words.
pub struct Scheme {
    pub a: Vec<u32>,
    pub b: Vec<u32>,
    pub shingle_size: usize,
}

impl Scheme {
    /// The scheme of ``num_perm`` permutations drawn from ``seed`` (None unless both sizes are positive).
    pub fn new(num_perm: usize, seed: u32, shingle_size: usize) -> Option<Self> {
        if num_perm == 0 || shingle_size == 0 {
            return None;
        }
        let (a, b) = draw_permutations(seed, num_perm);
        Some(Scheme { a, b, shingle_size })
    }

    /// Whether ``bands`` of ``rows`` fit in its signatures.
    pub fn fits(&self, bands: usize, rows: usize) -> bool {
        bands.checked_mul(rows).is_some_and(|n| n <= self.a.len())
    }

    /// For each text: its number of distinct shingles, its band hashes (only for a text of at least
    /// ``min_shingles``), and its signature's sketch. ``bands`` x ``rows`` must fit (`Scheme::fits`).
    pub fn features(
        &self,
        texts: &[&str],
        bands: usize,
        rows: usize,
        min_shingles: i64,
    ) -> Vec<Features> {
        let perms = self.a.len();
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
                let bands =
                    (distinct >= min_shingles).then(|| hash_bands(&row, &seeds, rows).collect());
                Features {
                    distinct,
                    bands,
                    sketch: sketch(&row),
                }
            })
            .collect()
    }
}
