//! The parts of messages and records the content stage reads and writes: a source's attributes, a content's rank,
//! role and info, a pair mark, a source position and a member's report.

use std::rc::Rc;

use super::{optional_string, Fields};
use crate::mp::{Malformed, Reader, Result, Value, Writer};

/// What a source contributes to every chunk it contains (`SourceAttrs`: a map without its default fields).
#[derive(Clone, Debug, PartialEq)]
pub struct SourceAttrs {
    pub acl: Vec<String>,
    pub modified_at: i64,
    pub authority: i64,
    pub uri: Option<String>,
    pub title: Option<String>,
    pub metadata: Option<Value>,
    pub preferred: bool,
    /// The newest live member of the source's lineage when that is another source (its copies are outdated);
    /// empty for the newest member or a source in no lineage.
    pub outdated_by: String,
}

impl SourceAttrs {
    /// Its fields by the names they are encoded under, in the order they are encoded.
    pub const FIELDS: &[&str] = &[
        "acl",
        "modified_at",
        "authority",
        "uri",
        "title",
        "metadata",
        "preferred",
        "outdated_by",
    ];

    pub fn decode(r: &mut Reader) -> Result<Self> {
        let n = r.map()?;
        let (mut acl, mut modified_at) = (None, None);
        let mut attrs = SourceAttrs {
            acl: Vec::new(),
            modified_at: 0,
            authority: 0,
            uri: None,
            title: None,
            metadata: None,
            preferred: false,
            outdated_by: String::new(),
        };
        for _ in 0..n {
            match r.str()? {
                "acl" => acl = Some(r.strings()?),
                "modified_at" => modified_at = Some(r.int()?),
                "authority" => attrs.authority = r.int()?,
                "uri" => attrs.uri = optional_string(r)?,
                "title" => attrs.title = optional_string(r)?,
                "metadata" => {
                    attrs.metadata = match r.value()? {
                        Value::Nil => None,
                        map @ Value::Map(_) => Some(map),
                        _ => return Err(Malformed("a metadata object")),
                    }
                }
                "preferred" => attrs.preferred = r.boolean()?,
                "outdated_by" => attrs.outdated_by = r.string()?,
                _ => r.skip()?,
            }
        }
        attrs.acl = acl.ok_or(Malformed("the attributes' acl"))?;
        attrs.modified_at = modified_at.ok_or(Malformed("the attributes' modified_at"))?;
        Ok(attrs)
    }

    pub fn encode(&self, w: &mut Writer) {
        let at = w.struct_map(Self::FIELDS.len());
        let mut count = 2;
        w.str("acl");
        w.strings(&self.acl);
        w.str("modified_at");
        w.int(self.modified_at);
        if self.authority != 0 {
            w.str("authority");
            w.int(self.authority);
            count += 1;
        }
        if let Some(uri) = &self.uri {
            w.str("uri");
            w.str(uri);
            count += 1;
        }
        if let Some(title) = &self.title {
            w.str("title");
            w.str(title);
            count += 1;
        }
        if let Some(metadata) = &self.metadata {
            w.str("metadata");
            w.value(metadata);
            count += 1;
        }
        if self.preferred {
            w.str("preferred");
            w.boolean(true);
            count += 1;
        }
        if !self.outdated_by.is_empty() {
            w.str("outdated_by");
            w.str(&self.outdated_by);
            count += 1;
        }
        w.end_struct_map(at, count);
    }
}

/// The canonical-policy attributes of a content (`Rank`).
#[derive(Clone, Debug, PartialEq)]
pub struct Rank {
    pub authority: i64,
    pub modified_at: i64,
    pub length: i64,
    pub source_id: String,
    pub content_hash: String,
    pub preferred: bool,
    /// No source of the content is the newest member of its lineage: it ranks after every current one.
    pub outdated: bool,
}

impl Rank {
    /// Its fields by the names they are encoded under, in the order they are encoded.
    pub const FIELDS: &[&str] = &[
        "authority",
        "modified_at",
        "length",
        "source_id",
        "content_hash",
        "preferred",
        "outdated",
    ];

    pub fn decode(r: &mut Reader) -> Result<Self> {
        let f = Fields::open(r, 5, 7, "a rank")?;
        let rank = Rank {
            authority: r.int()?,
            modified_at: r.int()?,
            length: r.int()?,
            source_id: r.string()?,
            content_hash: r.string()?,
            preferred: if f.has(5) { r.boolean()? } else { false },
            outdated: if f.has(6) { r.boolean()? } else { false },
        };
        f.close(r)?;
        Ok(rank)
    }

    pub fn encode(&self, w: &mut Writer) {
        w.array(7);
        w.int(self.authority);
        w.int(self.modified_at);
        w.int(self.length);
        w.str(&self.source_id);
        w.str(&self.content_hash);
        w.boolean(self.preferred);
        w.boolean(self.outdated);
    }
}

fn optional_rank(r: &mut Reader) -> Result<Option<Rank>> {
    Ok(if r.nil() {
        None
    } else {
        Some(Rank::decode(r)?)
    })
}

fn encode_optional_rank(w: &mut Writer, rank: &Option<Rank>) {
    match rank {
        Some(rank) => rank.encode(w),
        None => w.nil(),
    }
}

