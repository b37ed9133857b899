//! The content stage's record of one distinct normalized text (`ContentRecord`).

use indexmap::IndexMap;

use super::entries::{
    encode_position, optional_position, ChunkStatus, Conflict, NeighborEntry, Position,
};
use super::parts::{Info, MemberReport, PairMark, Ref, Role};
use super::{encode_map_of, map_of};
use crate::mp::{Reader, Result, Writer};

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
const CONTENT_FIELDS: usize = ContentRecord::FIELDS.len();

impl ContentRecord {
    /// Its fields by the names they are encoded under, in the order they are encoded.
    pub const FIELDS: [&str; 33] = [
        "seq",
        "epoch",
        "alive",
        "has_text",
        "norm",
        "text",
        "length",
        "indexed",
        "positions",
        "principals",
        "top",
        "pending_bands",
        "candidates",
        "sketch",
        "pending_verify",
        "checked",
        "neighbors",
        "role",
        "target",
        "jaccard",
        "canonical_ref",
        "members",
        "sent_info",
        "sent_report",
        "sent_status",
        "record_digest",
        "revision",
        "flagged",
        "conflicted",
        "conflict",
        "flag_partner",
        "raised",
        "decisions",
    ];

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
        self.encode_text(w, &mut count);
        self.encode_discovery(w, &mut count);
        self.encode_decision(w, &mut count);
        w.end_struct_map(at, count);
    }

    /// The fields of its life and text: `seq` to `top`, those not at their defaults.
    fn encode_text(&self, w: &mut Writer, count: &mut usize) {
        let mut field = |w: &mut Writer, name: &str| {
            w.str(name);
            *count += 1;
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
    }

    /// The fields of its discovery of near copies: `pending_bands` to `neighbors`.
    fn encode_discovery(&self, w: &mut Writer, count: &mut usize) {
        let mut field = |w: &mut Writer, name: &str| {
            w.str(name);
            *count += 1;
        };
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
    }

    /// The fields of its decision, what it told others and its review flags: `role` to `decisions`.
    fn encode_decision(&self, w: &mut Writer, count: &mut usize) {
        let mut field = |w: &mut Writer, name: &str| {
            w.str(name);
            *count += 1;
        };
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
    }
}
