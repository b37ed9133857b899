//! A source version's reference updates, packed (`messages.SourceRefs.refs`): what the source stage tells the
//! content stage of a new version's chunks, in one message a source version and content partition instead of a
//! `RefUpdate` a content.
//!
//! The packed form is MessagePack: an array of `[content_hash, positions, texts, norm]` arrays, sorted by content
//! hash. `positions` are the positions of the version that hold the content and `texts` their original chunk
//! texts; a content the version no longer holds has no positions, no texts and an empty `norm`. The twins the
//! tests compare these functions with are `source.refs_in_python` and `messages.split_refs_in_python`.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use crate::keys::content_id;
use crate::mp::{read_list, Reader, Result, Writer};
use crate::signature::positive_murmur2;

/// One entry of a packed list, borrowed from it.
pub struct PackedRef<'a> {
    pub content_hash: &'a str,
    pub positions: Vec<i64>,
    pub texts: Vec<&'a str>,
    pub norm: &'a str,
}

/// Read a packed list's entries (empty bytes: none).
pub fn read_refs(data: &[u8]) -> Result<Vec<PackedRef<'_>>> {
    read_list(data, 4, "a reference of 4 fields", |r| {
        let content_hash = r.str()?;
        let positions = r.ints()?;
        let count = r.array()?;
        let texts = (0..count).map(|_| r.str()).collect::<Result<Vec<_>>>()?;
        Ok(PackedRef {
            content_hash,
            positions,
            texts,
            norm: r.str()?,
        })
    })
}

/// Kafka's default partitioner (`partitioning.partition_for`) on a content's id, the prefix it is routed by.
pub fn content_partition(content_hash: &str, partitions: usize) -> usize {
    if partitions <= 1 {
        return 0;
    }
    positive_murmur2(content_id(content_hash).as_bytes()) as usize % partitions
}

/// The content hash of each normalized text (its hex SHA-256), position by position.
pub fn content_hashes(norms: &[String]) -> Vec<String> {
    norms
        .iter()
        .map(|norm| crate::hex(&Sha256::digest(norm.as_bytes())))
        .collect()
}

/// The packed list a new version tells its contents (`source_refs`): ``hashes``, ``originals`` and ``norms`` are
/// its positions' content hashes, original and normalized texts, ``old`` the content hashes of the version before.
/// Empty bytes when neither version holds any content.
pub fn pack_refs<S: AsRef<str>>(
    hashes: &[String],
    originals: &[S],
    norms: &[String],
    old: &[S],
) -> Vec<u8> {
    let mut held: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (position, content_hash) in hashes.iter().enumerate() {
        held.entry(content_hash).or_default().push(position);
    }
    for content_hash in old {
        held.entry(content_hash.as_ref()).or_default();
    }
    if held.is_empty() {
        return Vec::new();
    }
    let size: usize = originals.iter().map(|t| t.as_ref().len()).sum::<usize>()
        + norms.iter().map(String::len).sum::<usize>()
        + 80 * held.len();
    let mut w = Writer::with_capacity(size + 8);
    w.array(held.len());
    for (content_hash, positions) in &held {
        w.array(4);
        w.str(content_hash);
        w.array(positions.len());
        for &position in positions {
            w.int(position as i64);
        }
        w.array(positions.len());
        for &position in positions {
            w.str(originals[position].as_ref());
        }
        w.str(positions.first().map_or("", |&p| norms[p].as_str()));
    }
    w.out
}

/// Divide a packed list among ``partitions`` content partitions (`split_refs`): each partition that holds some of
/// its contents with its own packed list, in the order of their first content.
pub fn split_packed(refs: &[u8], partitions: usize) -> Result<Vec<(usize, Vec<u8>)>> {
    let mut groups: Vec<(usize, Vec<&[u8]>)> = Vec::new();
    if !refs.is_empty() {
        let mut r = Reader::new(refs);
        let n = r.array()?;
        for _ in 0..n {
            let start = r.at();
            r.array()?;
            let content_hash = r.str()?;
            for _ in 0..3 {
                r.skip()?;
            }
            let partition = content_partition(content_hash, partitions);
            let entry = &refs[start..r.at()];
            match groups.iter_mut().find(|(p, _)| *p == partition) {
                Some((_, entries)) => entries.push(entry),
                None => groups.push((partition, vec![entry])),
            }
        }
    }
    Ok(groups
        .into_iter()
        .map(|(partition, entries)| {
            let mut w = Writer::with_capacity(5 + entries.iter().map(|e| e.len()).sum::<usize>());
            w.array(entries.len());
            for entry in entries {
                w.out.extend_from_slice(entry);
            }
            (partition, w.out)
        })
        .collect())
}
