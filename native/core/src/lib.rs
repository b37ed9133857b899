//! The kernels of streamdedup in plain Rust, without Python: the records the stages store and the messages they
//! exchange, encoded as msgspec encodes them (`mp`, `model`), the canonical policy and clustering (`policy`),
//! MinHash signatures and LSH band keys (`signature`), text normalization and line keys (`text`), exact
//! similarity (`shingles`), the keys and values the content stage writes (`keys`, `json`), the content stage's
//! batch (`stage`), the band stage's (`bands`), the collection stage's line counts (`lines`), a source's chunks,
//! packed references, statuses and mapping (`chunks`, `refs`, `mapping`), and the state's record cache (`cache`).
//!
//! The Python extension (`streamdedup.core._native`, the crate one directory up) binds these with PyO3. Each
//! kernel has a Python twin in the package that gives the same results, and the package's tests compare them;
//! this crate's own tests (`cargo test -p streamdedup-kernels`) check each part alone.

pub mod bands;
pub mod cache;
pub mod chunks;
pub mod json;
pub mod keys;
pub mod lines;
pub mod mapping;
pub mod model;
pub mod mp;
pub mod policy;
pub mod refs;
pub mod shingles;
pub mod signature;
pub mod stage;
pub mod text;

/// Lowercase hex of `bytes`, as Python's `bytes.hex()`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(2 * bytes.len());
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    out
}

/// The `width` last decimal digits of a non-negative `value`, zero-padded, written without the formatting machinery.
pub fn push_digits(text: &mut String, value: i64, width: u32) {
    let mut divisor = 10_i64.pow(width - 1);
    while divisor > 0 {
        text.push(char::from(b'0' + (value / divisor % 10) as u8));
        divisor /= 10;
    }
}
