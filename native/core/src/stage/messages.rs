//! The messages the content stage takes (`streamdedup.core.messages`), as the batch reads them. A reference
//! update's texts are the host's (`T`): most copies of a text never need theirs, so they stay where the message
//! holds them.

use std::rc::Rc;

use crate::keys::CONTENT_ID_CHARS;
use crate::model::{Info, MemberReport, PairMark, SourceAttrs};

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

pub struct BandAck {
    pub content_hash: String,
    pub epoch: i64,
    pub bands: Vec<String>,
    pub candidates: Vec<(String, i64)>,
}

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

pub struct PairDecision {
    pub content_hash: String,
    pub other: String,
    pub mark: PairMark,
}

pub struct NeighborUpdate {
    pub content_hash: String,
    pub sender: String,
    pub info: Info,
    pub report: Option<MemberReport>,
}

pub enum In<T> {
    Ref(RefUpdate<T>),
    Ack(BandAck),
    Verify(VerifyRequest),
    Result(VerifyResult),
    Decision(PairDecision),
    Neighbor(NeighborUpdate),
}

impl<T> In<T> {
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

pub(super) fn by_id<T>(message: &In<T>) -> bool {
    matches!(message, In::Verify(m) if m.content_hash.len() == CONTENT_ID_CHARS)
}
