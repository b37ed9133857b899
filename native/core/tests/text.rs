//! Normalization and line keys.

use streamdedup_kernels::mp::Writer;
use streamdedup_kernels::text::{
    blake2b_64, kept_lines, line_key, line_update, normalized_ascii, read_added_lines,
    read_line_hashes,
};

#[test]
fn ascii_text_is_normalized_as_python_normalizes_it() {
    assert_eq!(
        normalized_ascii("  Hello,  World!\t(again) ").unwrap(),
        "hello world again"
    );
    assert_eq!(normalized_ascii("--- ... ").unwrap(), "");
    assert_eq!(
        normalized_ascii("a-b c's").unwrap(),
        "a-b c's",
        "punctuation inside a word stays"
    );
    assert_eq!(
        normalized_ascii("$5 +x").unwrap(),
        "$5 +x",
        "symbols are not punctuation"
    );
    assert!(normalized_ascii("café").is_none());
}

#[test]
fn line_keys_are_hex_blake2b_64() {
    // hashlib.blake2b(b"", digest_size=8).hexdigest()
    assert_eq!(&line_key(""), b"e4a6a0577479b2b4");
    assert_eq!(blake2b_64(b"").len(), 8);
    let lines: Vec<_> = kept_lines(b"Menu\n\n  \nA much longer line here\nmenu", 10).collect();
    assert_eq!(lines.len(), 2, "empty and too long lines are left out");
    assert_eq!(lines[0].1, "menu");
    assert_eq!(lines[0], lines[1]);
}

#[test]
fn packed_lines_read_back() {
    let mut w = Writer::default();
    w.strings(&["a".to_owned(), "b".to_owned()]);
    assert_eq!(read_line_hashes(&w.out).unwrap(), ["a", "b"]);
    assert!(read_line_hashes(b"").unwrap().is_empty());
    let mut w = Writer::default();
    w.array(1);
    w.array(2);
    w.str("k");
    w.str("line");
    assert_eq!(read_added_lines(&w.out).unwrap(), [("k", "line")]);
}

#[test]
fn a_line_update_packs_lines_and_says_what_changed() {
    let menu = String::from_utf8(line_key("menu").to_vec()).unwrap();
    let gone = "0000000000000000".to_owned();
    let mut old = Writer::default();
    old.strings(&[menu.clone(), gone.clone()]);
    let (lines, added, removed, count) =
        line_update(b"Menu\nSome text", 100, Vec::new(), &old.out).unwrap();
    assert_eq!(count, 2);
    let hashes = read_line_hashes(&lines).unwrap();
    assert_eq!(hashes.len(), 2);
    assert!(hashes.windows(2).all(|w| w[0] < w[1]), "sorted");
    let added = read_added_lines(&added).unwrap();
    assert_eq!(added.len(), 1);
    assert_eq!(added[0].1, "some text");
    assert_eq!(removed, [gone]);
    assert!(line_update(b"x", 10, vec![("short".into(), "x".into())], b"").is_err());
}
