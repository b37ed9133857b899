//! Normalization of ASCII text (`streamdedup.core.normalize`, whose `words` is the twin the tests compare this
//! with): lowercase, words split on Python's whitespace, Unicode punctuation stripped from each word's edges,
//! words joined by one space; the boilerplate keys of a document's lines
//! (`streamdedup.core.stages.source.document_lines`), and the BLAKE2b digests they and the records use.

use rustc_hash::FxHashSet as HashSet;

use crate::mp::{read_list, Reader, Result, Writer};

/// The class of each byte in normalizing: a word's character, what `str.isspace()` holds true in ASCII
/// (`str.split()` splits there), or one of the ASCII characters of Unicode's punctuation categories (P*, what
/// `\p{P}` matches in ASCII).
const WORD: u8 = 0;
const SPACE: u8 = 1;
const PUNCTUATION: u8 = 2;

static CLASS: [u8; 256] = {
    let mut class = [WORD; 256];
    let spaces = b"\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f ";
    let mut i = 0;
    while i < spaces.len() {
        class[spaces[i] as usize] = SPACE;
        i += 1;
    }
    let marks = b"!\"#%&'()*,-./:;?@[\\]_{}";
    let mut i = 0;
    while i < marks.len() {
        class[marks[i] as usize] = PUNCTUATION;
        i += 1;
    }
    class
};

/// The normalized form of UTF-8 bytes, ASCII whitespace and punctuation only: each word's edges cut of
/// punctuation, lowered, and the words joined by one space. Cut only at ASCII bytes and lowered only there,
/// UTF-8 stays UTF-8.
pub fn normalize_bytes(bytes: &[u8]) -> String {
    let class = |b: u8| CLASS[usize::from(b)];
    let mut out: Vec<u8> = Vec::with_capacity(bytes.len());
    let (n, mut i) = (bytes.len(), 0);
    while i < n {
        while i < n && class(bytes[i]) == SPACE {
            i += 1;
        }
        let mut start = i;
        while i < n && class(bytes[i]) != SPACE {
            i += 1;
        }
        let mut end = i;
        while start < end && class(bytes[start]) == PUNCTUATION {
            start += 1;
        }
        while end > start && class(bytes[end - 1]) == PUNCTUATION {
            end -= 1;
        }
        if start == end {
            continue;
        }
        if !out.is_empty() {
            out.push(b' ');
        }
        let at = out.len();
        out.extend_from_slice(&bytes[start..end]);
        out[at..].make_ascii_lowercase();
    }
    String::from_utf8(out).expect("normalizing UTF-8 gives UTF-8")
}

/// The normalized form of an ASCII ``text``, or None if it is not ASCII.
pub fn normalized_ascii(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    if !bytes.is_ascii() {
        return None;
    }
    Some(normalize_bytes(bytes))
}

/// A line's key, the hex digits of the BLAKE2b-64 of its normalized form (`collection.line_hash`).
pub fn line_key(normalized: &str) -> [u8; 16] {
    hex16(blake2b_64(normalized.as_bytes()))
}

/// The BLAKE2b digest of `data` with an 8-byte output (Python's `hashlib.blake2b(data, digest_size=8)`).
pub fn blake2b_64(data: &[u8]) -> [u8; 8] {
    let mut digest = [0u8; 8];
    digest.copy_from_slice(blake2b(data, 8).as_bytes());
    digest
}

/// The BLAKE2b digest of `data` with a `size`-byte output, by the SIMD implementation the CPU has.
pub fn blake2b(data: &[u8], size: usize) -> blake2b_simd::Hash {
    blake2b_simd::Params::new().hash_length(size).hash(data)
}

/// The hex digits of an 8-byte digest (`crate::hex`, without a `String`).
fn hex16(digest: [u8; 8]) -> [u8; 16] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 16];
    for (i, b) in digest.into_iter().enumerate() {
        out[2 * i] = DIGITS[usize::from(b >> 4)];
        out[2 * i + 1] = DIGITS[usize::from(b & 15)];
    }
    out
}

