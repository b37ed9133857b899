//! Keys, ids and values written as Python writes them.

use streamdedup_kernels::keys::{
    content_id, format_timestamp, id_key, ref_key, ref_prefix, review_key, round6,
};
use streamdedup_kernels::{hex, push_digits};

#[test]
fn keys_are_spelled_as_the_state_spells_them() {
    let h = "0123456789abcdef0123";
    assert_eq!(content_id(h), "0123456789abcdef");
    assert_eq!(content_id("short"), "short");
    assert_eq!(
        content_id("ééééééééééééééééé"),
        "éééééééééééééééé",
        "characters, not bytes"
    );
    assert_eq!(id_key("abc"), "i\0abc");
    assert_eq!(ref_prefix("h"), "r\0h\0");
    assert_eq!(ref_key("h", "doc"), "r\0h\0doc");
    assert!(ref_key("h", "doc").starts_with(&ref_prefix("h")));
    assert_eq!(review_key("b", "a"), "a:b");
    assert_eq!(review_key("a", "b"), "a:b");
}

#[test]
fn round6_rounds_as_python() {
    assert_eq!(round6(0.123_456_7), 0.123_457);
    assert_eq!(round6(1.0), 1.0);
    assert_eq!(round6(0.5), 0.5);
    assert!(round6(f64::NAN).is_nan());
}

#[test]
fn timestamps_are_iso_8601_in_utc() {
    assert_eq!(format_timestamp(0).unwrap(), "1970-01-01T00:00:00Z");
    assert_eq!(
        format_timestamp(1_500_000).unwrap(),
        "1970-01-01T00:00:01.5Z"
    );
    assert_eq!(
        format_timestamp(951_782_400_000_001).unwrap(),
        "2000-02-29T00:00:00.000001Z"
    );
    assert_eq!(format_timestamp(-1).unwrap(), "1969-12-31T23:59:59.999999Z");
    assert!(format_timestamp(i64::MAX / 2).is_none(), "past year 9999");
}

#[test]
fn digits_and_hex() {
    let mut s = String::new();
    push_digits(&mut s, 42, 4);
    assert_eq!(s, "0042");
    assert_eq!(hex(&[0, 255, 16]), "00ff10");
}
