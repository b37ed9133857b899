//! LSH buckets: joins, leaves and candidates.

use streamdedup_kernels::bands::{apply, content_id, BandOp, ENTRY, ID};

fn hash(id: u8) -> String {
    format!("{id:016x}{}", "0".repeat(48))
}

fn op(join: bool, id: u8, epoch: u32, bands: &[usize]) -> (bool, String, u32, Vec<usize>) {
    (join, hash(id), epoch, bands.to_vec())
}

/// Per joining content: its op, the buckets it joined, its candidates (last id byte, shared bands).
type Answers = Vec<(usize, Vec<usize>, Vec<(u8, u32)>)>;

fn run(
    ops: &[(bool, String, u32, Vec<usize>)],
    buckets: &mut [Vec<u8>],
    limit: usize,
) -> (Vec<bool>, Answers) {
    let batch: Vec<BandOp<'_>> = ops
        .iter()
        .map(|(join, h, epoch, bands)| BandOp {
            join: *join,
            content_hash: h,
            epoch: *epoch,
            bands: bands.clone(),
        })
        .collect();
    let mut changed = vec![false; buckets.len()];
    let joined = apply(&batch, buckets, &mut changed, limit).unwrap();
    let answers = joined
        .into_iter()
        .map(|j| {
            let candidates = j
                .candidates
                .iter()
                .map(|(id, n)| (id[ID - 1], *n))
                .collect();
            (j.op, j.bands, candidates)
        })
        .collect();
    (changed, answers)
}

#[test]
fn content_ids_are_the_first_sixteen_hex_digits() {
    assert_eq!(
        content_id(&hash(0xab)).unwrap(),
        [0, 0, 0, 0, 0, 0, 0, 0xab]
    );
    assert!(content_id("xyz")
        .unwrap_err()
        .starts_with("not a content hash"));
    assert!(content_id(&"g".repeat(16)).is_err());
}

#[test]
fn joins_keep_buckets_sorted_and_count_shared_bands() {
    let mut buckets = vec![Vec::new(); 3];
    let (changed, answers) = run(
        &[op(true, 5, 1, &[0, 1]), op(true, 3, 1, &[0, 1, 2])],
        &mut buckets,
        10,
    );
    assert_eq!(changed, [true, true, true]);
    assert_eq!(buckets[0].len(), 2 * ENTRY);
    assert_eq!(buckets[0][ID - 1], 3, "sorted by id");
    assert_eq!(buckets[0][ENTRY + ID - 1], 5);
    assert_eq!(
        answers[0],
        (0, vec![0, 1], vec![]),
        "the first to join finds none"
    );
    assert_eq!(answers[1], (1, vec![0, 1, 2], vec![(5, 2)]));
}

#[test]
fn a_later_epoch_updates_and_an_earlier_leave_is_ignored() {
    let mut buckets = vec![Vec::new()];
    run(&[op(true, 1, 2, &[0])], &mut buckets, 10);
    let (changed, _) = run(&[op(false, 1, 1, &[0])], &mut buckets, 10);
    assert_eq!(changed, [false]);
    assert_eq!(buckets[0].len(), ENTRY);
    let (changed, _) = run(&[op(true, 1, 2, &[0])], &mut buckets, 10);
    assert_eq!(changed, [false], "the same epoch again changes nothing");
    let (changed, _) = run(&[op(true, 1, 3, &[0])], &mut buckets, 10);
    assert_eq!(changed, [true]);
    assert_eq!(buckets[0][ID..ENTRY], 3u32.to_be_bytes());
    let (changed, _) = run(&[op(false, 1, 3, &[0])], &mut buckets, 10);
    assert_eq!(changed, [true]);
    assert!(buckets[0].is_empty());
}

#[test]
fn candidates_are_limited_to_the_most_shared_then_lowest_ids() {
    let mut buckets = vec![Vec::new(); 3];
    run(
        &[
            op(true, 9, 1, &[0, 1]),
            op(true, 7, 1, &[0]),
            op(true, 8, 1, &[2]),
        ],
        &mut buckets,
        10,
    );
    let (_, answers) = run(&[op(true, 1, 1, &[0, 1, 2])], &mut buckets, 2);
    assert_eq!(answers[0].2, [(9, 2), (7, 1)]);
}

#[test]
fn a_join_counts_at_most_limit_others_per_band_the_lowest() {
    let mut buckets = vec![Vec::new()];
    run(
        &[
            op(true, 9, 1, &[0]),
            op(true, 7, 1, &[0]),
            op(true, 8, 1, &[0]),
        ],
        &mut buckets,
        10,
    );
    let (_, answers) = run(&[op(true, 1, 1, &[0])], &mut buckets, 2);
    assert_eq!(answers[0].2, [(7, 1), (8, 1)]);
}
