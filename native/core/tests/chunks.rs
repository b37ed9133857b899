//! Chunking of plain text.

use streamdedup_kernels::chunks::{paragraphs, plain_chunks, split};

type Keep = fn(&str) -> Result<bool, String>;

#[test]
fn paragraphs_split_at_blank_lines_and_strip() {
    assert_eq!(paragraphs("a\n\n  b \r\n \t\n\nc\n"), ["a", "b", "c"]);
    assert_eq!(paragraphs("one\ntwo"), ["one\ntwo"]);
    assert!(paragraphs(" \n\n ").is_empty());
}

#[test]
fn long_paragraphs_split_at_sentence_ends_or_hard() {
    assert_eq!(
        split("One two. Three four. Five.", 12),
        ["One two.", "Three four.", "Five."]
    );
    assert_eq!(split("abcdefghij", 4), ["abcd", "efgh", "ij"]);
    assert_eq!(split("Short. Also short.", 100), ["Short. Also short."]);
}

#[test]
fn a_heading_joins_the_paragraph_it_introduces() {
    let (found, originals, plains) = plain_chunks(
        "Install\n\nRun the installer.\n\nDone.",
        true,
        100,
        None::<Keep>,
    )
    .unwrap();
    assert_eq!(found, ["Install", "Run the installer.", "Done."]);
    assert_eq!(originals, ["Install\n\nRun the installer.", "Done."]);
    assert_eq!(plains, ["Install\nRun the installer.", "Done."]);
    let (_, originals, _) = plain_chunks("Install\n\nRun it.", false, 100, None::<Keep>).unwrap();
    assert_eq!(
        originals,
        ["Install", "Run it."],
        "without headings each paragraph is a chunk"
    );
}

#[test]
fn lines_the_filter_refuses_are_left_out() {
    let keep = |line: &str| -> Result<bool, String> { Ok(line != "Menu") };
    let (found, originals, plains) =
        plain_chunks("Menu\nReal text here.\n\nMenu", false, 100, Some(keep)).unwrap();
    assert_eq!(
        found,
        ["Menu\nReal text here.", "Menu"],
        "paragraphs as they were"
    );
    assert_eq!(originals, ["Real text here."]);
    assert_eq!(plains, ["Real text here."]);
    let fail = |_: &str| -> Result<bool, String> { Err("no".to_owned()) };
    assert_eq!(plain_chunks("x", false, 10, Some(fail)).unwrap_err(), "no");
}
