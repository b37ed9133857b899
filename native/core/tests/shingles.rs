//! Exact Jaccard of word shingles, and sketch agreements.

use streamdedup_kernels::shingles::{agreements, estimate, jaccard, Shingles};

#[test]
fn shingles_are_distinct_word_runs() {
    let s = Shingles::new("a b a b a", 2);
    assert_eq!(s.len(), 2, "'a b' and 'b a'");
    assert_eq!(s.at(0), b"a b");
    assert_eq!(s.at(1), b"b a");
    assert_eq!(
        Shingles::new("  one   two ", 3).len(),
        1,
        "a shorter text is one shingle"
    );
    assert!(Shingles::new("   ", 3).is_empty());
}

#[test]
fn jaccard_is_exact() {
    let a = Shingles::new("the quick brown fox", 2);
    let b = Shingles::new("the quick brown dog", 2);
    assert_eq!(jaccard(&a, &b), 2.0 / 4.0);
    assert_eq!(jaccard(&a, &a), 1.0);
    assert_eq!(jaccard(&Shingles::new("", 2), &Shingles::new("", 2)), 1.0);
    assert_eq!(jaccard(&a, &Shingles::new("", 2)), 0.0);
}

#[test]
fn sketches_agree_field_by_field() {
    assert_eq!(agreements(&[0b1110_0100], &[0b1110_0100], 4), 4);
    assert_eq!(agreements(&[0b0000_0000], &[0b0000_0011], 4), 3);
    assert_eq!(agreements(&[0b0000_0000], &[0b1010_1010], 4), 0);
    assert_eq!(estimate(4, 4), 1.0);
    assert_eq!(estimate(1, 4), 0.0);
    assert_eq!(estimate(0, 4), 0.0, "never below zero");
}
