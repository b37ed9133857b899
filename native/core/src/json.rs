//! JSON output as msgspec writes it, byte for byte: a record the kernels write here is the record the Python twins
//! build as objects and msgspec encodes (`msgspec.json.encode`), so outputs compare equal as bytes whichever side
//! made them (I5).
//!
//! msgspec writes strings as UTF-8, escaping only `"`, `\` and the control characters below 0x20 (`\b`, `\t`,
//! `\n`, `\f`, `\r` by name, the rest as `\u00XX`); floats in their shortest round-trip digits, in positional
//! notation while the number has at most 16 digits before its point and at most 4 zeros after it, else as
//! `<digits>e<exponent>`; NaN and infinities as `null`.

use std::io::Write;

use crate::mp::Value;

pub struct Writer {
    pub out: Vec<u8>,
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Whether any of the eight bytes of `word` is a control character (below 0x20), a quote or a backslash: the
/// bytes a JSON string escapes (a byte of 0x80 and above, part of a longer character, is written as it is).
fn needs_escape(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_in = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let below = word.wrapping_sub(ONES * 0x20) & !word & HIGH;
    below | zero_in(word ^ (ONES * u64::from(b'"'))) | zero_in(word ^ (ONES * u64::from(b'\\')))
        != 0
}

impl Writer {
    pub fn with_capacity(n: usize) -> Self {
        Writer {
            out: Vec::with_capacity(n),
        }
    }

    /// Bytes that are already JSON (punctuation and field names).
    pub fn raw(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }

    pub fn nil(&mut self) {
        self.out.extend_from_slice(b"null");
    }

    pub fn boolean(&mut self, v: bool) {
        self.out
            .extend_from_slice(if v { b"true" as &[u8] } else { b"false" });
    }

    pub fn int(&mut self, v: i64) {
        write!(self.out, "{v}").expect("writing to a Vec cannot fail");
    }

    pub fn uint(&mut self, v: u64) {
        write!(self.out, "{v}").expect("writing to a Vec cannot fail");
    }

    pub fn str(&mut self, s: &str) {
        let out = &mut self.out;
        out.reserve(s.len() + 2);
        out.push(b'"');
        let bytes = s.as_bytes();
        let mut start = 0;
        // Eight bytes at a time while none needs escaping: most text has no quote, backslash or control character.
        let mut at = 0;
        while at + 8 <= bytes.len() {
            let word = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("eight bytes"));
            if needs_escape(word) {
                break;
            }
            at += 8;
        }
        for (i, &b) in bytes.iter().enumerate().skip(at) {
            if b >= 0x20 && b != b'"' && b != b'\\' {
                continue;
            }
            out.extend_from_slice(&bytes[start..i]);
            start = i + 1;
            match b {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                0x08 => out.extend_from_slice(b"\\b"),
                b'\t' => out.extend_from_slice(b"\\t"),
                b'\n' => out.extend_from_slice(b"\\n"),
                0x0c => out.extend_from_slice(b"\\f"),
                b'\r' => out.extend_from_slice(b"\\r"),
                _ => out.extend_from_slice(&[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[usize::from(b >> 4)],
                    HEX[usize::from(b & 15)],
                ]),
            }
        }
        out.extend_from_slice(&bytes[start..]);
        out.push(b'"');
    }

