//! The collection stage's line counts.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use streamdedup_kernels::lines::{
    count, decode_line, decode_member, encode_line, encode_member, plan, record_key, LineUpdate,
};
use streamdedup_kernels::mp::Writer;

fn added(lines: &[(&str, &str)]) -> Vec<u8> {
    if lines.is_empty() {
        return Vec::new();
    }
    let mut w = Writer::default();
    w.array(lines.len());
    for (h, text) in lines {
        w.array(2);
        w.str(h);
        w.str(text);
    }
    w.out
}

#[test]
fn records_round_trip_and_refuse_extra_fields() {
    assert_eq!(
        decode_line(&encode_line(3, "menu"), "k").unwrap(),
        (3, "menu".to_owned())
    );
    assert_eq!(
        decode_member(&encode_member(-1, true), "k").unwrap(),
        (-1, true)
    );
    assert_eq!(
        decode_member(&[0x90], "k").unwrap(),
        (-1, false),
        "defaults"
    );
    let err = decode_line(&[0x93, 1, 2, 3], "k").unwrap_err();
    assert_eq!(err, "malformed line record at \"k\"");
    assert_eq!(record_key("l", "c", "h"), "l\0c\0h");
}

#[test]
fn updates_count_lines_once_per_document_and_skip_stale_versions() {
    let one = added(&[("h1", "menu"), ("h2", "footer")]);
    let none: [&str; 0] = [];
    let removed = ["h2"];
    let updates = [
        LineUpdate {
            collection: "c",
            source_id: "a",
            version: 1,
            counted: true,
            added: &one,
            removed: &none,
        },
        LineUpdate {
            collection: "c",
            source_id: "b",
            version: 1,
            counted: true,
            added: &one,
            removed: &none,
        },
        LineUpdate {
            collection: "c",
            source_id: "a",
            version: 2,
            counted: true,
            added: &[],
            removed: &removed,
        },
        LineUpdate {
            collection: "c",
            source_id: "b",
            version: 1,
            counted: true,
            added: &[],
            removed: &removed,
        },
    ];
    let plan = plan(&updates).unwrap();
    assert_eq!(plan.names, ["m\0c\0a", "m\0c\0b", "l\0c\0h1", "l\0c\0h2"]);
    let stored: Vec<Option<Vec<u8>>> = vec![None; plan.names.len()];
    let docs: HashMap<String, i64> = [("c".to_owned(), 5)].into_iter().collect();
    let counted = count(&updates, &plan, &stored, &docs).unwrap();
    assert_eq!(counted.applied, [true, true, true, false]);
    assert_eq!(counted.totals["c"], 7);
    let values: Vec<(&str, Option<Vec<u8>>)> = counted
        .writes
        .iter()
        .map(|(slot, v)| (plan.names[*slot].as_str(), v.clone()))
        .collect();
    assert_eq!(
        values,
        [
            ("l\0c\0h1", Some(encode_line(2, "menu"))),
            ("l\0c\0h2", Some(encode_line(1, "footer"))),
            ("m\0c\0a", Some(encode_member(2, true))),
            ("m\0c\0b", Some(encode_member(1, true))),
        ]
    );
    // Found in at least half of 7 documents: neither; watched: h2.
    let watch: HashMap<String, HashSet<String>> =
        [("c".to_owned(), ["h2".to_owned()].into_iter().collect())]
            .into_iter()
            .collect();
    let found = counted.found(&watch, 2, 0.5);
    assert_eq!(found, [("c", vec![("h2", Some((1, "footer")))])]);
    let found = counted.found(&HashMap::default(), 2, 0.25);
    assert_eq!(found, [("c", vec![("h1", Some((2, "menu")))])]);
}

#[test]
fn a_malformed_update_or_record_is_an_error() {
    let none: [&str; 0] = [];
    let bad = [LineUpdate {
        collection: "c",
        source_id: "a",
        version: 1,
        counted: true,
        added: &[0x91, 0x01],
        removed: &none,
    }];
    assert!(plan(&bad)
        .err()
        .unwrap()
        .starts_with("malformed line update"));
    let ok = [LineUpdate {
        collection: "c",
        source_id: "a",
        version: 1,
        counted: true,
        added: &[],
        removed: &none,
    }];
    let plan = plan(&ok).unwrap();
    let stored = vec![Some(vec![0xc1u8])];
    let err = count(&ok, &plan, &stored, &HashMap::default())
        .err()
        .unwrap();
    assert_eq!(err, "malformed member record at \"m\\0c\\0a\"");
}
