//! The values the content stage outputs (`streamdedup.core.records`): audit and review records, and a canonical's
//! chunk record, whose MessagePack digest says whether it changed and whose JSON is written as msgspec writes the
//! Python twin's dict.

use std::cmp::Ordering;

use crate::json::Writer as JsonWriter;
use crate::keys::{format_timestamp, review_key, round6};
use crate::model::{ContentRecord, MemberReport, Ref};
use crate::mp::Writer as MpWriter;

use super::work::Work;
use super::{Batch, Host, OutputValue};

pub const CHUNK_SCHEMA: &str = "streamdedup.chunk/v2";
pub const AUDIT_SCHEMA: &str = "streamdedup.audit/v1";
pub const REVIEW_SCHEMA: &str = "streamdedup.review/v1";

/// A value an audit record names beside its action and reason.
pub enum Detail {
    Str(String),
    Float(f64),
    /// A source position: `{"source_id": ..., "position": ...}`.
    Position(String, i64),
}

/// An audit record (`records.audit_value`): `schema`, `chunk_id`, `action`, `reason`, then `detail` in order.
pub struct Audit<'a> {
    pub chunk_id: Option<&'a str>,
    pub action: &'a str,
    pub reason: &'a str,
    pub detail: &'a [(&'a str, Detail)],
}

/// One side of a review record: `{"content_hash": ..., "text": ...}` or `{"content_hash": ..., "acl": [...]}`.
pub struct ReviewSide<'a> {
    pub content_hash: &'a str,
    pub text: Option<&'a str>,
    pub acl: Option<&'a [String]>,
}

/// A review record (`records.review_value`): `schema`, `reason`, `a` and `b` (in content-hash order), `jaccard`
/// (rounded to six digits), `detail`.
pub struct Review<'a> {
    pub reason: &'a str,
    pub a: ReviewSide<'a>,
    pub b: ReviewSide<'a>,
    pub jaccard: f64,
    pub detail: &'a str,
}

/// A source of a chunk record, with its time written out and its ACL sorted.
pub struct ChunkSource<'a> {
    pub r: &'a Ref,
    pub content_hash: &'a str,
    pub modified_at: String,
    pub acl: Vec<String>,
}

/// A canonical's chunk record (`records.chunk_value`), its fields in the order it writes them.
pub struct ChunkView<'a> {
    pub key: &'a str,
    pub text: &'a str,
    pub canonical: &'a (String, i64),
    pub readers: &'a [String],
    /// The near members listed: content hash and Jaccard (rounded to six digits).
    pub members: Vec<(&'a str, f64)>,
    pub member_count: i64,
    pub sources: Vec<ChunkSource<'a>>,
    pub source_count: i64,
    /// The newest member of the lineage of the best source listed when that source is outdated (then the record
    /// says `"current": false` and names it), else empty.
    pub outdated_by: &'a str,
    pub revision: i64,
}

