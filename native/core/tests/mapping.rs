//! A source's statuses and mapping fingerprints.

use streamdedup_kernels::mapping::{fingerprint, pack_told, py_float_repr, read_statuses, Told};
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
