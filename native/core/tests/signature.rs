//! MinHash signatures, band keys, sketches and Kafka's partitioner hash.

use streamdedup_kernels::signature::{
    band_key, band_keys, draw_permutations, positive_murmur2, sketch, Scheme,
};

#[test]
fn murmur2_matches_kafka() {
    // Kafka's own test vectors (`UtilsTest.testMurmur2`), masked positive.
    assert_eq!(
        positive_murmur2(b"21"),
        (-973_932_308_i32 as u32 & 0x7FFF_FFFF) as i64
    );
    assert_eq!(
        positive_murmur2(b"foobar"),
        (-790_332_482_i32 as u32 & 0x7FFF_FFFF) as i64
    );
    assert_eq!(
        positive_murmur2(b"a-little-bit-long-string"),
        (-985_981_536_i32 as u32 & 0x7FFF_FFFF) as i64
    );
    assert_eq!(positive_murmur2(b"abc"), 479_470_107);
}

#[test]
fn permutations_follow_numpys_mersenne_twister() {
    // numpy.random.RandomState(1).randint(0, 2**31, 3, uint32) * 2 + 1 and the next randint(0, 2**32, ...).
    let (a, b) = draw_permutations(1, 3);
    assert_eq!(a.len(), 3);
    assert!(a.iter().all(|v| v % 2 == 1), "every a is odd");
    let (again, _) = draw_permutations(1, 3);
    assert_eq!(a, again);
    assert_ne!(draw_permutations(2, 3).0, a);
    assert_ne!(a, b);
}

#[test]
fn band_keys_are_three_digits_and_sixteen_hex_digits() {
    assert_eq!(band_key(7, 0xAB), "00700000000000000ab");
    assert_eq!(band_key(1234, 1), "12340000000000000001");
    assert_eq!(
        band_keys(&[1, 2]),
        ["0000000000000000001", "0010000000000000002"]
    );
}

#[test]
fn sketches_hold_two_bits_a_value() {
    assert_eq!(sketch(&[0, 0, 0, 0, 0]), [0, 0]);
    let s = sketch(&[u32::MAX; 4]);
    assert_eq!(s.len(), 1);
    assert_eq!(sketch(&[1, 2, 3, 4, 5, 6, 7, 8]).len(), 2);
}

#[test]
fn features_agree_for_equal_texts_and_count_shingles() {
    let scheme = Scheme::new(16, 1, 2).unwrap();
    assert!(Scheme::new(0, 1, 2).is_none());
    assert!(scheme.fits(4, 4) && !scheme.fits(5, 4) && !scheme.fits(usize::MAX, 2));
    let texts = ["a b c d", "a b c d", "a b c e", "", "one"];
    let found = scheme.features(&texts, 4, 4, 2);
    assert_eq!(found[0].distinct, 3);
    assert_eq!(found[0].bands, found[1].bands);
    assert_eq!(found[0].sketch, found[1].sketch);
    assert_ne!(found[0].bands, found[2].bands);
    assert_eq!(found[0].bands.as_ref().unwrap().len(), 4);
    assert_eq!((found[3].distinct, found[3].bands.is_none()), (0, true));
    assert_eq!(
        (found[4].distinct, found[4].bands.is_none()),
        (1, true),
        "below min_shingles"
    );
    assert_eq!(found[0].sketch.len(), 4);
}
