//! The content stage's batch (`streamdedup.core.stages.content.ContentStage.handle` and the modules it is built
//! from), cut as the Python stage is cut: the messages it takes (`messages.rs`), the batch's working set
//! (`work.rs`, `content_work`), a content's sources (`sources.rs`, `content_sources`), the discovery of its near
//! copies (`discovery.rs` and `verify.rs`, `content_discovery`), the values it outputs (`records.rs`,
//! `streamdedup.core.records`), settling each content (`settle.rs` and `decide.rs`, `content_settle`) and the
//! batch itself (`batch.rs`, `content.ContentStage`). The Python stage is the twin the package's tests compare
//! this with, message by message and record by record; each function names the one it follows.
//!
//! What the stage reads and sends goes through a [`Host`]: the state's reads, the helpers that only Python has
//! (normalizing text that is not ASCII, fact tokens), and every message and output it emits, which the host
//! builds (the PyO3 bindings build Python objects). The batch is generic over its host, so each call is static.

mod batch;
mod decide;
mod discovery;
mod messages;
mod records;
mod settle;
mod sources;
mod verify;
mod work;

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use rustc_hash::FxHashMap as HashMap;

pub use messages::{
    BandAck, In, NeighborUpdate, PairDecision, RefUpdate, VerifyRequest, VerifyResult,
};
pub use records::{
    chunk_json, chunk_msgpack, Audit, ChunkSource, ChunkView, Detail, Review, ReviewSide,
    AUDIT_SCHEMA, CHUNK_SCHEMA, REVIEW_SCHEMA,
};

use crate::mapping::{pack_told, Told};
use crate::model::{Info, MemberReport, PairMark, RefEntry};
use crate::policy::Policy;
use crate::shingles::Shingles;
use crate::signature::Features;

/// The engine's parameters the stage reads.
pub struct Params {
    pub threshold: f64,
    pub min_shingles: usize,
    pub max_candidates: usize,
    pub max_chunk_sources: usize,
    pub shingle_size: usize,
    pub num_perm: usize,
    pub bands: usize,
    pub rows: usize,
    /// The fewest agreeing sketch fields a band candidate needs to be verified (`sketches.dismiss_below`).
    pub dismiss_below: usize,
}

/// The value of an output record (`messages.Output`).
pub enum OutputValue<'a> {
    /// None: the key's record is gone.
    Tombstone,
    Audit(Audit<'a>),
    Review(Review<'a>),
    /// A canonical chunk's value, already the JSON msgspec writes for it (a `msgspec.Raw`).
    ChunkJson(&'a [u8]),
    /// A canonical chunk whose metadata JSON cannot hold: its value as objects, with its revision.
    Chunk(&'a ChunkView<'a>),
}

/// A `VerifyRequest` to send (`content_hash` is the receiver's).
pub struct VerifyRequestOut<'a, I> {
    pub content_hash: &'a str,
    pub sender: &'a str,
    pub epoch: i64,
    pub norm: &'a str,
    pub text: &'a str,
    pub info: &'a I,
    pub decision: Option<&'a PairMark>,
    pub report: Option<&'a MemberReport>,
    pub sketch: &'a [u8],
}

/// A `VerifyResult` to send (`content_hash` is the receiver's).
pub struct VerifyResultOut<'a, I> {
    pub content_hash: &'a str,
    pub sender: &'a str,
    pub epoch: i64,
    pub jaccard: f64,
    pub edge: bool,
    pub info: &'a I,
    pub conflict: Option<&'a [String]>,
    pub text: &'a str,
    pub decision: Option<&'a PairMark>,
    pub report: Option<&'a MemberReport>,
}

/// What the stage reads from and sends to the world around it. The batch calls it statically (it is generic over
/// its host): its methods are called per message and must not cost a dynamic dispatch or more.
pub trait Host {
    /// What a failed call returns; the stage's own errors are made by [`Host::error`].
    type Error;
    /// Text a reference update holds, where the message holds it.
    type Text: std::ops::Deref<Target = str>;
    /// A stored value, as the state's read returned it (decoded in place, not copied).
    type Bytes: AsRef<[u8]>;
    /// An `Info` made once for the messages of one content that carry it.
    type Info;

