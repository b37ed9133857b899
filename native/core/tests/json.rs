//! JSON as msgspec writes it.

use streamdedup_kernels::json::{python_repr, Writer};
use streamdedup_kernels::mp::Value;

fn json(f: impl FnOnce(&mut Writer)) -> String {
    let mut w = Writer::with_capacity(16);
    f(&mut w);
    String::from_utf8(w.out).unwrap()
}

#[test]
fn strings_escape_only_what_json_must() {
    assert_eq!(
        json(|w| w.str("a\"b\\c\n\u{1}é")),
        "\"a\\\"b\\\\c\\n\\u0001é\""
    );
    assert_eq!(
        json(|w| w.str("plain text longer than eight bytes")),
        "\"plain text longer than eight bytes\""
    );
}

#[test]
fn floats_are_shortest_and_positional_within_bounds() {
    assert_eq!(json(|w| w.float(1.0)), "1.0");
    assert_eq!(json(|w| w.float(0.1)), "0.1");
    assert_eq!(json(|w| w.float(1e-7)), "1e-7");
    assert_eq!(json(|w| w.float(f64::NAN)), "null");
    assert_eq!(python_repr(681_636_455_607_468.2), "681636455607468.2");
}

#[test]
fn values_write_as_json_unless_json_cannot_hold_them() {
    let v = Value::Map(vec![(
        Value::Str("k".into()),
        Value::Array(vec![Value::Int(-1), Value::Nil, Value::Bool(false)]),
    )]);
    assert_eq!(json(|w| assert!(w.value(&v))), "{\"k\":[-1,null,false]}");
    let mut w = Writer::with_capacity(8);
    assert!(!w.value(&Value::Bin(vec![1])));
    let mut w = Writer::with_capacity(8);
    assert!(!w.value(&Value::Map(vec![(Value::Int(1), Value::Nil)])));
}
