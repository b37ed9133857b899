//! A source's statuses and mapping fingerprints.

use rustc_hash::FxHashSet as HashSet;
use streamdedup_kernels::mapping::{
    fingerprint, mapping, merge, pack_told, py_float_repr, read_statuses, MappedAttrs, Told,
};
use streamdedup_kernels::text::blake2b_64;

fn told(h: &str, seq: i64) -> Told {
    Told {
        content_hash: h.into(),
        seq,
        version: 2,
        chunk_id: "=".into(),
        near: h == "b",
        jaccard: 0.75,
        canonical_position: -1,
    }
}

#[test]
fn told_statuses_pack_sorted_and_read_back() {
    let mut list = vec![told("c", 1), told("a", 2), told("b", 3)];
    let packed = pack_told(&mut list);
    let statuses = read_statuses(&packed).unwrap();
    let order: Vec<(&str, i64, bool)> = statuses
        .iter()
        .map(|s| (s.content_hash, s.seq, s.near))
        .collect();
    assert_eq!(order, [("a", 2, false), ("b", 3, true), ("c", 1, false)]);
    assert!(statuses[0].answers(2) && !statuses[0].answers(3));
    assert!(read_statuses(b"").unwrap().is_empty());
    assert!(read_statuses(&packed[..packed.len() - 1]).is_err());
}

#[test]
fn floats_are_written_as_python_repr() {
    for (v, text) in [
        (1.0, "1.0"),
        (0.5, "0.5"),
        (0.1 + 0.2, "0.30000000000000004"),
        (1e-7, "1e-07"),
        (1e16, "1e+16"),
        (123456.0, "123456.0"),
        (f64::NAN, "nan"),
        (f64::NEG_INFINITY, "-inf"),
    ] {
        assert_eq!(py_float_repr(v), text);
    }
}

#[test]
fn fingerprints_hash_the_fields_joined_by_nul() {
    let mut scratch = String::new();
    let print = fingerprint(&mut scratch, "h", "c", "near", 0.5);
    assert_eq!(print, blake2b_64(b"h\0c\0near\x000.5"));
    assert_ne!(print, fingerprint(&mut scratch, "h", "c", "near", 0.25));
}

fn packed(list: Vec<Told>) -> Vec<u8> {
    let mut list = list;
    pack_told(&mut list)
}

#[test]
fn merging_keeps_the_newer_status_of_listed_contents() {
    let held = packed(vec![told("a", 2), told("gone", 1)]);
    let listed: HashSet<&str> = ["a", "b"].into_iter().collect();
    let incoming = [
        packed(vec![told("a", 1), told("b", 1)]),
        packed(vec![told("a", 3)]),
    ];
    let merged = merge(&listed, &held, &incoming).unwrap().unwrap();
    let found: Vec<(&str, i64)> = read_statuses(&merged)
        .unwrap()
        .iter()
        .map(|s| (s.content_hash, s.seq))
        .collect();
    assert_eq!(found, [("a", 3), ("b", 1)]);
    let stale = [packed(vec![told("a", 1)])];
    assert_eq!(
        merge(&listed, &merged, &stale).unwrap(),
        None,
        "nothing newer: no change"
    );
}

const ATTRS: MappedAttrs<'static> = MappedAttrs {
    acl: &["eng", "ops"],
    modified_at: "2024-05-01T10:00:00Z",
    uri: None,
    title: Some("Reset \"it\""),
};

#[test]
fn a_mapping_waits_for_every_position_then_names_each_relation() {
    let mut canonical = told("a", 1);
    canonical.canonical_position = 0;
    let statuses = packed(vec![canonical, told("b", 1)]);
    assert!(
        mapping("doc", &ATTRS, &["a", "c"], &statuses, 2, b"", false)
            .unwrap()
            .is_none()
    );
    assert!(
        mapping("doc", &ATTRS, &["a"], &statuses, 3, b"", false)
            .unwrap()
            .is_none(),
        "another version"
    );
    let found = mapping("doc", &ATTRS, &["a", "a", "b"], &statuses, 2, b"", false)
        .unwrap()
        .unwrap();
    assert_eq!(found.prints.len(), 24);
    let (json, merged) = found.changed.unwrap();
    let json = String::from_utf8(json).unwrap();
    assert!(json.starts_with(
        "{\"schema\":\"streamdedup.mapping/v2\",\"source_id\":\"doc\",\"version\":2,\
         \"acl\":[\"eng\",\"ops\"],\"modified_at\":\"2024-05-01T10:00:00Z\",\"uri\":null,\
         \"title\":\"Reset \\\"it\\\"\",\"chunks\":[{\"position\":0,"
    ));
    assert!(json.contains("{\"position\":0,\"content_hash\":\"a\",\"chunk_id\":\"a\",\"relation\":\"canonical\",\"jaccard\":1.0}"));
    assert!(json.contains("\"relation\":\"exact\""));
    assert!(json.contains("\"relation\":\"near\",\"jaccard\":0.75}"));
    assert_eq!(merged, [(1, "a".to_owned())], "the exact copy is new");
    let again = mapping(
        "doc",
        &ATTRS,
        &["a", "a", "b"],
        &statuses,
        2,
        &found.prints,
        true,
    )
    .unwrap()
    .unwrap();
    assert!(again.changed.is_none(), "the same mapping, already sent");
}

#[test]
fn a_mapping_writes_a_uri_and_leaves_out_a_title_it_has_not() {
    let statuses = packed(vec![told("a", 1)]);
    let attrs = MappedAttrs {
        acl: &[],
        modified_at: "2024-05-01T10:00:00.5Z",
        uri: Some("https://example.com/a?b=1"),
        title: None,
    };
    let (json, _) = mapping("doc", &attrs, &["a"], &statuses, 2, b"", false)
        .unwrap()
        .unwrap()
        .changed
        .unwrap();
    let json = String::from_utf8(json).unwrap();
    assert!(json.contains(
        ",\"version\":2,\"acl\":[],\"modified_at\":\"2024-05-01T10:00:00.5Z\",\
         \"uri\":\"https://example.com/a?b=1\",\"chunks\":[{"
    ));
    assert!(!json.contains("title"));
}
