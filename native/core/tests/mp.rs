//! MessagePack as msgspec writes and reads it.

use streamdedup_kernels::mp::{read_list, Reader, Value, Writer};

fn written(f: impl FnOnce(&mut Writer)) -> Vec<u8> {
    let mut w = Writer::default();
    f(&mut w);
    w.out
}

#[test]
fn integers_take_their_smallest_encoding() {
    assert_eq!(written(|w| w.int(5)), [0x05]);
    assert_eq!(written(|w| w.int(-1)), [0xff]);
    assert_eq!(written(|w| w.int(-33)), [0xd0, 0xdf]);
    assert_eq!(written(|w| w.int(200)), [0xcc, 200]);
    assert_eq!(written(|w| w.int(65_535)), [0xcd, 0xff, 0xff]);
    assert_eq!(written(|w| w.int(-40_000)), [0xd2, 0xff, 0xff, 0x63, 0xc0]);
    assert_eq!(written(|w| w.int(1 << 40)).len(), 9);
}

#[test]
fn integers_round_trip_at_every_width() {
    let values = [
        0,
        1,
        127,
        128,
        255,
        256,
        65_535,
        65_536,
        u32::MAX as i64,
        1 << 33,
        i64::MAX,
        -1,
        -32,
        -33,
        -128,
        -129,
        -32_768,
        -32_769,
        i32::MIN as i64,
        i64::MIN,
    ];
    for v in values {
        let data = written(|w| w.int(v));
        let mut r = Reader::new(&data);
        assert_eq!(r.int().unwrap(), v, "{v}");
        assert!(r.finished());
    }
}

#[test]
fn strings_bytes_and_floats_round_trip() {
    for n in [0, 31, 32, 255, 256, 70_000] {
        let s = "x".repeat(n);
        let data = written(|w| w.str(&s));
        assert_eq!(Reader::new(&data).str().unwrap(), s);
        let data = written(|w| w.bin(s.as_bytes()));
        assert_eq!(Reader::new(&data).bin().unwrap(), s.as_bytes());
    }
    let data = written(|w| w.float(0.1));
    assert_eq!(data[0], 0xcb, "every float is a float64");
    assert_eq!(Reader::new(&data).float().unwrap(), 0.1);
    // An integer where a float is due reads as that float, as msgspec reads it.
    assert_eq!(Reader::new(&[0x03]).float().unwrap(), 3.0);
}

#[test]
fn any_value_round_trips_and_skips() {
    let value = Value::Map(vec![
        (
            Value::Str("a".into()),
            Value::Array(vec![Value::Int(-3), Value::Nil, Value::Bool(true)]),
        ),
        (Value::Str("b".into()), Value::Float(2.5)),
        (Value::Str("c".into()), Value::Bin(vec![1, 2, 3])),
        (Value::Str("d".into()), Value::UInt(u64::MAX)),
    ]);
    let mut data = written(|w| w.value(&value));
    let mut r = Reader::new(&data);
    assert_eq!(r.value().unwrap(), value);
    assert!(r.finished());
    data.push(0x07);
    let mut r = Reader::new(&data);
    r.skip().unwrap();
    assert_eq!(r.int().unwrap(), 7);
}

#[test]
fn struct_maps_are_sized_by_their_fields_and_counted_after() {
    let data = written(|w| {
        let at = w.struct_map(3);
        w.str("a");
        w.int(1);
        w.end_struct_map(at, 1);
    });
    assert_eq!(data, [0x81, 0xa1, b'a', 0x01]);
    let data = written(|w| {
        let at = w.struct_map(20);
        w.end_struct_map(at, 2);
    });
    assert_eq!(
        data,
        [0xde, 0x00, 0x02],
        "a struct of 16 fields or more has a map16 header"
    );
}

#[test]
fn malformed_input_is_an_error_not_a_panic() {
    assert!(Reader::new(&[]).int().is_err());
    assert!(Reader::new(&[0xa5, b'a']).str().is_err());
    assert!(Reader::new(&[0xa2, 0xff, 0xfe]).str().is_err(), "not UTF-8");
    assert!(Reader::new(&[0xc3]).int().is_err());
    let err = Reader::new(&[0xc0]).boolean().unwrap_err();
    assert_eq!(err.to_string(), "expected a bool");
}

#[test]
fn packed_lists_check_their_items_length() {
    let data = written(|w| {
        w.array(2);
        for (a, b) in [(1, 2), (3, 4)] {
            w.array(2);
            w.int(a);
            w.int(b);
        }
    });
    let pairs = read_list(&data, 2, "a pair", |r| Ok((r.int()?, r.int()?))).unwrap();
    assert_eq!(pairs, [(1, 2), (3, 4)]);
    assert!(read_list(&data, 3, "a triple", |r| r.int()).is_err());
    assert!(read_list(&[], 2, "a pair", |r| r.int()).unwrap().is_empty());
}
