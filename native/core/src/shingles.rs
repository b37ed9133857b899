//! Exact similarity of two normalized texts (`content_discovery`: word shingles and their Jaccard) and the
//! estimate of two sketches (`streamdedup.core.sketches`).

/// A text's distinct word shingles (`shingle_size` words joined by a space; the whole text when it has fewer
/// words, none when it has none), each a span of the text's words joined by single spaces, in byte order.
pub struct Shingles {
    words: String,
    spans: Vec<(u32, u32)>,
}

impl Shingles {
    pub fn new(norm: &str, size: usize) -> Self {
        let mut words = String::with_capacity(norm.len());
        let mut bounds: Vec<(u32, u32)> = Vec::new();
        for token in norm.split(' ').filter(|t| !t.is_empty()) {
            if !words.is_empty() {
                words.push(' ');
            }
            let start = words.len() as u32;
            words.push_str(token);
            bounds.push((start, words.len() as u32));
        }
        let mut spans: Vec<(u32, u32)> = if bounds.is_empty() {
            Vec::new()
        } else if bounds.len() <= size {
            vec![(0, words.len() as u32)]
        } else {
            bounds
                .windows(size)
                .map(|w| (w[0].0, w[size - 1].1))
                .collect()
        };
        let bytes = words.as_bytes();
        let text = |&(a, b): &(u32, u32)| &bytes[a as usize..b as usize];
        spans.sort_unstable_by(|x, y| text(x).cmp(text(y)));
        spans.dedup_by(|x, y| text(x) == text(y));
        Shingles { words, spans }
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    pub fn at(&self, i: usize) -> &[u8] {
        let (a, b) = self.spans[i];
        &self.words.as_bytes()[a as usize..b as usize]
    }
}

/// The exact Jaccard of two shingle sets (1.0 for two empty ones).
pub fn jaccard(a: &Shingles, b: &Shingles) -> f64 {
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let (mut i, mut j, mut inter) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a.at(i).cmp(b.at(j)) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                inter += 1;
                i += 1;
                j += 1;
            }
        }
    }
    inter as f64 / (a.len() + b.len() - inter) as f64
}

/// On how many of ``fields`` two-bit fields two sketches agree (`sketches.agreements`).
pub fn agreements(a: &[u8], b: &[u8], fields: usize) -> i64 {
    let differ: u32 = a
        .iter()
        .zip(b)
        .map(|(x, y)| {
            let d = x ^ y;
            ((d | (d >> 1)) & 0x55).count_ones()
        })
        .sum();
    // Negative for a sketch longer than ``fields`` allow (one stored under other parameters), as in Python.
    fields as i64 - i64::from(differ)
}

pub fn estimate(agreed: i64, fields: usize) -> f64 {
    let chance = 0.25;
    ((agreed as f64 / fields as f64 - chance) / (1.0 - chance)).max(0.0)
}
