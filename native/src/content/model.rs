//! The content stage's records and the parts of messages they hold, encoded as msgspec encodes the package's
//! structs (`streamdedup.core.state`, `streamdedup.core.messages`, `streamdedup.core.model`): the same bytes, so
//! that a state written by either implementation reads the same in the other.

use std::rc::Rc;

use indexmap::IndexMap;

use super::mp::{Malformed, Reader, Result, Value, Writer};

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
}

impl SourceAttrs {
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
                _ => r.skip()?,
            }
        }
        attrs.acl = acl.ok_or(Malformed("the attributes' acl"))?;
        attrs.modified_at = modified_at.ok_or(Malformed("the attributes' modified_at"))?;
        Ok(attrs)
    }

    pub fn encode(&self, w: &mut Writer) {
        let at = w.struct_map(7);
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
        w.end_struct_map(at, count);
    }
}

fn optional_string(r: &mut Reader) -> Result<Option<String>> {
    Ok(if r.nil() { None } else { Some(r.string()?) })
}

/// The fields of an array-like struct as msgspec reads them: `required` at least, those past `fields` ignored.
struct Fields {
    given: usize,
    extra: usize,
}

impl Fields {
    fn open(r: &mut Reader, required: usize, fields: usize, what: &'static str) -> Result<Self> {
        let n = r.array()?;
        if n < required {
            return Err(Malformed(what));
        }
        Ok(Fields {
            given: n.min(fields),
            extra: n.saturating_sub(fields),
        })
    }

    /// Whether field ``index`` (from 0) is present.
    fn has(&self, index: usize) -> bool {
        index < self.given
    }

    fn close(self, r: &mut Reader) -> Result<()> {
        for _ in 0..self.extra {
            r.skip()?;
        }
        Ok(())
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
}

impl Rank {
    pub fn decode(r: &mut Reader) -> Result<Self> {
        let f = Fields::open(r, 5, 6, "a rank")?;
        let rank = Rank {
            authority: r.int()?,
            modified_at: r.int()?,
            length: r.int()?,
            source_id: r.string()?,
            content_hash: r.string()?,
            preferred: if f.has(5) { r.boolean()? } else { false },
        };
        f.close(r)?;
        Ok(rank)
    }