    pub fn strings(&mut self, items: &[String]) {
        self.out.push(b'[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                self.out.push(b',');
            }
            self.str(item);
        }
        self.out.push(b']');
    }

    pub fn float(&mut self, v: f64) {
        if v == 1.0 {
            // The Jaccard value of every exact copy and canonical: most floats written.
            return self.out.extend_from_slice(b"1.0");
        }
        if !v.is_finite() {
            return self.nil();
        }
        let (negative, digits, point) = shortest(v);
        let count = digits.len() as i32;
        let out = &mut self.out;
        if negative {
            out.push(b'-');
        }
        if point >= count && point <= 16 {
            out.extend_from_slice(&digits);
            out.extend(std::iter::repeat_n(b'0', (point - count) as usize));
            out.extend_from_slice(b".0");
        } else if point > 0 && point <= 16 {
            out.extend_from_slice(&digits[..point as usize]);
            out.push(b'.');
            out.extend_from_slice(&digits[point as usize..]);
        } else if point > -5 && point <= 0 {
            out.extend_from_slice(b"0.");
            out.extend(std::iter::repeat_n(b'0', (-point) as usize));
            out.extend_from_slice(&digits);
        } else {
            out.push(digits[0]);
            if count > 1 {
                out.push(b'.');
                out.extend_from_slice(&digits[1..]);
            }
            write!(out, "e{}", point - 1).expect("writing to a Vec cannot fail");
        }
    }

    /// Write a value decoded from MessagePack; false (the output left unfinished) for what JSON has no form of
    /// here: binary data, and keys that are not strings.
    pub fn value(&mut self, v: &Value) -> bool {
        match v {
            Value::Nil => self.nil(),
            Value::Bool(b) => self.boolean(*b),
            Value::Int(i) => self.int(*i),
            Value::UInt(u) => self.uint(*u),
            Value::Float(f) => self.float(*f),
            Value::Str(s) => self.str(s),
            Value::Bin(_) => return false,
            Value::Array(items) => {
                self.out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push(b',');
                    }
                    if !self.value(item) {
                        return false;
                    }
                }
                self.out.push(b']');
            }
            Value::Map(items) => {
                self.out.push(b'{');
                for (i, (key, item)) in items.iter().enumerate() {
                    let Value::Str(key) = key else { return false };
                    if i > 0 {
                        self.out.push(b',');
                    }
                    self.str(key);
                    self.out.push(b':');
                    if !self.value(item) {
                        return false;
                    }
                }
                self.out.push(b'}');
            }
        }
        true
    }
}

/// The shortest decimal digits that read back as the finite `v`, and of those the closest to it (as Python's
/// `repr` and msgspec pick them): whether it is negative, its significant digits (`0` for zero), and how many of
/// them come before the point (none or fewer than none: zeros after the point first). Rust's own `{:e}` is
/// shortest but not always closest (`681636455607468.2` is `6.816364556074683e14`); Ryu is both, and only its
/// layout differs from the ones wanted here (`1e-7`, `0.3`, `1.25e16`).
pub fn shortest(v: f64) -> (bool, Vec<u8>, i32) {
    let mut buffer = ryu::Buffer::new();
    let text = buffer.format_finite(v);
    let (negative, text) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match text.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().expect("ryu writes an integer exponent")),
        None => (text, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut digits: Vec<u8> = whole.bytes().chain(fraction.bytes()).collect();
    let mut point = whole.len() as i32 + exponent;
    let leading = digits.iter().take_while(|&&b| b == b'0').count();
    digits.drain(..leading);
    point -= leading as i32;
    while digits.last() == Some(&b'0') {
        digits.pop();
    }
    if digits.is_empty() {
        digits.push(b'0');
        point = 1;
    }
    (negative, digits, point)
}

/// Python's `repr` of a finite float: positional from 1e-4 up to below 1e16 (`0.0001`, `100.0`), else
/// `1.5e-07`, `1e+16`.
pub fn python_repr(v: f64) -> String {
    let (negative, digits, point) = shortest(v);
    let count = digits.len() as i32;
    let digits = String::from_utf8(digits).expect("digits are ASCII");
    let sign = if negative { "-" } else { "" };
    if !(-3..=16).contains(&point) {
        let rest = if count > 1 {
            format!(".{}", &digits[1..])
        } else {
            String::new()
        };
        let exponent = point - 1;
        let exponent_sign = if exponent < 0 { '-' } else { '+' };
        format!(
            "{sign}{}{rest}e{exponent_sign}{:02}",
            &digits[..1],
            exponent.abs()
        )
    } else if point <= 0 {
        format!("{sign}0.{}{digits}", "0".repeat((-point) as usize))
    } else if point >= count {
        format!("{sign}{digits}{}.0", "0".repeat((point - count) as usize))
    } else {
        let (whole, fraction) = digits.split_at(point as usize);
        format!("{sign}{whole}.{fraction}")
    }
}
