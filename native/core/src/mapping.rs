//! A source's mapping (`streamdedup.core.stages.source`): what each of its positions maps to, from what its
//! contents told it, with a fingerprint per position, and the rows of the `source-mappings` record when those
//! changed. The twin the tests compare this with is `mapping_in_python` (from `current_mapping`, `_fingerprint`
//! and `records.mapping_row`).
//!
//! A source keeps what its contents last told it as one packed list (`state.pack_statuses`): MessagePack, an
//! array of `StatusEntry` arrays sorted by content hash. The content stage sends a source the statuses of a batch
//! in the same form (`SourceStatuses`), and `merge_statuses` takes them in.

use crate::json::python_repr;
use crate::mp::{read_list, Malformed, Result, Writer as MpWriter};
use crate::text::blake2b_64;

/// Python's `repr` of a float (`nan`, `inf` and `-inf` included), as `source._fingerprint` writes it.
pub fn py_float_repr(x: f64) -> String {
    if x == 1.0 {
        return "1.0".to_owned(); // the Jaccard value of every exact copy and canonical
    }
    if x.is_nan() {
        return "nan".to_owned();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    python_repr(x)
}

/// The fingerprint of one mapping entry: the BLAKE2b-64 of
/// `f"{content_hash}\x00{chunk_id}\x00{relation}\x00{jaccard!r}"` (`source._fingerprint`). `text` is scratch.
pub fn fingerprint(
    text: &mut String,
    content_hash: &str,
    chunk_id: &str,
    relation: &str,
    jaccard: f64,
) -> [u8; 8] {
    text.clear();
    for part in [content_hash, "\0", chunk_id, "\0", relation, "\0"] {
        text.push_str(part);
    }
    text.push_str(&py_float_repr(jaccard));
    blake2b_64(text.as_bytes())
}

/// What one content last told a source (`state.StatusEntry`): the chunk it belongs to (`"="`: itself) for the
/// source's `version`, how (near or not), and the canonical position if that is in this source (else -1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Status<'a> {
    pub content_hash: &'a str,
    pub seq: i64,
    pub version: i64,
    pub chunk_id: &'a str,
    pub near: bool,
    pub jaccard: f64,
    pub canonical_position: i64,
}

impl Status<'_> {
    /// Its fields by the names they are encoded under (`StatusEntry`), in the order they are encoded.
    pub const FIELDS: &'static [&'static str] = &[
        "content_hash",
        "seq",
        "version",
        "chunk_id",
        "relation",
        "jaccard",
        "canonical_position",
    ];

    pub fn write(&self, w: &mut MpWriter) {
        w.array(7);
        w.str(self.content_hash);
        w.int(self.seq);
        w.int(self.version);
        w.str(self.chunk_id);
        w.str(if self.near { "near" } else { "canonical" });
        w.float(self.jaccard);
        w.int(self.canonical_position);
    }

    /// Whether this status answers for the source's `version`: it names a chunk for it.
    pub fn answers(&self, version: i64) -> bool {
        self.version == version && !self.chunk_id.is_empty()
    }
}

/// The statuses of a packed list, in its order (an empty list is empty bytes).
pub fn read_statuses(data: &[u8]) -> Result<Vec<Status<'_>>> {
    read_list(data, 7, "a status of 7 fields", |r| {
        let content_hash = r.str()?;
        let seq = r.int()?;
        let version = r.int()?;
        let chunk_id = r.str()?;
        let near = match r.str()? {
            "near" => true,
            "canonical" => false,
            _ => return Err(Malformed("a relation")),
        };
        Ok(Status {
            content_hash,
            seq,
            version,
            chunk_id,
            near,
            jaccard: r.float()?,
            canonical_position: r.int()?,
        })
    })
}

/// The packed list of `statuses`, which must be sorted by content hash, without repeats.
pub fn write_statuses<'s>(statuses: impl ExactSizeIterator<Item = &'s Status<'s>>) -> Vec<u8> {
    let mut w = MpWriter::with_capacity(16 + 160 * statuses.len());
    w.array(statuses.len());
    for status in statuses {
        status.write(&mut w);
    }
    w.out
}

/// A status the content stage tells a source, owned until the batch packs its source's list.
pub struct Told {
    pub content_hash: String,
    pub seq: i64,
    pub version: i64,
    pub chunk_id: String,
    pub near: bool,
    pub jaccard: f64,
    pub canonical_position: i64,
}

/// The packed list of the statuses a batch tells one source, sorted by content hash.
pub fn pack_told(told: &mut [Told]) -> Vec<u8> {
    told.sort_unstable_by(|a, b| a.content_hash.cmp(&b.content_hash));
    let statuses: Vec<Status<'_>> = told
        .iter()
        .map(|t| Status {
            content_hash: &t.content_hash,
            seq: t.seq,
            version: t.version,
            chunk_id: &t.chunk_id,
            near: t.near,
            jaccard: t.jaccard,
            canonical_position: t.canonical_position,
        })
        .collect();
    write_statuses(statuses.iter())
}
