//! Normalization of ASCII text (`streamdedup.core.normalize`, whose `words` is the twin the tests compare this
//! with): lowercase, words split on Python's whitespace, Unicode punctuation stripped from each word's edges,
//! words joined by one space; and the boilerplate keys of a document's lines
//! (`streamdedup.core.stages.source.document_lines`).

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;

/// What `str.isspace()` holds true in ASCII: `str.split()` splits there.
fn is_space(byte: u8) -> bool {
    matches!(
        byte,
        b'\t' | b'\n' | 0x0B | 0x0C | b'\r' | 0x1C..=0x1F | b' '
    )
}

/// The ASCII characters of Unicode's punctuation categories (P*), what `\p{P}` matches in ASCII.
fn is_punctuation(byte: u8) -> bool {
    matches!(
        byte,
        b'!' | b'"'
            | b'#'
            | b'%'
            | b'&'
            | b'\''
            | b'('
            | b')'
            | b'*'
            | b','
            | b'-'
            | b'.'
            | b'/'
            | b':'
            | b';'
            | b'?'
            | b'@'
            | b'['
            | b'\\'
            | b']'
            | b'_'
            | b'{'
            | b'}'
    )
}

/// The normalized form of ASCII bytes: each word lowered into the output whole, not a character at a time.
fn normalize_bytes(bytes: &[u8]) -> String {
    let mut out: Vec<u8> = Vec::with_capacity(bytes.len());
    for raw in bytes.split(|&b| is_space(b)) {
        let Some(start) = raw.iter().position(|&b| !is_punctuation(b)) else {
            continue;
        };
        let end = raw
            .iter()
            .rposition(|&b| !is_punctuation(b))
            .map_or(start, |e| e + 1);
        if !out.is_empty() {
            out.push(b' ');
        }
        let at = out.len();
        out.extend_from_slice(&raw[start..end]);
        out[at..].make_ascii_lowercase();
    }
    // Cut only at ASCII bytes and lowered only there, UTF-8 stays UTF-8.
    String::from_utf8(out).expect("normalizing UTF-8 gives UTF-8")
}

/// normalize_ascii(text)
/// --
///
/// Return the normalized form of an ASCII ``text`` (``normalize.normalize``), or None if it is not ASCII.
#[pyfunction]
pub fn normalize_ascii(text: PyBackedStr) -> Option<String> {
    normalized_ascii(&text)
}

/// The normalized form of an ASCII ``text``, or None if it is not ASCII.
pub fn normalized_ascii(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    if !bytes.is_ascii() {
        return None;
    }
    Some(normalize_bytes(bytes))
}

/// The BLAKE2b digest of `data` with an 8-byte output (Python's `hashlib.blake2b(data, digest_size=8)`).
pub(crate) fn blake2b_64(data: &[u8]) -> [u8; 8] {
    let mut digest = [0u8; 8];
    digest.copy_from_slice(blake2b(data, 8).as_bytes());
    digest
}

/// The BLAKE2b digest of `data` with a `size`-byte output, by the SIMD implementation the CPU has.
pub(crate) fn blake2b(data: &[u8], size: usize) -> blake2b_simd::Hash {
    blake2b_simd::Params::new().hash_length(size).hash(data)
}

/// line_hashes(text, max_chars)
/// --
///
/// Return ``(line_hash(normalized), normalized)`` for each line of an ASCII ``text`` (split on newlines) whose
/// normalized form is not empty and at most ``max_chars`` long, in order (``collection.line_hash``: the hex
/// BLAKE2b-64 of the normalized line); None if ``text`` is not ASCII.
#[pyfunction]
pub fn line_hashes(text: PyBackedStr, max_chars: usize) -> Option<Vec<(String, String)>> {
    let bytes = text.as_bytes();
    if !bytes.is_ascii() {
        return None;
    }
    let mut found = Vec::new();
    for line in bytes.split(|&b| b == b'\n') {
        let normalized = normalize_bytes(line);
        if normalized.is_empty() || normalized.len() > max_chars {
            continue;
        }
        found.push((crate::hex(&blake2b_64(normalized.as_bytes())), normalized));
    }
    Some(found)
}
