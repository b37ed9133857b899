//! The messages the content stage takes (`streamdedup.core.messages`), as the batch reads them. A reference
//! update's texts are the host's (`T`): most copies of a text never need theirs, so they stay where the message
//! holds them.

use std::rc::Rc;

use crate::keys::CONTENT_ID_CHARS;
use crate::model::{Info, MemberReport, PairMark, SourceAttrs};

/// A source's positions of a content (`RefUpdate`, or an entry of a `SourceRefs` list): empty positions drop
/// the source.
pub struct RefUpdate<T> {
    pub content_hash: String,
    pub source_id: String,
    pub version: i64,
    pub positions: Vec<i64>,
    pub texts: Vec<T>,
    pub norm: T,
    pub attrs: Option<Rc<SourceAttrs>>,
    pub attrs_only: bool,
    pub attrs_seq: i64,
}

/// The band stage's answer to a join: the bands joined and the candidates sharing them (`BandAck`).
pub struct BandAck {
    pub content_hash: String,
    pub epoch: i64,
    pub bands: Vec<String>,
    pub candidates: Vec<(String, i64)>,
}

/// Another content asks whether it is a near copy (`VerifyRequest`); `content_hash` may be a content id.
#[derive(Clone)]
pub struct VerifyRequest {
    pub content_hash: String,
    pub sender: String,
    pub epoch: i64,
    pub norm: String,
    pub text: String,
    pub info: Info,
    pub decision: Option<PairMark>,
    pub report: Option<MemberReport>,
    pub sketch: Vec<u8>,
}

/// The answer to a request this content sent (`VerifyResult`).
pub struct VerifyResult {
    pub content_hash: String,
    pub sender: String,
    pub epoch: i64,
    pub jaccard: f64,
    pub edge: bool,
    pub info: Info,
    pub conflict: Option<Vec<String>>,
    pub text: String,
    pub decision: Option<PairMark>,
    pub report: Option<MemberReport>,
}

/// A reviewer's decision about a pair (`PairDecision`).
pub struct PairDecision {
    pub content_hash: String,
    pub other: String,
    pub mark: PairMark,
}

/// A neighbour's new state (`NeighborUpdate`).
pub struct NeighborUpdate {
    pub content_hash: String,
    pub sender: String,
    pub info: Info,
    pub report: Option<MemberReport>,
}

/// A message the content stage takes.
pub enum In<T> {
    Ref(RefUpdate<T>),
    Ack(BandAck),
    Verify(VerifyRequest),
    Result(VerifyResult),
    Decision(PairDecision),
    Neighbor(NeighborUpdate),
}

impl<T> In<T> {
    /// The content the message is for.
    pub fn key(&self) -> &str {
        match self {
            In::Ref(m) => &m.content_hash,
            In::Ack(m) => &m.content_hash,
            In::Verify(m) => &m.content_hash,
            In::Result(m) => &m.content_hash,
            In::Decision(m) => &m.content_hash,
            In::Neighbor(m) => &m.content_hash,
        }
    }
}

/// Whether a message is a request addressed by content id (a band candidate), to resolve first.
pub(super) fn by_id<T>(message: &In<T>) -> bool {
    matches!(message, In::Verify(m) if m.content_hash.len() == CONTENT_ID_CHARS)
}
