//! The band stage's batch: LSH buckets joined and left, and each joining content's candidates
//! (`streamdedup.core.stages.bands`, whose `apply_in_python` is the twin the tests compare this with).
//!
//! A bucket is fixed-width entries sorted by content id: 8 bytes of id (the content hash's first 16 hex digits),
//! then 4 bytes of epoch, big-endian.

use rustc_hash::FxHashMap as HashMap;

/// The bytes of a content id, and of a bucket entry (the id, then the epoch).
pub const ID: usize = 8;
pub const ENTRY: usize = ID + 4;

/// The id a bucket holds a content by: the bytes of its hash's first 16 hex digits.
pub fn content_id(content_hash: &str) -> Result<[u8; ID], String> {
    let digits = content_hash.as_bytes();
    let invalid = || format!("not a content hash: {content_hash:?}");
    if digits.len() < 2 * ID {
        return Err(invalid());
    }
    let mut id = [0u8; ID];
    for (i, byte) in id.iter_mut().enumerate() {
        let pair = std::str::from_utf8(&digits[2 * i..2 * i + 2]).map_err(|_| invalid())?;
        *byte = u8::from_str_radix(pair, 16).map_err(|_| invalid())?;
    }
    Ok(id)
}

/// The offset at which `member` is or would be inserted in `raw`, and whether it is there.
pub fn find(raw: &[u8], member: &[u8; ID]) -> (usize, bool) {
    let (mut low, mut high) = (0, raw.len() / ENTRY);
    while low < high {
        let middle = (low + high) / 2;
        if raw[middle * ENTRY..middle * ENTRY + ID] < member[..] {
            low = middle + 1;
        } else {
            high = middle;
        }
    }
    let offset = low * ENTRY;
    let present = raw.len() >= offset + ID && raw[offset..offset + ID] == member[..];
    (offset, present)
}

/// The epoch of the entry at `offset`.
pub fn epoch_at(raw: &[u8], offset: usize) -> u32 {
    u32::from_be_bytes(
        raw[offset + ID..offset + ENTRY]
            .try_into()
            .expect("4 bytes"),
    )
}

/// Count one shared band for each of the first `limit` ids of a bucket other than `member`.
pub fn count_others(
    raw: &[u8],
    member: &[u8; ID],
    limit: usize,
    counts: &mut HashMap<[u8; ID], u32>,
) {
    if raw.len() == ENTRY {
        return;
    }
    let end = raw.len().min(limit.saturating_add(1).saturating_mul(ENTRY));
    let mut seen = 0;
    for entry in raw[..end].chunks_exact(ENTRY) {
        let other: [u8; ID] = entry[..ID].try_into().expect("8 bytes");
        if other != *member && seen < limit {
            *counts.entry(other).or_insert(0) += 1;
            seen += 1;
        }
    }
}

/// One join or leave of a batch: its content hash, epoch, and the buckets (by slot) of its band keys.
pub struct BandOp<'a> {
    pub join: bool,
    pub content_hash: &'a str,
    pub epoch: u32,
    pub bands: Vec<usize>,
}

/// The answer to one joining content and epoch: its first op, the buckets it joined (by slot), and its best
/// candidates with the number of bands each shares with it.
pub struct Joined {
    pub op: usize,
    pub bands: Vec<usize>,
    pub candidates: Vec<([u8; ID], u32)>,
}

/// Join `member` at `epoch` in a bucket and count the others it holds; whether the bucket changed.
pub fn join(
    raw: &mut Vec<u8>,
    member: &[u8; ID],
    epoch: u32,
    limit: usize,
    counts: &mut HashMap<[u8; ID], u32>,
) -> bool {
    if raw.is_empty() {
        raw.extend_from_slice(member);
        raw.extend_from_slice(&epoch.to_be_bytes());
        return true;
    }
    let (offset, present) = find(raw, member);
    let mut changed = false;
    if !present {
        let mut entry = member.to_vec();
        entry.extend_from_slice(&epoch.to_be_bytes());
        raw.splice(offset..offset, entry);
        changed = true;
    } else if epoch_at(raw, offset) < epoch {
        raw[offset + ID..offset + ENTRY].copy_from_slice(&epoch.to_be_bytes());
        changed = true;
    }
    count_others(raw, member, limit, counts);
    changed
}

/// Leave a bucket, unless the entry is of a later epoch; whether the bucket changed.
pub fn leave(raw: &mut Vec<u8>, member: &[u8; ID], epoch: u32) -> bool {
    let (offset, present) = find(raw, member);
    if present && epoch_at(raw, offset) <= epoch {
        raw.drain(offset..offset + ENTRY);
        return true;
    }
    false
}

/// Apply a batch's ops, in order, to its `buckets` (by slot; empty where absent), marking those that change in
/// `changed`; the answers to the joining contents, in order of first join. A join counts at most `limit` others
/// per band (the lowest ids), and its candidates are the `limit` ids sharing the most bands (then the lowest).
pub fn apply(
    ops: &[BandOp<'_>],
    buckets: &mut [Vec<u8>],
    changed: &mut [bool],
    limit: usize,
) -> Result<Vec<Joined>, String> {
    let mut joined: Vec<(Joined, HashMap<[u8; ID], u32>)> = Vec::new();
    let mut joined_at: HashMap<(&str, u32), usize> = HashMap::default();
    for (i, op) in ops.iter().enumerate() {
        let member = content_id(op.content_hash)?;
        if !op.join {
            for &band in &op.bands {
                changed[band] |= leave(&mut buckets[band], &member, op.epoch);
            }
            continue;
        }
        let next = joined.len();
        let slot = *joined_at.entry((op.content_hash, op.epoch)).or_insert(next);
        if slot == next {
            let answer = Joined {
                op: i,
                bands: Vec::new(),
                candidates: Vec::new(),
            };
            joined.push((answer, HashMap::default()));
        }
        let (answer, counts) = &mut joined[slot];
        for &band in &op.bands {
            answer.bands.push(band);
            changed[band] |= join(&mut buckets[band], &member, op.epoch, limit, counts);
        }
    }
    Ok(joined
        .into_iter()
        .map(|(mut answer, counts)| {
            let mut best: Vec<([u8; ID], u32)> = counts.into_iter().collect();
            best.sort_unstable_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
            best.truncate(limit);
            answer.candidates = best;
            answer
        })
        .collect())
}