    /// An error of the stage's own (a malformed record, a content in a state it cannot be in).
    fn error(message: String) -> Self::Error;

    /// The stored values of `keys`, in order, None where absent.
    fn read(&mut self, keys: &[String]) -> Result<Vec<Option<Self::Bytes>>, Self::Error>;
    /// Every stored `(key, value)` under `prefix`.
    fn scan(&mut self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, Self::Error>;

    /// The normalized form of a text that is not ASCII (`normalize.normalize`; ASCII the stage normalizes).
    fn normalize(&mut self, text: &str) -> Result<String, Self::Error>;
    /// The fact tokens of a normalized text (`facts.fact_tokens`).
    fn fact_tokens(&mut self, norm: &str) -> Result<Vec<String>, Self::Error>;
    /// How two lists of fact tokens differ, for a reviewer (`facts.describe_fact_difference`).
    fn describe_fact_difference(
        &mut self,
        low: &[String],
        high: &[String],
    ) -> Result<String, Self::Error>;
    /// `model.format_timestamp` of a time outside the years 1 to 9999 (the stage writes the others).
    fn format_timestamp(&mut self, micros: i64) -> Result<String, Self::Error>;
    /// The signature features of normalized texts (`SignatureScheme.compiled`).
    fn features(
        &mut self,
        texts: &[&str],
        bands: usize,
        rows: usize,
        min_shingles: i64,
    ) -> Result<Vec<Features>, Self::Error>;

    /// Make an `Info` to send.
    fn info(&mut self, info: &Info) -> Result<Self::Info, Self::Error>;
    /// Send a `BandJoin` (`join`) or a `BandLeave`.
    fn band(
        &mut self,
        join: bool,
        content_hash: &str,
        epoch: i64,
        bands: &[String],
    ) -> Result<(), Self::Error>;
    fn verify_request(
        &mut self,
        message: &VerifyRequestOut<'_, Self::Info>,
    ) -> Result<(), Self::Error>;
    fn verify_result(
        &mut self,
        message: &VerifyResultOut<'_, Self::Info>,
    ) -> Result<(), Self::Error>;
    /// Send a `NeighborUpdate` to `content_hash`.
    fn neighbor_update(
        &mut self,
        content_hash: &str,
        sender: &str,
        info: &Self::Info,
        report: Option<&MemberReport>,
    ) -> Result<(), Self::Error>;
    /// Emit an `Output`.
    fn output(&mut self, topic: &str, key: &str, value: OutputValue<'_>)
        -> Result<(), Self::Error>;
    /// Send a `SourceStatuses`: the packed statuses a batch tells one source.
    fn source_statuses(&mut self, source_id: &str, packed: &[u8]) -> Result<(), Self::Error>;
}

/// What a batch writes: `(key, value or None)`.
pub type Writes = Vec<(String, Option<Vec<u8>>)>;

/// Apply a batch of messages for one partition: return the writes; the messages and outputs go to `host`, in
/// order, each source's statuses last.
pub fn apply<H: Host>(
    host: &mut H,
    params: &Params,
    policy: &Policy,
    messages: Vec<In<H::Text>>,
) -> Result<Writes, H::Error> {
    let mut batch = Batch {
        host,
        params,
        policy,
        refs: HashMap::default(),
        refs_dirty: BTreeSet::new(),
        shingles: HashMap::default(),
        facts: HashMap::default(),
        told: BTreeMap::new(),
    };
    let writes = batch.run(messages)?;
    for (source_id, mut told) in std::mem::take(&mut batch.told) {
        batch
            .host
            .source_statuses(&source_id, &pack_told(&mut told))?;
    }
    Ok(writes)
}

/// One batch of the stage: its host, and what it has read, computed and told so far.
struct Batch<'a, H: Host> {
    host: &'a mut H,
    params: &'a Params,
    policy: &'a Policy,
    refs: HashMap<String, Option<RefEntry>>,
    refs_dirty: BTreeSet<String>,
    shingles: HashMap<String, Rc<Shingles>>,
    facts: HashMap<String, Rc<Vec<String>>>,
    /// What the batch tells each source, sent as one `SourceStatuses` a source when it ends.
    told: BTreeMap<String, Vec<Told>>,
}
