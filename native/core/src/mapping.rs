//! A source's mapping (`streamdedup.core.stages.source`): what each of its positions maps to, from what its
//! contents told it, with a fingerprint per position, and the `source-mappings` record (`mapping/v2`: the
//! source's attributes and its rows) when those changed. The twin the tests compare this with is
//! `mapping_in_python` (from `current_mapping`, `_fingerprint`, `records.mapping_row` and
//! `records.mapping_of_rows`).
//!
//! A source keeps what its contents last told it as one packed list (`state.pack_statuses`): MessagePack, an
//! array of `StatusEntry` arrays sorted by content hash. The content stage sends a source the statuses of a batch
//! in the same form (`SourceStatuses`), and `merge_statuses` takes them in.

use std::collections::BTreeMap;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::json::{python_repr, Writer as JsonWriter};
use crate::keys::round6;
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

/// Take the packed lists `incoming` (in the order they came) into a source's packed `statuses`, for the contents
/// `listed` in its chunk list: a status is kept if its content is listed and it is newer, by (seq, version), than
/// the one held; the statuses of contents no longer listed are dropped. The new packed list, or None if it did not
/// change (`source.merge_in_python` is the twin).
pub fn merge<S: AsRef<[u8]>>(
    listed: &HashSet<&str>,
    statuses: &[u8],
    incoming: &[S],
) -> Result<Option<Vec<u8>>> {
    let held = read_statuses(statuses)?;
    let count = held.len();
    let mut merged: BTreeMap<&str, Status<'_>> = held
        .into_iter()
        .filter(|s| listed.contains(s.content_hash))
        .map(|s| (s.content_hash, s))
        .collect();
    let mut changed = merged.len() != count;
    for blob in incoming {
        for status in read_statuses(blob.as_ref())? {
            if !listed.contains(status.content_hash) {
                continue;
            }
            if let Some(known) = merged.get(status.content_hash) {
                if (known.seq, known.version) >= (status.seq, status.version) {
                    continue;
                }
            }
            merged.insert(status.content_hash, status);
            changed = true;
        }
    }
    Ok(changed.then(|| write_statuses(merged.values())))
}

/// One position's entry: relation and Jaccard similarity.
struct Entry<'a> {
    content_hash: &'a str,
    chunk_id: &'a str,
    relation: &'static str,
    jaccard: f64,
}

const MAPPING_SCHEMA: &str = "streamdedup.mapping/v2";

/// What a `mapping/v2` record says of its source besides its positions (`records.MappedAttrs`), as a chunk
/// record's source entries write it: its readers, sorted; its `modified_at` (RFC 3339); its `uri`, null when it
/// has none; its `title`, left out when it has none.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MappedAttrs<'a> {
    pub acl: &'a [&'a str],
    pub modified_at: &'a str,
    pub uri: Option<&'a str>,
    pub title: Option<&'a str>,
}

/// The value of a `source-mappings` record as JSON, and the (position, chunk id) of each exact copy whose entry
/// changed.
pub type MappingRecord = (Vec<u8>, Vec<(usize, String)>);

/// A source's mapping: the fingerprint of each entry (8 bytes each), and its record when it is to be sent.
pub struct Mapping {
    pub prints: Vec<u8>,
    pub changed: Option<MappingRecord>,
}

/// Each position's entry (`source.current_mapping`), or None until every position's content answered for
/// `version`.
fn entries<'a>(
    chunks: &[&'a str],
    told: &HashMap<&str, Status<'a>>,
    version: i64,
) -> Option<Vec<Entry<'a>>> {
    let mut entries = Vec::with_capacity(chunks.len());
    for (position, &content_hash) in chunks.iter().enumerate() {
        let status = told.get(content_hash).filter(|s| s.answers(version))?;
        let (relation, jaccard) = if status.near {
            ("near", status.jaccard)
        } else if status.canonical_position == position as i64 {
            ("canonical", 1.0)
        } else {
            ("exact", 1.0)
        };
        let chunk_id = if status.chunk_id == "=" {
            content_hash
        } else {
            status.chunk_id
        };
        entries.push(Entry {
            content_hash,
            chunk_id,
            relation,
            jaccard,
        });
    }
    Some(entries)
}

/// A source's mapping for one version, before its record is written: each position's entry, and the fingerprint
/// of each (8 bytes each). Its record is written only when it is to be sent (`Mapped::unchanged`), so a caller
/// gets the source's attributes only then.
pub struct Mapped<'a> {
    entries: Vec<Entry<'a>>,
    pub prints: Vec<u8>,
}