impl<H: Host> Batch<'_, H> {
    /// `model.format_timestamp`: the years 1 to 9999 here, any other by the host.
    fn timestamp(&mut self, micros: i64) -> Result<String, H::Error> {
        match format_timestamp(micros) {
            Some(text) => Ok(text),
            None => self.host.format_timestamp(micros),
        }
    }

    /// Output an audit record under `key`.
    pub(super) fn audit(
        &mut self,
        key: &str,
        chunk_id: Option<&str>,
        action: &str,
        reason: &str,
        detail: &[(&str, Detail)],
    ) -> Result<(), H::Error> {
        let value = Audit {
            chunk_id,
            action,
            reason,
            detail,
        };
        self.host.output("audit", key, OutputValue::Audit(value))
    }

    /// Output a review record of a pair, under the pair's key.
    pub(super) fn review(
        &mut self,
        reason: &str,
        a: ReviewSide<'_>,
        b: ReviewSide<'_>,
        jaccard: f64,
        detail: &str,
    ) -> Result<(), H::Error> {
        let key = review_key(a.content_hash, b.content_hash);
        let (a, b) = if a.content_hash > b.content_hash {
            (b, a)
        } else {
            (a, b)
        };
        let value = Review {
            reason,
            a,
            b,
            jaccard: round6(jaccard),
            detail,
        };
        self.host.output("review", &key, OutputValue::Review(value))
    }

    /// `records.chunk_value` at `revision`, output unless the digest of its MessagePack encoding without its
    /// revision (what `_emit_chunk` compares) is the one last written; the digest when it was output.
    pub(super) fn chunk(
        &mut self,
        work: &Work,
        readers: &[String],
        revision: i64,
    ) -> Result<Option<String>, H::Error> {
        let view = self.chunk_view(work, readers, revision)?;
        let encoded = chunk_msgpack(&view);
        let digest = crate::hex(crate::text::blake2b(&encoded, 16).as_bytes());
        if digest == work.record.record_digest {
            return Ok(None);
        }
        let value = match chunk_json(&view, encoded.len() + encoded.len() / 4 + 64) {
            Some(json) => {
                self.host
                    .output("canonical-chunks", view.key, OutputValue::ChunkJson(&json))
            }
            // Not a JSON document's metadata (binary data, keys that are not strings): the value as objects,
            // which the output's own encoder writes as it can.
            None => self
                .host
                .output("canonical-chunks", view.key, OutputValue::Chunk(&view)),
        };
        value.map(|()| Some(digest))
    }

    /// The chunk record's fields: the members listed (the best ranked first, at most `max_chunk_sources` - 1) and
    /// the first `max_chunk_sources` source positions of the canonical and those members.
    fn chunk_view<'w>(
        &mut self,
        work: &'w Work,
        readers: &'w [String],
        revision: i64,
    ) -> Result<ChunkView<'w>, H::Error> {
        let record = &work.record;
        let key = work.key.as_str();
        let policy = self.policy;
        let max_sources = self.params.max_chunk_sources;
        let mut listed: Vec<(&String, &MemberReport)> = record.members.iter().collect();
        listed.sort_by(|a, b| {
            let by_rank = match (&a.1.rank, &b.1.rank) {
                (None, None) => Ordering::Equal,
                (None, Some(_)) => Ordering::Less,
                (Some(_), None) => Ordering::Greater,
                (Some(x), Some(y)) => policy.compare(x, y),
            };
            by_rank.then_with(|| a.0.cmp(b.0))
        });
        listed.truncate(max_sources.saturating_sub(1));
        let mut candidates: Vec<(&Ref, &str)> = record.top.iter().map(|r| (r, key)).collect();
        if !listed.is_empty() {
            for (h, report) in &listed {
                candidates.extend(report.refs.iter().map(|r| (r, h.as_str())));
            }
            candidates.sort_by(|a, b| self.ref_cmp(a.0, b.0));
        }
        // The policy ranks a current position first: the best one is outdated only when every one is.
        let outdated_by = candidates
            .first()
            .map_or("", |(r, _)| r.attrs.outdated_by.as_str());
        candidates.truncate(max_sources);
        let mut sources = Vec::with_capacity(candidates.len());
        for (r, content_hash) in candidates {
            let mut acl = r.attrs.acl.clone();
            acl.sort();
            sources.push(ChunkSource {
                r,
                content_hash,
                modified_at: self.timestamp(r.attrs.modified_at)?,
                acl,
            });
        }
        let (text, canonical, member_count, source_count) = chunk_head(record);
        Ok(ChunkView {
            key,
            text,
            canonical,
            readers,
            members: listed
                .iter()
                .map(|(h, r)| (h.as_str(), round6(r.jaccard)))
                .collect(),
            member_count,
            sources,
            source_count,
            outdated_by,
            revision,
        })
    }
}

/// A canonical's chunk record fields that come from its record alone: the text (its canonical position's original,
/// or the record's), the canonical position, and the counts of members and of source positions.
fn chunk_head(record: &ContentRecord) -> (&str, &(String, i64), i64, i64) {
    let first = &record.top[0];
    let text = if first.text.is_empty() {
        &record.text
    } else {
        &first.text
    };
    let canonical = record
        .canonical_ref
        .as_ref()
        .expect("a canonical has its position");
    let member_count = 1 + record.members.len() as i64;
    let source_count = record.positions + record.members.values().map(|r| r.count).sum::<i64>();
    (text, canonical, member_count, source_count)
}

/// The chunk record as MessagePack, without its revision: what its digest is of.
pub fn chunk_msgpack(view: &ChunkView<'_>) -> Vec<u8> {
    let mut w = MpWriter::with_capacity(512 + view.text.len());
    let outdated = !view.outdated_by.is_empty();
    w.map(if outdated { 12 } else { 10 });
    w.str("schema");
    w.str(CHUNK_SCHEMA);
    w.str("chunk_id");
    w.str(view.key);
    w.str("text");
    w.str(view.text);
    w.str("content_hash");
    w.str(view.key);
    w.str("canonical");
    w.map(2);
    w.str("source_id");
    w.str(&view.canonical.0);
    w.str("position");
    w.int(view.canonical.1);
    w.str("acl");
    w.strings(view.readers);
    w.str("members");
    w.array(1 + view.members.len());
    for (h, relation, jaccard) in std::iter::once((view.key, "canonical", 1.0))
        .chain(view.members.iter().map(|&(h, j)| (h, "near", j)))
    {
        w.map(3);
        w.str("content_hash");
        w.str(h);
        w.str("relation");
        w.str(relation);
        w.str("jaccard");
        w.float(jaccard);
    }
    w.str("member_count");
    w.int(view.member_count);
    w.str("sources");
    w.array(view.sources.len());
    for source in &view.sources {
        source_msgpack(&mut w, source);
    }
    w.str("source_count");
    w.int(view.source_count);
    if outdated {
        w.str("current");
        w.boolean(false);
        w.str("outdated_by");
        w.str(view.outdated_by);
    }
    w.out
}

