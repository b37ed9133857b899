//! Chunking of plain text (`markup.paragraphs` and `chunking.chunk_document` for a text that is not Markdown or
//! HTML): the same paragraphs and the same chunks, with the collection's known boilerplate lines left out. The
//! twin the tests compare this with is `source.plain_chunks_in_python`, built from those functions.

/// Python's `str.isspace`: what `str.strip`, `str.split` and a `\s` of `re` take for whitespace.
pub fn is_py_space(c: char) -> bool {
    matches!(
        c,
        '\t'..='\r'
            | '\x1c'..='\x1f'
            | ' '
            | '\u{85}'
            | '\u{a0}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200a}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202f}'
            | '\u{205f}'
            | '\u{3000}'
    )
}

/// `markup.paragraphs`: the text split at blank lines (`\n[ \t\r\f\v]*\n`, line ends made `\n` first), each
/// stripped, the empty ones left out.
pub fn paragraphs(text: &str) -> Vec<String> {
    let text = text.replace("\r\n", "\n").replace('\r', "\n");
    let bytes = text.as_bytes();
    let mut parts = Vec::new();
    let (mut start, mut i) = (0, 0);
    while i < bytes.len() {
        if bytes[i] == b'\n' {
            let mut j = i + 1;
            while j < bytes.len() && matches!(bytes[j], b' ' | b'\t' | b'\x0b' | b'\x0c') {
                j += 1;
            }
            if j < bytes.len() && bytes[j] == b'\n' {
                parts.push(&text[start..i]);
                start = j + 1;
                i = j + 1;
                continue;
            }
        }
        i += 1;
    }
    parts.push(&text[start..]);
    parts
        .into_iter()
        .map(|part| part.trim_matches(is_py_space))
        .filter(|part| !part.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The number of code points of `text` (Python's `len`).
pub fn chars(text: &str) -> usize {
    if text.is_ascii() {
        text.len()
    } else {
        text.chars().count()
    }
}

/// `chunking._heading_like`: a short single line that does not end like a sentence.
pub fn heading_like(plain: &str) -> bool {
    const HEADING_LIKE_MAX: usize = 80;
    !plain.contains('\n')
        && chars(plain) <= HEADING_LIKE_MAX
        && !plain
            .trim_end_matches(is_py_space)
            .ends_with(['.', '!', '?', ':', ';', ','])
}

/// `chunking._SENTENCE_END.split`: the text cut at each run of whitespace that follows a sentence's end.
pub fn sentences(plain: &str) -> Vec<&str> {
    let mut units = Vec::new();
    let mut start = 0;
    let mut previous: Option<char> = None;
    let mut iter = plain.char_indices().peekable();
    while let Some((at, c)) = iter.next() {
        if is_py_space(c) && matches!(previous, Some('.' | '!' | '?' | '…' | '。')) {
            let mut end = at + c.len_utf8();
            while let Some(&(next_at, next)) = iter.peek() {
                if !is_py_space(next) {
                    break;
                }
                end = next_at + next.len_utf8();
                iter.next();
            }
            units.push(&plain[start..at]);
            start = end;
            previous = None; // a run is never followed by whitespace; what comes next is read afresh
            continue;
        }
        previous = Some(c);
    }
    units.push(&plain[start..]);
    units
}

/// The byte offset of the code point `n` of `text` (its length if it has no more).
fn char_offset(text: &str, n: usize) -> usize {
    text.char_indices().nth(n).map_or(text.len(), |(at, _)| at)
}

/// `chunking._split` of a paragraph: sentences packed into pieces of at most `max_chars`, a longer sentence cut
/// hard.
pub fn split(plain: &str, max_chars: usize) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut current = String::new();
    let mut current_chars = 0;
    for whole in sentences(plain) {
        let mut unit = whole;
        let mut unit_chars = chars(unit);
        while unit_chars > max_chars {
            if !current.is_empty() {
                pieces.push(std::mem::take(&mut current));
                current_chars = 0;
            }
            let cut = char_offset(unit, max_chars);
            pieces.push(unit[..cut].to_owned());
            unit = &unit[cut..];
            unit_chars -= max_chars;
        }
        if !current.is_empty() && current_chars + 1 + unit_chars > max_chars {
            pieces.push(std::mem::replace(&mut current, unit.to_owned()));
            current_chars = unit_chars;
        } else if current.is_empty() {
            current = unit.to_owned();
            current_chars = unit_chars;
        } else {
            current.push(' ');
            current.push_str(unit);
            current_chars += 1 + unit_chars;
        }
    }
    if !current.is_empty() {
        pieces.push(current);
    }
    pieces
}

/// What `plain_chunks` returns: the paragraphs, and each chunk's original and plain text.
pub type PlainChunks = (Vec<String>, Vec<String>, Vec<String>);

/// Each paragraph's original and plain text, without the lines `keep` refuses (all kept without `keep`); a
/// paragraph left without lines goes.
fn units<E>(
    found: &[String],
    mut keep: Option<impl FnMut(&str) -> Result<bool, E>>,
) -> Result<Vec<(String, String)>, E> {
    let mut units: Vec<(String, String)> = Vec::with_capacity(found.len());
    for paragraph in found {
        let Some(keep) = keep.as_mut() else {
            units.push((paragraph.clone(), paragraph.clone()));
            continue;
        };
        let lines: Vec<&str> = paragraph.split('\n').collect();
        let mut kept = Vec::with_capacity(lines.len());
        for line in &lines {
            if keep(line)? {
                kept.push(*line);
            }
        }
        if kept.is_empty() {
            continue;
        }
        if kept.len() == lines.len() {
            units.push((paragraph.clone(), paragraph.clone()));
        } else {
            let plain = kept.join("\n");
            units.push((plain.clone(), plain)); // the markup of a partly stripped block is not kept
        }
    }
    Ok(units)
}

/// Chunk a text that is neither Markdown nor HTML as `chunking.chunk_document` does (see `plain_chunks` in the
/// bindings): `keep` says whether a line is kept (None: every line is).
pub fn plain_chunks<E>(
    text: &str,
    headings: bool,
    max_chars: usize,
    keep: Option<impl FnMut(&str) -> Result<bool, E>>,
) -> Result<PlainChunks, E> {
    let found = paragraphs(text);
    let units = units(&found, keep)?;
    let mut originals = Vec::with_capacity(units.len());
    let mut plains = Vec::with_capacity(units.len());
    let mut pending: Option<(String, String)> = None; // a heading waiting for the block it introduces
    let count = units.len();
    for (index, (block_original, block_plain)) in units.into_iter().enumerate() {
        if headings && index + 1 < count && heading_like(&block_plain) {
            if let Some((original, plain)) = pending.take() {
                originals.push(original);
                plains.push(plain);
            }
            pending = Some((block_original, block_plain));
            continue;
        }
        let (original, plain) = match pending.take() {
            Some((heading_original, heading_plain)) => (
                format!("{heading_original}\n\n{block_original}"),
                format!("{heading_plain}\n{block_plain}"),
            ),
            None => (block_original, block_plain),
        };
        if chars(&plain) <= max_chars {
            originals.push(original);
            plains.push(plain);
        } else {
            for piece in split(&plain, max_chars) {
                originals.push(piece.clone());
                plains.push(piece);
            }
        }
    }
    if let Some((original, plain)) = pending {
        originals.push(original);
        plains.push(plain);
    }
    Ok((found, originals, plains))
}