impl<'a> Mapped<'a> {
    /// The mapping from `chunks` (a source's content hash per position) and `statuses` (its packed status list),
    /// for its `version`: None until every position's content answered for that version.
    pub fn of(chunks: &[&'a str], statuses: &'a [u8], version: i64) -> Result<Option<Self>> {
        let told: HashMap<&str, Status<'a>> = read_statuses(statuses)?
            .into_iter()
            .map(|s| (s.content_hash, s))
            .collect();
        let Some(entries) = entries(chunks, &told, version) else {
            return Ok(None);
        };
        let mut prints = Vec::with_capacity(8 * entries.len());
        let mut text = String::new();
        for e in &entries {
            let print = fingerprint(&mut text, e.content_hash, e.chunk_id, e.relation, e.jaccard);
            prints.extend_from_slice(&print);
        }
        Ok(Some(Mapped { entries, prints }))
    }

    /// Whether the record need not be sent: the fingerprints equal `before` and `sent` says the mapping sent last
    /// was for this version. The fingerprints do not cover the source's attributes: they change only with its
    /// version, and a new version's mapping is always sent.
    pub fn unchanged(&self, before: &[u8], sent: bool) -> bool {
        sent && self.prints == before
    }

    /// The record of the source `source_id` at `version`, with its `attrs`, and the exact copies whose
    /// fingerprint is not what `before` holds for their position.
    pub fn record(
        &self,
        source_id: &str,
        attrs: &MappedAttrs<'_>,
        version: i64,
        before: &[u8],
    ) -> MappingRecord {
        mapping_record(
            source_id,
            attrs,
            version,
            &self.entries,
            &self.prints,
            before,
        )
    }
}

/// A source's mapping in one call (`Mapped`): None until every position's content answered for `version`; its
/// record is left out when `Mapped::unchanged`.
pub fn mapping(
    source_id: &str,
    attrs: &MappedAttrs<'_>,
    chunks: &[&str],
    statuses: &[u8],
    version: i64,
    before: &[u8],
    sent: bool,
) -> Result<Option<Mapping>> {
    let Some(mapped) = Mapped::of(chunks, statuses, version)? else {
        return Ok(None);
    };
    let changed =
        (!mapped.unchanged(before, sent)).then(|| mapped.record(source_id, attrs, version, before));
    Ok(Some(Mapping {
        prints: mapped.prints,
        changed,
    }))
}

/// The value as msgspec writes `records.mapping_of_rows` (the same fields in the same order), and the exact
/// copies whose fingerprint is not what `before` holds for their position.
fn mapping_record(
    source_id: &str,
    attrs: &MappedAttrs<'_>,
    version: i64,
    entries: &[Entry<'_>],
    prints: &[u8],
    before: &[u8],
) -> MappingRecord {
    let about: usize = attrs.acl.iter().map(|p| p.len() + 3).sum::<usize>()
        + attrs.modified_at.len()
        + attrs.uri.map_or(0, str::len)
        + attrs.title.map_or(0, str::len);
    let mut j = JsonWriter::with_capacity(128 + source_id.len() + about + 200 * entries.len());
    j.raw(b"{\"schema\":");
    j.str(MAPPING_SCHEMA);
    j.raw(b",\"source_id\":");
    j.str(source_id);
    j.raw(b",\"version\":");
    j.int(version);
    j.raw(b",\"acl\":[");
    for (n, principal) in attrs.acl.iter().enumerate() {
        if n > 0 {
            j.raw(b",");
        }
        j.str(principal);
    }
    j.raw(b"],\"modified_at\":");
    j.str(attrs.modified_at);
    j.raw(b",\"uri\":");
    match attrs.uri {
        Some(uri) => j.str(uri),
        None => j.nil(),
    }
    if let Some(title) = attrs.title {
        j.raw(b",\"title\":");
        j.str(title);
    }
    j.raw(b",\"chunks\":[");
    let mut merged = Vec::new();
    for (position, e) in entries.iter().enumerate() {
        let at = position * 8;
        if e.relation == "exact" && before.get(at..at + 8) != Some(&prints[at..at + 8]) {
            merged.push((position, e.chunk_id.to_owned()));
        }
        j.raw(if position == 0 {
            b"{\"position\":"
        } else {
            b",{\"position\":"
        });
        j.int(position as i64);
        j.raw(b",\"content_hash\":");
        j.str(e.content_hash);
        j.raw(b",\"chunk_id\":");
        j.str(e.chunk_id);
        j.raw(b",\"relation\":\"");
        j.raw(e.relation.as_bytes());
        j.raw(b"\",\"jaccard\":");
        j.float(round6(e.jaccard));
        j.raw(b"}");
    }
    j.raw(b"]}");
    (j.out, merged)
}