/// A content's role in its cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Pending,
    Canonical,
    Member,
    Dead,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Pending => "pending",
            Role::Canonical => "canonical",
            Role::Member => "member",
            Role::Dead => "dead",
        }
    }

    pub fn parse(name: &str) -> Result<Self> {
        Ok(match name {
            "pending" => Role::Pending,
            "canonical" => Role::Canonical,
            "member" => Role::Member,
            "dead" => Role::Dead,
            _ => return Err(Malformed("a role")),
        })
    }

    pub(crate) fn decode(r: &mut Reader) -> Result<Self> {
        Role::parse(r.str()?)
    }
}

/// What a content tells its near neighbours about itself (`Info`).
#[derive(Clone, Debug, PartialEq)]
pub struct Info {
    pub seq: i64,
    pub role: Role,
    pub rank: Option<Rank>,
    pub readers: Vec<String>,
    pub target: String,
}

impl Info {
    /// Its fields by the names they are encoded under, in the order they are encoded.
    pub const FIELDS: &[&str] = &["seq", "role", "rank", "readers", "target"];

    pub fn decode(r: &mut Reader) -> Result<Self> {
        let f = Fields::open(r, 2, 5, "an info")?;
        let info = Info {
            seq: r.int()?,
            role: Role::decode(r)?,
            rank: if f.has(2) { optional_rank(r)? } else { None },
            readers: if f.has(3) { r.strings()? } else { Vec::new() },
            target: if f.has(4) { r.string()? } else { String::new() },
        };
        f.close(r)?;
        Ok(info)
    }

    pub fn encode(&self, w: &mut Writer) {
        w.array(5);
        w.int(self.seq);
        w.str(self.role.name());
        encode_optional_rank(w, &self.rank);
        w.strings(&self.readers);
        w.str(&self.target);
    }
}

/// A reviewer's decision about a pair (`PairMark`).
#[derive(Clone, Debug, PartialEq)]
pub struct PairMark {
    pub kind: String,
    pub version: i64,
}

impl PairMark {
    /// Its fields by the names they are encoded under, in the order they are encoded.
    pub const FIELDS: &[&str] = &["kind", "version"];

    pub fn decode(r: &mut Reader) -> Result<Self> {
        let f = Fields::open(r, 2, 2, "a pair mark")?;
        let mark = PairMark {
            kind: r.string()?,
            version: r.int()?,
        };
        f.close(r)?;
        Ok(mark)
    }

    pub fn encode(&self, w: &mut Writer) {
        w.array(2);
        w.str(&self.kind);
        w.int(self.version);
    }
}

/// One source position of a content with the source's attributes (`SourceRef`, or `TopRef` with its text).
#[derive(Clone, Debug, PartialEq)]
pub struct Ref {
    pub source_id: String,
    pub position: i64,
    pub attrs: Rc<SourceAttrs>,
    pub text: String,
}

impl Ref {
    /// The fields of a `SourceRef` (``with_text`` false) by the names they are encoded under, in order.
    pub const FIELDS: &[&str] = &["source_id", "position", "attrs"];
    /// The fields of a `TopRef` (``with_text``), in order.
    pub const TOP_FIELDS: &[&str] = &["source_id", "position", "attrs", "text"];

    /// Decode a `TopRef` (``with_text``) or a `SourceRef`.
    pub fn decode(r: &mut Reader, with_text: bool) -> Result<Self> {
        let fields = if with_text { 4 } else { 3 };
        let f = Fields::open(r, 3, fields, "a source position")?;
        let found = Ref {
            source_id: r.string()?,
            position: r.int()?,
            attrs: Rc::new(SourceAttrs::decode(r)?),
            text: if f.has(3) { r.string()? } else { String::new() },
        };
        f.close(r)?;
        Ok(found)
    }

    pub fn encode(&self, w: &mut Writer, with_text: bool) {
        w.array(if with_text { 4 } else { 3 });
        w.str(&self.source_id);
        w.int(self.position);
        self.attrs.encode(w);
        if with_text {
            w.str(&self.text);
        }
    }
}

/// What a near member tells its canonical (`MemberReport`).
#[derive(Clone, Debug, PartialEq)]
pub struct MemberReport {
    pub jaccard: f64,
    pub refs: Vec<Ref>,
    pub count: i64,
    pub rank: Option<Rank>,
}

impl MemberReport {
    /// Its fields by the names they are encoded under, in the order they are encoded.
    pub const FIELDS: &[&str] = &["jaccard", "refs", "count", "rank"];

    pub fn decode(r: &mut Reader) -> Result<Self> {
        let f = Fields::open(r, 2, 4, "a member report")?;
        let jaccard = r.float()?;
        let n = r.array()?;
        let refs = (0..n)
            .map(|_| Ref::decode(r, false))
            .collect::<Result<_>>()?;
        let report = MemberReport {
            jaccard,
            refs,
            count: if f.has(2) { r.int()? } else { 0 },
            rank: if f.has(3) { optional_rank(r)? } else { None },
        };
        f.close(r)?;
        Ok(report)
    }

    pub fn encode(&self, w: &mut Writer) {
        w.array(4);
        w.float(self.jaccard);
        w.array(self.refs.len());
        for found in &self.refs {
            found.encode(w, false);
        }
        w.int(self.count);
        encode_optional_rank(w, &self.rank);
    }
}