    pub fn encode(&self, w: &mut Writer) {
        w.array(6);
        w.int(self.authority);
        w.int(self.modified_at);
        w.int(self.length);
        w.str(&self.source_id);
        w.str(&self.content_hash);
        w.boolean(self.preferred);
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

    fn decode(r: &mut Reader) -> Result<Self> {
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
    fn decode(r: &mut Reader) -> Result<Self> {
        let f = Fields::open(r, 2, 2, "a neighbour")?;
        let entry = NeighborEntry {
            jaccard: r.float()?,
            info: Info::decode(r)?,
        };
        f.close(r)?;
        Ok(entry)
    }

    fn encode(&self, w: &mut Writer) {
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
    fn decode(r: &mut Reader) -> Result<Self> {
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

    fn encode(&self, w: &mut Writer) {
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

fn optional_position(r: &mut Reader) -> Result<Option<Position>> {
    if r.nil() {
        return Ok(None);
    }
    let f = Fields::open(r, 2, 2, "a source position")?;
    let found = (r.string()?, r.int()?);
    f.close(r)?;
    Ok(Some(found))
}

fn encode_position(w: &mut Writer, position: &Position) {
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
    fn decode(r: &mut Reader) -> Result<Self> {
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

    fn encode(&self, w: &mut Writer) {
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

fn map_of<T>(
    r: &mut Reader,
    mut read: impl FnMut(&mut Reader) -> Result<T>,
) -> Result<IndexMap<String, T>> {
    let n = r.map()?;
    let mut found = IndexMap::with_capacity(n);
    for _ in 0..n {
        let key = r.string()?;
        let value = read(r)?;
        found.insert(key, value);
    }
    Ok(found)
}

fn encode_map_of<T>(
    w: &mut Writer,
    map: &IndexMap<String, T>,
    mut write: impl FnMut(&mut Writer, &T),
) {
    w.map(map.len());
    for (key, value) in map {
        w.str(key);
        write(w, value);
    }
}

/// The state of the content stage for one distinct normalized text (`ContentRecord`).
#[derive(Clone, Debug, PartialEq)]
pub struct ContentRecord {
    pub seq: i64,
    pub epoch: i64,
    pub alive: bool,
    pub has_text: bool,
    pub norm_stored: String,
    pub text: String,
    pub length: i64,
    pub indexed: bool,
    pub positions: i64,
    pub principals: IndexMap<String, i64>,
    pub top: Vec<Ref>,
    pub pending_bands: Vec<String>,
    pub candidates: IndexMap<String, i64>,
    pub sketch: Vec<u8>,
    pub pending_verify: Vec<String>,
    pub checked: Vec<String>,
    pub neighbors: IndexMap<String, NeighborEntry>,
    pub role: Role,
    pub target: String,
    pub jaccard: f64,
    pub canonical_ref: Option<Position>,
    pub members: IndexMap<String, MemberReport>,
    pub sent_info: Option<Info>,
    pub sent_report: Option<MemberReport>,
    pub sent_status: Option<ChunkStatus>,
    pub record_digest: String,
    pub revision: i64,
    pub flagged: Vec<String>,
    pub conflicted: bool,
    pub conflict: Option<Conflict>,
    pub flag_partner: String,
    pub raised: Vec<String>,
    pub decisions: IndexMap<String, PairMark>,
}

impl Default for ContentRecord {
    fn default() -> Self {
        ContentRecord {
            seq: 0,
            epoch: 0,
            alive: false,
            has_text: false,
            norm_stored: String::new(),
            text: String::new(),
            length: 0,
            indexed: false,
            positions: 0,
            principals: IndexMap::new(),
            top: Vec::new(),
            pending_bands: Vec::new(),
            candidates: IndexMap::new(),
            sketch: Vec::new(),
            pending_verify: Vec::new(),
            checked: Vec::new(),
            neighbors: IndexMap::new(),
            role: Role::Pending,
            target: String::new(),
            jaccard: 1.0,
            canonical_ref: None,
            members: IndexMap::new(),
            sent_info: None,
            sent_report: None,
            sent_status: None,
            record_digest: String::new(),
            revision: 0,
            flagged: Vec::new(),
            conflicted: false,
            conflict: None,
            flag_partner: String::new(),
            raised: Vec::new(),
            decisions: IndexMap::new(),
        }
    }
}

/// The number of fields of `ContentRecord`: what its map header is sized by.
const CONTENT_FIELDS: usize = 33;

impl ContentRecord {
    pub fn decode(r: &mut Reader) -> Result<Self> {
        let n = r.map()?;
        let mut c = ContentRecord::default();
        for _ in 0..n {
            match r.str()? {
                "seq" => c.seq = r.int()?,
                "epoch" => c.epoch = r.int()?,
                "alive" => c.alive = r.boolean()?,
                "has_text" => c.has_text = r.boolean()?,
                "norm" => c.norm_stored = r.string()?,
                "text" => c.text = r.string()?,
                "length" => c.length = r.int()?,
                "indexed" => c.indexed = r.boolean()?,
                "positions" => c.positions = r.int()?,
                "principals" => c.principals = map_of(r, |r| r.int())?,
                "top" => {
                    let n = r.array()?;
                    c.top = (0..n)
                        .map(|_| Ref::decode(r, true))
                        .collect::<Result<_>>()?;
                }
                "pending_bands" => c.pending_bands = r.strings()?,
                "candidates" => c.candidates = map_of(r, |r| r.int())?,
                "sketch" => c.sketch = r.bin()?.to_vec(),
                "pending_verify" => c.pending_verify = r.strings()?,
                "checked" => c.checked = r.strings()?,
                "neighbors" => c.neighbors = map_of(r, NeighborEntry::decode)?,
                "role" => c.role = Role::decode(r)?,
                "target" => c.target = r.string()?,
                "jaccard" => c.jaccard = r.float()?,
                "canonical_ref" => c.canonical_ref = optional_position(r)?,
                "members" => c.members = map_of(r, MemberReport::decode)?,
                "sent_info" => {
                    c.sent_info = if r.nil() {
                        None
                    } else {
                        Some(Info::decode(r)?)
                    }
                }
                "sent_report" => {
                    c.sent_report = if r.nil() {
                        None
                    } else {
                        Some(MemberReport::decode(r)?)
                    }
                }
                "sent_status" => {
                    c.sent_status = if r.nil() {
                        None
                    } else {
                        Some(ChunkStatus::decode(r)?)
                    }
                }
                "record_digest" => c.record_digest = r.string()?,
                "revision" => c.revision = r.int()?,
                "flagged" => c.flagged = r.strings()?,
                "conflicted" => c.conflicted = r.boolean()?,
                "conflict" => {
                    c.conflict = if r.nil() {
                        None
                    } else {
                        Some(Conflict::decode(r)?)
                    }
                }
                "flag_partner" => c.flag_partner = r.string()?,
                "raised" => c.raised = r.strings()?,
                "decisions" => c.decisions = map_of(r, PairMark::decode)?,
                _ => r.skip()?,
            }
        }
        Ok(c)
    }

    pub fn encode(&self, w: &mut Writer) {
        let at = w.struct_map(CONTENT_FIELDS);
        let mut count = 0;
        let mut field = |w: &mut Writer, name: &str| {
            w.str(name);
            count += 1;
        };
        if self.seq != 0 {
            field(w, "seq");
            w.int(self.seq);
        }
        if self.epoch != 0 {
            field(w, "epoch");
            w.int(self.epoch);
        }
        if self.alive {
            field(w, "alive");
            w.boolean(true);
        }
        if self.has_text {
            field(w, "has_text");
            w.boolean(true);
        }
        if !self.norm_stored.is_empty() {
            field(w, "norm");
            w.str(&self.norm_stored);
        }
        if !self.text.is_empty() {
            field(w, "text");
            w.str(&self.text);
        }
        if self.length != 0 {
            field(w, "length");
            w.int(self.length);
        }
        if self.indexed {
            field(w, "indexed");
            w.boolean(true);
        }
        if self.positions != 0 {
            field(w, "positions");
            w.int(self.positions);
        }
        if !self.principals.is_empty() {
            field(w, "principals");
            encode_map_of(w, &self.principals, |w, v| w.int(*v));
        }
        if !self.top.is_empty() {
            field(w, "top");
            w.array(self.top.len());
            for found in &self.top {
                found.encode(w, true);
            }
        }
        if !self.pending_bands.is_empty() {
            field(w, "pending_bands");
            w.strings(&self.pending_bands);
        }
        if !self.candidates.is_empty() {
            field(w, "candidates");
            encode_map_of(w, &self.candidates, |w, v| w.int(*v));
        }
        if !self.sketch.is_empty() {
            field(w, "sketch");
            w.bin(&self.sketch);
        }
        if !self.pending_verify.is_empty() {
            field(w, "pending_verify");
            w.strings(&self.pending_verify);
        }
        if !self.checked.is_empty() {
            field(w, "checked");
            w.strings(&self.checked);
        }
        if !self.neighbors.is_empty() {
            field(w, "neighbors");
            encode_map_of(w, &self.neighbors, |w, v| v.encode(w));
        }
        if self.role != Role::Pending {
            field(w, "role");
            w.str(self.role.name());
        }
        if !self.target.is_empty() {
            field(w, "target");
            w.str(&self.target);
        }
        if self.jaccard != 1.0 {
            field(w, "jaccard");
            w.float(self.jaccard);
        }
        if let Some(position) = &self.canonical_ref {
            field(w, "canonical_ref");
            encode_position(w, position);
        }
        if !self.members.is_empty() {
            field(w, "members");
            encode_map_of(w, &self.members, |w, v| v.encode(w));
        }
        if let Some(info) = &self.sent_info {
            field(w, "sent_info");
            info.encode(w);
        }
        if let Some(report) = &self.sent_report {
            field(w, "sent_report");
            report.encode(w);
        }
        if let Some(status) = &self.sent_status {
            field(w, "sent_status");
            status.encode(w);
        }
        if !self.record_digest.is_empty() {
            field(w, "record_digest");
            w.str(&self.record_digest);
        }
        if self.revision != 0 {
            field(w, "revision");
            w.int(self.revision);
        }
        if !self.flagged.is_empty() {
            field(w, "flagged");
            w.strings(&self.flagged);
        }
        if self.conflicted {
            field(w, "conflicted");
            w.boolean(true);
        }
        if let Some(conflict) = &self.conflict {
            field(w, "conflict");
            conflict.encode(w);
        }
        if !self.flag_partner.is_empty() {
            field(w, "flag_partner");
            w.str(&self.flag_partner);
        }
        if !self.raised.is_empty() {
            field(w, "raised");
            w.strings(&self.raised);
        }
        if !self.decisions.is_empty() {
            field(w, "decisions");
            encode_map_of(w, &self.decisions, |w, v| v.encode(w));
        }
        w.end_struct_map(at, count);
    }
}

/// Decode a whole record of one of the content stage's kinds and encode it again (what the tests compare with
/// msgspec).
pub fn reencode(kind: &str, raw: &[u8]) -> Result<Vec<u8>> {
    let mut r = Reader::new(raw);
    let mut w = Writer::with_capacity(raw.len() + 16);
    match kind {
        "content" => ContentRecord::decode(&mut r)?.encode(&mut w),
        "ref" => RefEntry::decode(&mut r)?.encode(&mut w),
        "ids" => ContentIds::decode(&mut r)?.encode(&mut w),
        _ => return Err(Malformed("a record kind")),
    }
    if !r.finished() {
        return Err(Malformed("the end of the record"));
    }
    Ok(w.out)
}