fn source_msgpack(w: &mut MpWriter, source: &ChunkSource<'_>) {
    let attrs = &source.r.attrs;
    let fields = 7 + usize::from(attrs.title.is_some()) + usize::from(attrs.metadata.is_some());
    w.map(fields);
    w.str("source_id");
    w.str(&source.r.source_id);
    w.str("position");
    w.int(source.r.position);
    w.str("content_hash");
    w.str(source.content_hash);
    w.str("acl");
    w.strings(&source.acl);
    w.str("modified_at");
    w.str(&source.modified_at);
    w.str("authority");
    w.int(attrs.authority);
    w.str("uri");
    match &attrs.uri {
        Some(uri) => w.str(uri),
        None => w.nil(),
    }
    if let Some(title) = &attrs.title {
        w.str("title");
        w.str(title);
    }
    if let Some(metadata) = &attrs.metadata {
        w.str("metadata");
        w.value(metadata);
    }
}

/// The chunk record as msgspec writes the twin's dict (the same fields in the same order, then `revision`), or
/// None when a source's metadata is not a JSON document's. `capacity`: the bytes to reserve.
pub fn chunk_json(view: &ChunkView<'_>, capacity: usize) -> Option<Vec<u8>> {
    let mut j = JsonWriter::with_capacity(capacity);
    j.raw(b"{\"schema\":");
    j.str(CHUNK_SCHEMA);
    j.raw(b",\"chunk_id\":");
    j.str(view.key);
    j.raw(b",\"text\":");
    j.str(view.text);
    j.raw(b",\"content_hash\":");
    j.str(view.key);
    j.raw(b",\"canonical\":{\"source_id\":");
    j.str(&view.canonical.0);
    j.raw(b",\"position\":");
    j.int(view.canonical.1);
    j.raw(b"},\"acl\":");
    j.strings(view.readers);
    j.raw(b",\"members\":[{\"content_hash\":");
    j.str(view.key);
    j.raw(b",\"relation\":\"canonical\",\"jaccard\":1.0}");
    for &(h, jaccard) in &view.members {
        j.raw(b",{\"content_hash\":");
        j.str(h);
        j.raw(b",\"relation\":\"near\",\"jaccard\":");
        j.float(jaccard);
        j.raw(b"}");
    }
    j.raw(b"],\"member_count\":");
    j.int(view.member_count);
    j.raw(b",\"sources\":[");
    for (i, source) in view.sources.iter().enumerate() {
        j.raw(if i == 0 { b"{" } else { b",{" });
        if !source_json(&mut j, source) {
            return None;
        }
        j.raw(b"}");
    }
    j.raw(b"],\"source_count\":");
    j.int(view.source_count);
    if !view.outdated_by.is_empty() {
        j.raw(b",\"current\":false,\"outdated_by\":");
        j.str(view.outdated_by);
    }
    j.raw(b",\"revision\":");
    j.int(view.revision);
    j.raw(b"}");
    Some(j.out)
}

/// Write a source's fields (without its braces); false if its metadata is not a JSON document's.
fn source_json(j: &mut JsonWriter, source: &ChunkSource<'_>) -> bool {
    let attrs = &source.r.attrs;
    j.raw(b"\"source_id\":");
    j.str(&source.r.source_id);
    j.raw(b",\"position\":");
    j.int(source.r.position);
    j.raw(b",\"content_hash\":");
    j.str(source.content_hash);
    j.raw(b",\"acl\":");
    j.strings(&source.acl);
    j.raw(b",\"modified_at\":");
    j.str(&source.modified_at);
    j.raw(b",\"authority\":");
    j.int(attrs.authority);
    j.raw(b",\"uri\":");
    match &attrs.uri {
        Some(uri) => j.str(uri),
        None => j.nil(),
    }
    if let Some(title) = &attrs.title {
        j.raw(b",\"title\":");
        j.str(title);
    }
    if let Some(metadata) = &attrs.metadata {
        j.raw(b",\"metadata\":");
        return j.value(metadata);
    }
    true
}
