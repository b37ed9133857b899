//! The keys the content stage stores its records under and names contents by (`streamdedup.core.state`,
//! `messages.content_id`), and the values it writes as Python would (`round`, `model.format_timestamp`).

use crate::push_digits;

pub const CONTENT_ID_CHARS: usize = 16;

/// A content's id: the first `CONTENT_ID_CHARS` characters of its hash (`messages.content_id`).
pub fn content_id(h: &str) -> &str {
    match h.as_bytes().get(..CONTENT_ID_CHARS) {
        Some(head) if head.is_ascii() => &h[..CONTENT_ID_CHARS],
        Some(_) => h
            .char_indices()
            .nth(CONTENT_ID_CHARS)
            .map_or(h, |(end, _)| &h[..end]),
        None => h,
    }
}

fn joined(parts: &[&str]) -> String {
    let mut out = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for part in parts {
        out.push_str(part);
    }
    out
}

pub fn id_key(id: &str) -> String {
    joined(&["i\0", id])
}

pub fn ref_prefix(h: &str) -> String {
    joined(&["r\0", h, "\0"])
}

pub fn ref_key(h: &str, source_id: &str) -> String {
    joined(&["r\0", h, "\0", source_id])
}

pub fn review_key(a: &str, b: &str) -> String {
    if a <= b {
        joined(&[a, ":", b])
    } else {
        joined(&[b, ":", a])
    }
}

/// Python's `round(x, 6)`.
pub fn round6(x: f64) -> f64 {
    if !x.is_finite() || x == 1.0 || x == 0.0 {
        return x; // 1.0 and zero are most Jaccard values written
    }
    format!("{x:.6}").parse().unwrap_or(x)
}

/// `model.format_timestamp` for years 1 to 9999 (None outside them: Python's datetime decides).
pub fn format_timestamp(micros: i64) -> Option<String> {
    let seconds = micros.div_euclid(1_000_000);
    let fraction = micros.rem_euclid(1_000_000);
    let days = seconds.div_euclid(86_400);
    let of_day = seconds.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    if !(1..=9999).contains(&year) {
        return None;
    }
    // Digits written directly: the formatting machinery took some 1,600 instructions a timestamp, and every
    // source of every chunk record sent has one.
    let mut text = String::with_capacity(27);
    push_digits(&mut text, year, 4);
    text.push('-');
    push_digits(&mut text, month, 2);
    text.push('-');
    push_digits(&mut text, day, 2);
    text.push('T');
    push_digits(&mut text, of_day / 3600, 2);
    text.push(':');
    push_digits(&mut text, of_day % 3600 / 60, 2);
    text.push(':');
    push_digits(&mut text, of_day % 60, 2);
    if fraction != 0 {
        text.push('.');
        let mut fraction = fraction;
        let mut width = 6;
        while fraction % 10 == 0 {
            fraction /= 10;
            width -= 1;
        }
        push_digits(&mut text, fraction, width);
    }
    text.push('Z');
    Some(text)
}