/// ``(line_hash(normalized), normalized)`` for each line of ASCII ``bytes`` whose normalized form is not empty and
/// at most ``max_chars`` long, in order.
pub fn kept_lines(bytes: &[u8], max_chars: usize) -> impl Iterator<Item = ([u8; 16], String)> + '_ {
    bytes.split(|&b| b == b'\n').filter_map(move |line| {
        let normalized = normalize_bytes(line);
        (!normalized.is_empty() && normalized.len() <= max_chars)
            .then(|| (line_key(&normalized), normalized))
    })
}

/// Read a packed line hash list (`state.pack_lines`: a MessagePack array of strings; empty bytes for none).
pub fn read_line_hashes(data: &[u8]) -> Result<Vec<&str>> {
    if data.is_empty() {
        return Ok(Vec::new());
    }
    let mut r = Reader::new(data);
    let n = r.array()?;
    (0..n).map(|_| r.str()).collect()
}

/// Read a packed list of added lines (`LineUpdate.added`: a MessagePack array of `[line hash, normalized line]`
/// arrays; empty bytes for none).
pub fn read_added_lines(data: &[u8]) -> Result<Vec<(&str, &str)>> {
    read_list(data, 2, "a line of 2 fields", |r| Ok((r.str()?, r.str()?)))
}

/// A document's lines as `line_update` returns them: packed sorted hashes, packed `[hash, line]` of those not
/// counted before, the hashes counted before and no longer there (sorted), and the number of lines.
pub type LineChanges = (Vec<u8>, Vec<u8>, Vec<String>, usize);

/// The lines a document counts in its collection and how they changed (`source.line_update_in_python`): those of
/// ASCII `bytes` (as `kept_lines` finds them) with `others` (line key and normalized line, found elsewhere in it),
/// against `old`, the packed hashes its last version counted.
pub fn line_update(
    bytes: &[u8],
    max_chars: usize,
    others: Vec<(String, String)>,
    old: &[u8],
) -> std::result::Result<LineChanges, String> {
    // Sorted by key, the last found of equal keys kept (as a map taking them in order would keep it).
    let mut found: Vec<([u8; 16], String)> = Vec::with_capacity(others.len() + bytes.len() / 32);
    for (hashed, line) in others {
        let key: [u8; 16] = hashed
            .as_bytes()
            .try_into()
            .map_err(|_| format!("a line key of 16 digits, not {hashed:?}"))?;
        found.push((key, line));
    }
    found.extend(kept_lines(bytes, max_chars));
    found.sort_by_key(|a| a.0);
    let mut last = Vec::with_capacity(found.len());
    let mut entries = found.into_iter().peekable();
    while let Some(entry) = entries.next() {
        if entries.peek().is_none_or(|next| next.0 != entry.0) {
            last.push(entry);
        }
    }
    let found = last;
    let old = read_line_hashes(old).map_err(|e| format!("malformed line list: {e}"))?;
    let known: HashSet<&[u8]> = old.iter().map(|h| h.as_bytes()).collect();
    let (lines, added) = pack_lines(&found, &known);
    let held: HashSet<&[u8]> = found.iter().map(|(h, _)| &h[..]).collect();
    let mut removed: Vec<String> = old
        .iter()
        .filter(|h| !held.contains(h.as_bytes()))
        .map(|h| (*h).to_owned())
        .collect();
    removed.sort_unstable();
    removed.dedup();
    Ok((lines, added, removed, found.len()))
}

/// The packed hashes of `found`, and the packed `[hash, line]` of those not `known` (empty bytes for none).
fn pack_lines(found: &[([u8; 16], String)], known: &HashSet<&[u8]>) -> (Vec<u8>, Vec<u8>) {
    let mut lines = Writer::with_capacity(4 + 18 * found.len());
    let mut added = Writer::with_capacity(4 + 80 * found.len());
    let fresh = found
        .iter()
        .filter(|(h, _)| !known.contains(&h[..]))
        .count();
    if !found.is_empty() {
        lines.array(found.len());
    }
    if fresh > 0 {
        added.array(fresh);
    }
    for (hashed, normalized) in found {
        let hashed = std::str::from_utf8(hashed).expect("hex digits");
        lines.str(hashed);
        if !known.contains(hashed.as_bytes()) {
            added.array(2);
            added.str(hashed);
            added.str(normalized);
        }
    }
    (lines.out, added.out)
}
