//! The smaller records the content stage keeps: a source's positions of a content, a verified neighbour, a fact
//! conflict, what a content last told its sources, and the contents of one content id.

use std::rc::Rc;

use super::parts::{Info, Rank, SourceAttrs};
use super::Fields;
use crate::mp::{Malformed, Reader, Result, Writer};

/// The positions one source holds a content at (`RefEntry`).
#[derive(Clone, Debug, PartialEq)]
pub struct RefEntry {
    pub version: i64,
    pub positions: Vec<i64>,
    pub texts: Vec<String>,
    pub attrs: Option<Rc<SourceAttrs>>,
    pub attrs_seq: i64,
}

impl Default for RefEntry {
    fn default() -> Self {
        RefEntry {
            version: -1,
            positions: Vec::new(),
            texts: Vec::new(),
            attrs: None,
            attrs_seq: 0,
        }
    }
}

impl RefEntry {
    /// Its fields by the names they are encoded under, in the order they are encoded.
    pub const FIELDS: &[&str] = &["version", "positions", "texts", "attrs", "attrs_seq"];

    pub fn decode(r: &mut Reader) -> Result<Self> {
        let f = Fields::open(r, 0, 5, "a source entry")?;
        let mut entry = RefEntry::default();
        if f.has(0) {
            entry.version = r.int()?;
        }
        if f.has(1) {
            entry.positions = r.ints()?;
        }
        if f.has(2) {
            entry.texts = r.strings()?;
        }
        if f.has(3) && !r.nil() {
            entry.attrs = Some(Rc::new(SourceAttrs::decode(r)?));
        }
        if f.has(4) {
            entry.attrs_seq = r.int()?;
        }
        f.close(r)?;
        Ok(entry)
    }

    pub fn encode(&self, w: &mut Writer) {
        w.array(5);
        w.int(self.version);
        w.ints(&self.positions);
        w.strings(&self.texts);
        match &self.attrs {
            Some(attrs) => attrs.encode(w),
            None => w.nil(),
        }
        w.int(self.attrs_seq);
    }
}

/// A verified near copy (`NeighborEntry`).
#[derive(Clone, Debug, PartialEq)]
pub struct NeighborEntry {
    pub jaccard: f64,
    pub info: Info,
}

impl NeighborEntry {
    /// Its fields by the names they are encoded under, in the order they are encoded.
    pub const FIELDS: &[&str] = &["jaccard", "info"];

    pub(crate) fn decode(r: &mut Reader) -> Result<Self> {
        let f = Fields::open(r, 2, 2, "a neighbour")?;
        let entry = NeighborEntry {
            jaccard: r.float()?,
            info: Info::decode(r)?,
        };
        f.close(r)?;
        Ok(entry)
    }

    pub(crate) fn encode(&self, w: &mut Writer) {
        w.array(2);
        w.float(self.jaccard);
        self.info.encode(w);
    }
}

/// A better-ranked text above the threshold that states different facts (`Conflict`).
#[derive(Clone, Debug, PartialEq)]
pub struct Conflict {
    pub content_hash: String,
    pub jaccard: f64,
    pub rank: Rank,
    pub text: String,
    pub facts: Vec<String>,
}

impl Conflict {
    /// Its fields by the names they are encoded under, in the order they are encoded.
    pub const FIELDS: &[&str] = &["content_hash", "jaccard", "rank", "text", "facts"];

    pub(crate) fn decode(r: &mut Reader) -> Result<Self> {
        let f = Fields::open(r, 5, 5, "a conflict")?;
        let conflict = Conflict {
            content_hash: r.string()?,
            jaccard: r.float()?,
            rank: Rank::decode(r)?,
            text: r.string()?,
            facts: r.strings()?,
        };
        f.close(r)?;
        Ok(conflict)
    }

    pub(crate) fn encode(&self, w: &mut Writer) {
        w.array(5);
        w.str(&self.content_hash);
        w.float(self.jaccard);
        self.rank.encode(w);
        w.str(&self.text);
        w.strings(&self.facts);
    }
}

/// A source position named by source and position (a canonical position).
pub type Position = (String, i64);

pub(crate) fn optional_position(r: &mut Reader) -> Result<Option<Position>> {
    if r.nil() {
        return Ok(None);
    }
    let f = Fields::open(r, 2, 2, "a source position")?;
    let found = (r.string()?, r.int()?);
    f.close(r)?;
    Ok(Some(found))
}

pub(crate) fn encode_position(w: &mut Writer, position: &Position) {
    w.array(2);
    w.str(&position.0);
    w.int(position.1);
}

/// What a content last told its sources (`ChunkStatus`).
#[derive(Clone, Debug, PartialEq)]
pub struct ChunkStatus {
    pub chunk_id: String,
    pub near: bool,
    pub jaccard: f64,
    pub canonical_ref: Option<Position>,
}

impl ChunkStatus {
    /// Its fields by the names they are encoded under, in the order they are encoded.
    pub const FIELDS: &[&str] = &["chunk_id", "relation", "jaccard", "canonical_ref"];

    pub(crate) fn decode(r: &mut Reader) -> Result<Self> {
        let f = Fields::open(r, 4, 4, "a chunk status")?;
        let status = ChunkStatus {
            chunk_id: r.string()?,
            near: match r.str()? {
                "near" => true,
                "canonical" => false,
                _ => return Err(Malformed("a relation")),
            },
            jaccard: r.float()?,
            canonical_ref: optional_position(r)?,
        };
        f.close(r)?;
        Ok(status)
    }

    pub(crate) fn encode(&self, w: &mut Writer) {
        w.array(4);
        w.str(&self.chunk_id);
        w.str(if self.near { "near" } else { "canonical" });
        w.float(self.jaccard);
        match &self.canonical_ref {
            Some(position) => encode_position(w, position),
            None => w.nil(),
        }
    }
}

/// The contents of a partition whose hash begins with one content id (`ContentIds`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContentIds {
    pub hashes: Vec<String>,
    pub sketches: Vec<Vec<u8>>,
}

impl ContentIds {
    /// Its fields by the names they are encoded under, in the order they are encoded.
    pub const FIELDS: &[&str] = &["hashes", "sketches"];

    pub fn decode(r: &mut Reader) -> Result<Self> {
        let f = Fields::open(r, 0, 2, "a content id's contents")?;
        let mut ids = ContentIds::default();
        if f.has(0) {
            ids.hashes = r.strings()?;
        }
        if f.has(1) {
            let n = r.array()?;
            ids.sketches = (0..n)
                .map(|_| r.bin().map(<[u8]>::to_vec))
                .collect::<Result<_>>()?;
        }
        f.close(r)?;
        Ok(ids)
    }

    pub fn encode(&self, w: &mut Writer) {
        w.array(2);
        w.strings(&self.hashes);
        w.array(self.sketches.len());
        for sketch in &self.sketches {
            w.bin(sketch);
        }
    }
}
