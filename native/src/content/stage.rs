//! The content stage's batch (`streamdedup.core.stages.content.ContentStage.handle` and the modules it is built
//! from: `content_sources`, `content_discovery`, `content_settle`), compiled. The Python stage is the twin the
//! tests compare this with, message by message and record by record; each function names the one it follows.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use indexmap::IndexMap;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::{PyBackedBytes, PyBackedStr};
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use streamdedup_kernels::keys::{
    content_id, format_timestamp, id_key, ref_key, ref_prefix, review_key, round6, CONTENT_ID_CHARS,
};
use streamdedup_kernels::shingles::{agreements, estimate, jaccard, Shingles};

use super::model::{
    ChunkStatus, Conflict, ContentIds, ContentRecord, Info, MemberReport, NeighborEntry, PairMark,
    Position, Rank, Ref, RefEntry, Role, SourceAttrs,
};
use super::mp::{Reader as MpReader, Writer as MpWriter};
use super::policy::{covered, decide, rank_of, split_reason, Policy, EVERYONE};
use super::py::{self, Classes, Writer};
use streamdedup_kernels::json::Writer as JsonWriter;
use streamdedup_kernels::mapping::{pack_told, Told};

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

/// What the stage calls back into Python for (text that is not ASCII, rare events).
pub struct Helpers {
    pub normalize: Py<PyAny>,
    pub fact_tokens: Py<PyAny>,
    pub describe_fact_difference: Py<PyAny>,
    pub format_timestamp: Py<PyAny>,
    /// The compiled signature scheme (`SignatureScheme.compiled`): not a callback, called in Rust.
    pub scheme: Py<crate::Scheme>,
}

// ---------------------------------------------------------------------------------------------------------------
// Messages in.

/// A text a reference update carries, held where the message holds it (most copies of a text never need theirs):
/// a `RefUpdate`'s Python string, or a slice of a `SourceRefs` message's packed list.
pub enum Text {
    Py(PyBackedStr),
    Packed(Rc<PyBackedBytes>, usize, usize),
}

impl std::ops::Deref for Text {
    type Target = str;

    fn deref(&self) -> &str {
        match self {
            Text::Py(text) => text,
            // SAFETY: the slice is a string the packed list's reader checked as UTF-8 (`refs::read_refs`).
            Text::Packed(data, start, end) => unsafe {
                std::str::from_utf8_unchecked(&data[*start..*end])
            },
        }
    }
}

pub struct RefUpdate {
    pub content_hash: String,
    pub source_id: String,
    pub version: i64,
    pub positions: Vec<i64>,
    pub texts: Vec<Text>,
    pub norm: Text,
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

pub enum In {
    Ref(RefUpdate),
    Ack(BandAck),
    Verify(VerifyRequest),
    Result(VerifyResult),
    Decision(PairDecision),
    Neighbor(NeighborUpdate),
}

impl In {
    fn key(&self) -> &str {
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

fn by_id(message: &In) -> bool {
    matches!(message, In::Verify(m) if m.content_hash.len() == CONTENT_ID_CHARS)
}

/// Read a `SourceRefs` message: a `RefUpdate` for each content of its packed list, in the list's order.
fn read_source_refs(
    obj: &Bound<'_, PyAny>,
    reader: &mut py::Reader,
    parsed: &mut Vec<In>,
) -> PyResult<()> {
    let py = obj.py();
    let source_id: String = obj.getattr(pyo3::intern!(py, "source_id"))?.extract()?;
    let version: i64 = obj.getattr(pyo3::intern!(py, "version"))?.extract()?;
    let attrs_seq: i64 = obj.getattr(pyo3::intern!(py, "attrs_seq"))?.extract()?;
    let attrs = obj.getattr(pyo3::intern!(py, "attrs"))?;
    let attrs = if attrs.is_none() {
        None
    } else {
        Some(reader.attrs(&attrs)?)
    };
    let data = Rc::new(
        obj.getattr(pyo3::intern!(py, "refs"))?
            .extract::<PyBackedBytes>()?,
    );
    let base = data.as_ptr() as usize;
    let text = |s: &str| {
        Text::Packed(
            data.clone(),
            s.as_ptr() as usize - base,
            s.as_ptr() as usize - base + s.len(),
        )
    };
    let refs = streamdedup_kernels::refs::read_refs(&data).map_err(|e| {
        PyValueError::new_err(format!("malformed reference list of {source_id:?}: {e}"))
    })?;
    parsed.reserve(refs.len());
    for entry in refs {
        parsed.push(In::Ref(RefUpdate {
            content_hash: entry.content_hash.to_owned(),
            source_id: source_id.clone(),
            version,
            texts: entry.texts.iter().map(|t| text(t)).collect(),
            norm: text(entry.norm),
            attrs: if entry.positions.is_empty() {
                None
            } else {
                attrs.clone()
            },
            positions: entry.positions,
            attrs_only: false,
            attrs_seq,
        }));
    }
    Ok(())
}

fn read_message(
    obj: &Bound<'_, PyAny>,
    classes: &Classes,
    reader: &mut py::Reader,
) -> PyResult<In> {
    let py = obj.py();
    let kind = obj.get_type();
    macro_rules! get {
        ($name:literal) => {
            obj.getattr(pyo3::intern!(py, $name))
        };
    }
    if kind.is(classes.ref_update.bind(py)) {
        let attrs = get!("attrs")?;
        Ok(In::Ref(RefUpdate {
            content_hash: get!("content_hash")?.extract()?,
            source_id: get!("source_id")?.extract()?,
            version: get!("version")?.extract()?,
            positions: get!("positions")?.extract()?,
            texts: get!("texts")?
                .extract::<Vec<PyBackedStr>>()?
                .into_iter()
                .map(Text::Py)
                .collect(),
            norm: Text::Py(get!("norm")?.extract()?),
            attrs: if attrs.is_none() {
                None
            } else {
                Some(reader.attrs(&attrs)?)
            },
            attrs_only: get!("attrs_only")?.extract()?,
            attrs_seq: get!("attrs_seq")?.extract()?,
        }))
    } else if kind.is(classes.band_ack.bind(py)) {
        Ok(In::Ack(BandAck {
            content_hash: get!("content_hash")?.extract()?,
            epoch: get!("epoch")?.extract()?,
            bands: py::strings(&get!("bands")?)?,
            candidates: get!("candidates")?.extract()?,
        }))
    } else if kind.is(classes.verify_request.bind(py)) {
        Ok(In::Verify(VerifyRequest {
            content_hash: get!("content_hash")?.extract()?,
            sender: get!("sender")?.extract()?,
            epoch: get!("epoch")?.extract()?,
            norm: get!("norm")?.extract()?,
            text: get!("text")?.extract()?,
            info: reader.info(&get!("info")?)?,
            decision: reader.mark(&get!("decision")?)?,
            report: reader.report(&get!("report")?)?,
            sketch: get!("sketch")?.extract()?,
        }))
    } else if kind.is(classes.verify_result.bind(py)) {
        let conflict = get!("conflict")?;
        Ok(In::Result(VerifyResult {
            content_hash: get!("content_hash")?.extract()?,
            sender: get!("sender")?.extract()?,
            epoch: get!("epoch")?.extract()?,
            jaccard: get!("jaccard")?.extract()?,
            edge: get!("edge")?.extract()?,
            info: reader.info(&get!("info")?)?,
            conflict: if conflict.is_none() {
                None
            } else {
                Some(py::strings(&conflict)?)
            },
            text: get!("text")?.extract()?,
            decision: reader.mark(&get!("decision")?)?,
            report: reader.report(&get!("report")?)?,
        }))
    } else if kind.is(classes.pair_decision.bind(py)) {
        Ok(In::Decision(PairDecision {
            content_hash: get!("content_hash")?.extract()?,
            other: get!("other")?.extract()?,
            mark: reader
                .mark(&get!("mark")?)?
                .ok_or_else(|| PyTypeError::new_err("a decision without its mark"))?,
        }))
    } else if kind.is(classes.neighbor_update.bind(py)) {
        Ok(In::Neighbor(NeighborUpdate {
            content_hash: get!("content_hash")?.extract()?,
            sender: get!("sender")?.extract()?,
            info: reader.info(&get!("info")?)?,
            report: reader.report(&get!("report")?)?,
        }))
    } else {
        Err(PyTypeError::new_err(format!(
            "content stage cannot handle {}",
            kind.name()?
        )))
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The batch's working set (`content_work`).

struct Answer {
    sender: String,
    epoch: i64,
    jaccard: f64,
    edge: bool,
    conflict: Option<Conflict>,
    decision: Option<PairMark>,
}

/// The answers a content owes (by index into `Work::answers`), each with the fact tokens to send the sender when
/// the sender is to flag the pair.
type Owed = Vec<(usize, Option<Rc<Vec<String>>>)>;

/// What a batch writes, ``(key, value or None)``, and the messages and outputs it emits.
type Applied<'py> = (
    Vec<(String, Option<Bound<'py, PyBytes>>)>,
    Vec<Bound<'py, PyAny>>,
);

struct LateEdge {
    jaccard: f64,
    info: Info,
    report: Option<MemberReport>,
}

struct Work {
    key: String,
    // Boxed, as are the works of a batch: a batch's tables then hold pointers, and its records come from the
    // allocator's reused blocks, not from fresh pages that the system must clear for every batch.
    record: Box<ContentRecord>,
    norm: Option<String>,
    was_role: Role,
    was_target: String,
    was_ref: Option<Position>,
    born: bool,
    refill: bool,
    answer_sources: BTreeSet<String>,
    to_verify: Vec<String>,
    decided_verify: Vec<String>,
    answers: Vec<Answer>,
    asked_while_dead: Vec<VerifyRequest>,
    conflicts: Vec<Conflict>,
    new_neighbors: HashSet<String>,
    late_edges: BTreeMap<String, LateEdge>,
    strangers: BTreeSet<String>,
}

impl Work {
    fn new(key: String, record: Box<ContentRecord>) -> Self {
        Work {
            was_role: record.role,
            was_target: record.target.clone(),
            was_ref: record.canonical_ref.clone(),
            key,
            record,
            norm: None,
            born: false,
            refill: false,
            answer_sources: BTreeSet::new(),
            to_verify: Vec::new(),
            decided_verify: Vec::new(),
            answers: Vec::new(),
            asked_while_dead: Vec::new(),
            conflicts: Vec::new(),
            new_neighbors: HashSet::default(),
            late_edges: BTreeMap::new(),
            strangers: BTreeSet::new(),
        }
    }
}

/// A chunk value's parts in the order `records.chunk_value` writes them.
struct SourceEntry<'a> {
    r: &'a Ref,
    content_hash: &'a str,
}

// ---------------------------------------------------------------------------------------------------------------
// The stage.

struct Batch<'a, 'py> {
    py: Python<'py>,
    params: &'a Params,
    policy: &'a Policy,
    helpers: &'a Helpers,
    make: Writer<'a, 'py>,
    read: &'a Bound<'py, PyAny>,
    scan: &'a Bound<'py, PyAny>,
    out: Vec<Bound<'py, PyAny>>,
    refs: HashMap<String, Option<RefEntry>>,
    refs_dirty: BTreeSet<String>,
    shingles: HashMap<String, Rc<Shingles>>,
    facts: HashMap<String, Rc<Vec<String>>>,
    /// What the batch tells each source, sent as one `SourceStatuses` a source when it ends.
    told: BTreeMap<String, Vec<Told>>,
}

fn norm_of(helpers: &Helpers, py: Python<'_>, work: &mut Work) -> PyResult<String> {
    if let Some(norm) = &work.norm {
        return Ok(norm.clone());
    }
    let record = &work.record;
    let norm = if !record.norm_stored.is_empty() {
        record.norm_stored.clone()
    } else if record.has_text {
        normalize(helpers, py, &record.text)?
    } else {
        String::new()
    };
    work.norm = Some(norm.clone());
    Ok(norm)
}

fn normalize(helpers: &Helpers, py: Python<'_>, text: &str) -> PyResult<String> {
    crate::text::normalized(text, helpers.normalize.bind(py))
}

impl<'a, 'py> Batch<'a, 'py> {
    fn emit(&mut self, obj: Bound<'py, PyAny>) {
        self.out.push(obj);
    }

    fn output(
        &mut self,
        topic: &str,
        key: &str,
        value: Option<Bound<'py, PyDict>>,
    ) -> PyResult<()> {
        let py = self.py;
        let value = match value {
            Some(v) => v.into_any(),
            None => py.None().into_bound(py),
        };
        self.output_value(topic, key, value)
    }

    /// An output whose value is any object: a dict, an encoded `msgspec.Raw`, or None for a tombstone.
    fn output_value(&mut self, topic: &str, key: &str, value: Bound<'py, PyAny>) -> PyResult<()> {
        let obj = self
            .make
            .classes
            .output
            .bind(self.py)
            .call1((topic, key, value))?;
        self.emit(obj);
        Ok(())
    }

    // -- state ---------------------------------------------------------------------------------------------------

    /// The stored values of `keys`, in order, as the Python bytes the read returned (decoded in place, not copied).
    fn read_many(&self, keys: &[String]) -> PyResult<Vec<Option<Bound<'py, PyBytes>>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let found: Vec<Option<Bound<'py, PyBytes>>> =
            self.read.call1((PyList::new(self.py, keys)?,))?.extract()?;
        if found.len() != keys.len() {
            return Err(PyValueError::new_err("read returned a value per key"));
        }
        Ok(found)
    }

    fn prefetch_refs(&mut self, keys: Vec<String>) -> PyResult<()> {
        let wanted: Vec<String> = keys
            .into_iter()
            .filter(|k| !self.refs.contains_key(k))
            .collect();
        let raws = self.read_many(&wanted)?;
        for (key, raw) in wanted.into_iter().zip(raws) {
            let entry = match raw {
                Some(raw) => Some(decode_ref(raw.as_bytes(), &key)?),
                None => None,
            };
            self.refs.insert(key, entry);
        }
        Ok(())
    }

    fn get_ref(&mut self, key: &str) -> PyResult<Option<&RefEntry>> {
        if !self.refs.contains_key(key) {
            self.prefetch_refs(vec![key.to_owned()])?;
        }
        Ok(self.refs[key].as_ref())
    }

    fn put_ref(&mut self, key: String, entry: RefEntry) {
        self.refs_dirty.insert(key.clone());
        self.refs.insert(key, Some(entry));
    }

    /// Every live source of a content with its entry, in source order (`SourcePositions.live`).
    fn live(&mut self, key: &str) -> PyResult<Vec<(String, RefEntry)>> {
        let prefix = ref_prefix(key);
        let stored: Vec<(String, Vec<u8>)> = self.scan.call1((&prefix,))?.extract()?;
        let mut found: BTreeMap<String, Option<RefEntry>> = BTreeMap::new();
        for (k, raw) in stored {
            let entry = decode_ref(&raw, &k)?;
            found.insert(k, Some(entry));
        }
        for k in self.refs_dirty.range(prefix.clone()..) {
            if !k.starts_with(&prefix) {
                break;
            }
            found.insert(k.clone(), self.refs[k].clone());
        }
        Ok(found
            .into_iter()
            .filter_map(|(k, entry)| {
                let entry = entry?;
                (!entry.positions.is_empty() && entry.attrs.is_some())
                    .then(|| (k[prefix.len()..].to_owned(), entry))
            })
            .collect())
    }

    // -- texts ---------------------------------------------------------------------------------------------------

    fn shingles(&mut self, norm: &str) -> Rc<Shingles> {
        if let Some(found) = self.shingles.get(norm) {
            return found.clone();
        }
        let set = Rc::new(Shingles::new(norm, self.params.shingle_size));
        self.shingles.insert(norm.to_owned(), set.clone());
        set
    }

    fn facts(&mut self, norm: &str) -> PyResult<Rc<Vec<String>>> {
        if let Some(found) = self.facts.get(norm) {
            return Ok(found.clone());
        }
        let tokens: Vec<String> = self
            .helpers
            .fact_tokens
            .bind(self.py)
            .call1((norm,))?
            .extract()?;
        let tokens = Rc::new(tokens);
        self.facts.insert(norm.to_owned(), tokens.clone());
        Ok(tokens)
    }

    fn norm(&self, work: &mut Work) -> PyResult<String> {
        norm_of(self.helpers, self.py, work)
    }

    // -- sources (`content_sources.SourcePositions`) ----------------------------------------------------------

    fn set_texts(&self, work: &mut Work, text: &str, norm: &str) -> PyResult<()> {
        let record = &mut work.record;
        record.text = text.to_owned();
        record.has_text = true;
        record.length = norm.chars().count() as i64;
        record.norm_stored = if text == norm || normalize(self.helpers, self.py, text)? == norm {
            String::new()
        } else {
            norm.to_owned()
        };
        work.norm = Some(norm.to_owned());
        Ok(())
    }

    fn apply_ref(&mut self, work: &mut Work, message: &RefUpdate) -> PyResult<bool> {
        let key = ref_key(&work.key, &message.source_id);
        let entry = self.get_ref(&key)?.cloned();
        if !message.texts.is_empty() && !work.record.has_text {
            self.set_texts(work, &message.texts[0], &message.norm)?;
        }
        if let Some(e) = &entry {
            if (message.version, message.attrs_seq) <= (e.version, e.attrs_seq) {
                return Ok(false);
            }
        }
        let new = if !message.positions.is_empty() {
            let texts = if message.attrs_only {
                match &entry {
                    Some(e) if e.positions == message.positions => e.texts.clone(),
                    _ => Vec::new(),
                }
            } else if message.texts.iter().all(|t| **t == *work.record.text) {
                Vec::new()
            } else {
                message.texts.iter().map(|t| t.to_string()).collect()
            };
            work.answer_sources.insert(message.source_id.clone());
            RefEntry {
                version: message.version,
                positions: message.positions.clone(),
                texts,
                attrs: message.attrs.clone(),
                attrs_seq: message.attrs_seq,
            }
        } else {
            RefEntry {
                version: message.version,
                attrs_seq: message.attrs_seq,
                ..RefEntry::default()
            }
        };
        let record = &mut work.record;
        let complete = record.top.len() as i64 == record.positions;
        if let Some(e) = &entry {
            if !e.positions.is_empty() && e.attrs.is_some() {
                count(record, e, -1);
            }
        }
        if !new.positions.is_empty() {
            count(record, &new, 1);
        }
        self.place(work, &message.source_id, &new, complete);
        self.put_ref(key, new);
        Ok(true)
    }

    fn ref_cmp(&self, a: &Ref, b: &Ref) -> std::cmp::Ordering {
        self.policy.compare_refs(
            (&a.source_id, a.position, &a.attrs),
            (&b.source_id, b.position, &b.attrs),
        )
    }

    fn place(&self, work: &mut Work, source_id: &str, entry: &RefEntry, complete: bool) {
        let limit = self.params.max_chunk_sources;
        let record = &mut work.record;
        let before = record.top.len();
        let kept: Vec<Ref> = record
            .top
            .iter()
            .filter(|t| t.source_id != source_id)
            .cloned()
            .collect();
        let fresh = positions_of(source_id, entry);
        let mut merged: Vec<Ref>;
        if complete || kept.len() == before {
            merged = kept;
            merged.extend(fresh);
            merged.sort_by(|a, b| self.ref_cmp(a, b));
        } else {
            let bound = kept.last().cloned();
            merged = kept;
            if let Some(bound) = bound {
                merged.extend(
                    fresh
                        .into_iter()
                        .filter(|t| self.ref_cmp(t, &bound) == std::cmp::Ordering::Less),
                );
            }
            merged.sort_by(|a, b| self.ref_cmp(a, b));
            if (merged.len() as i64) < (limit as i64).min(record.positions) {
                work.refill = true;
            }
        }
        merged.truncate(limit);
        work.record.top = merged;
    }

    fn ensure_top(&mut self, work: &mut Work) -> PyResult<()> {
        let record = &work.record;
        if work.refill
            || record.top.len() as i64
                != (self.params.max_chunk_sources as i64).min(record.positions)
        {
            self.refill(work)?;
        }
        Ok(())
    }

    fn refill(&mut self, work: &mut Work) -> PyResult<()> {
        let live = self.live(&work.key)?;
        let record = &mut work.record;
        record.positions = 0;
        record.principals = IndexMap::new();
        let mut tops = Vec::new();
        for (source_id, entry) in &live {
            count(record, entry, 1);
            tops.extend(positions_of(source_id, entry));
        }
        tops.sort_by(|a, b| self.ref_cmp(a, b));
        tops.truncate(self.params.max_chunk_sources);
        work.record.top = tops;
        work.refill = false;
        Ok(())
    }
}

/// The positions a source's entry holds, as first-position candidates (none without attributes: a tombstone).
fn positions_of(source_id: &str, entry: &RefEntry) -> Vec<Ref> {
    let Some(attrs) = &entry.attrs else {
        return Vec::new();
    };
    entry
        .positions
        .iter()
        .enumerate()
        .map(|(i, &position)| Ref {
            source_id: source_id.to_owned(),
            position,
            attrs: attrs.clone(),
            text: entry.texts.get(i).cloned().unwrap_or_default(),
        })
        .collect()
}

fn decode_ref(raw: &[u8], key: &str) -> PyResult<RefEntry> {
    let mut r = MpReader::new(raw);
    let entry = RefEntry::decode(&mut r)
        .map_err(|e| PyValueError::new_err(format!("malformed ref record at {key:?}: {e}")))?;
    Ok(entry)
}

/// Add (``sign`` 1) or remove (-1) a live ref's positions and readers in the content's counts.
fn count(record: &mut ContentRecord, entry: &RefEntry, sign: i64) {
    record.positions += sign * entry.positions.len() as i64;
    let Some(attrs) = &entry.attrs else { return };
    let mut seen: HashSet<&str> = HashSet::default();
    for principal in &attrs.acl {
        if !seen.insert(principal) {
            continue;
        }
        let next = record.principals.get(principal).copied().unwrap_or(0) + sign;
        if next > 0 {
            record.principals.insert(principal.clone(), next);
        } else {
            record.principals.shift_remove(principal);
        }
    }
}

fn readers(record: &ContentRecord) -> Vec<String> {
    if record.principals.contains_key(EVERYONE) {
        return vec![EVERYONE.to_owned()];
    }
    let mut found: Vec<String> = record.principals.keys().cloned().collect();
    found.sort();
    found
}

fn source_refs(top: &[Ref]) -> Vec<Ref> {
    top.iter()
        .map(|t| Ref {
            source_id: t.source_id.clone(),
            position: t.position,
            attrs: t.attrs.clone(),
            text: String::new(),
        })
        .collect()
}

fn settled(mark: Option<&PairMark>, kind: Option<&str>) -> bool {
    match (mark, kind) {
        (None, _) => false,
        (Some(m), Some(kind)) => m.kind == kind,
        (Some(m), None) => m.kind == "keep_separate" || m.kind == "merge",
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Discovery (`content_discovery.Discovery`).

impl<'a, 'py> Batch<'a, 'py> {
    /// `Discovery.start`: join the bands of texts that came alive in this batch.
    fn start(
        &mut self,
        works: &mut IndexMap<String, Box<Work>, rustc_hash::FxBuildHasher>,
        born: &[String],
    ) -> PyResult<()> {
        let mut norms = Vec::with_capacity(born.len());
        for key in born {
            let work = works.get_mut(key).expect("born works exist");
            norms.push(self.norm(work)?);
        }
        let p = self.params;
        let texts: Vec<&str> = norms.iter().map(String::as_str).collect();
        let features = self.helpers.scheme.get().compute(
            self.py,
            &texts,
            p.bands,
            p.rows,
            p.min_shingles as i64,
        )?;
        for (key, found) in born.iter().zip(features) {
            let Some(hashes) = found.bands else { continue };
            let band_keys = streamdedup_kernels::signature::band_keys(&hashes);
            let work = works.get_mut(key).expect("born works exist");
            let record = &mut work.record;
            record.indexed = true;
            record.sketch = found.sketch;
            let obj = self.make.classes.band_join.bind(self.py).call1((
                key,
                record.epoch,
                PyTuple::new(self.py, &band_keys)?,
            ))?;
            record.pending_bands = band_keys;
            self.emit(obj);
        }
        Ok(())
    }

    /// `Discovery.leave`.
    fn leave(&mut self, work: &mut Work) -> PyResult<Bound<'py, PyAny>> {
        let norm = self.norm(work)?;
        let p = self.params;
        let mut features =
            self.helpers
                .scheme
                .get()
                .compute(self.py, &[&norm], p.bands, p.rows, 0)?;
        let found = features.pop().expect("one text, one answer");
        let band_keys = streamdedup_kernels::signature::band_keys(
            &found.bands.expect("asked for with min_shingles 0"),
        );
        self.make.classes.band_leave.bind(self.py).call1((
            &work.key,
            work.record.epoch,
            PyTuple::new(self.py, band_keys)?,
        ))
    }

    fn on_band_answer(&mut self, work: &mut Work, message: &BandAck) {
        let record = &mut work.record;
        if message.epoch != record.epoch {
            return;
        }
        let answered: HashSet<&String> = message
            .bands
            .iter()
            .filter(|b| record.pending_bands.contains(b))
            .collect();
        if answered.is_empty() {
            return;
        }
        record.pending_bands.retain(|b| !answered.contains(b));
        let mine = content_id(&work.key);
        for (other, shared) in &message.candidates {
            if other != mine {
                *record.candidates.entry(other.clone()).or_insert(0) += shared;
            }
        }
    }

    fn choose_candidates(&mut self, work: &mut Work) {
        let record = &mut work.record;
        let counts = std::mem::take(&mut record.candidates);
        let mut known: HashSet<&str> = record.checked.iter().map(String::as_str).collect();
        known.extend(record.neighbors.keys().map(|h| content_id(h)));
        let mut fresh: Vec<&String> = counts
            .keys()
            .filter(|h| !known.contains(h.as_str()))
            .collect();
        let limit = self.params.max_candidates;
        if fresh.len() > limit {
            fresh.sort_by(|a, b| counts[*b].cmp(&counts[*a]).then_with(|| a.cmp(b)));
            fresh.truncate(limit);
        } else {
            fresh.sort();
        }
        for h in fresh {
            if !work.to_verify.contains(h) {
                work.to_verify.push(h.clone());
            }
        }
    }

    fn on_verify_request(&mut self, work: &mut Work, message: &VerifyRequest) -> PyResult<()> {
        let decision =
            self.take_decision(work, &message.sender, message.decision.as_ref(), false)?;
        if !work.record.alive {
            work.asked_while_dead.push(message.clone());
            return Ok(());
        }
        let norm = self.norm(work)?;
        let mine = self.shingles(&norm);
        let theirs = self.shingles(&message.norm);
        let similarity = jaccard(&mine, &theirs);
        let long_enough = mine.len().min(theirs.len()) >= self.params.min_shingles;
        let above = long_enough && similarity >= self.params.threshold;
        let mut conflict = None;
        let edge = match &decision {
            Some(d) if d.kind != "reopen" => d.kind == "merge",
            _ => {
                if above {
                    let my_facts = self.facts(&norm)?;
                    let their_facts = self.facts(&message.norm)?;
                    if my_facts != their_facts {
                        conflict = Some(Conflict {
                            content_hash: message.sender.clone(),
                            jaccard: similarity,
                            rank: message.info.rank.clone().unwrap_or(Rank {
                                authority: 0,
                                modified_at: 0,
                                length: 0,
                                source_id: String::new(),
                                content_hash: String::new(),
                                preferred: false,
                            }),
                            text: message.text.clone(),
                            facts: (*their_facts).clone(),
                        });
                    }
                }
                above && conflict.is_none()
            }
        };
        if edge {
            self.remember(
                work,
                &message.sender,
                similarity,
                &message.info,
                message.report.as_ref(),
            );
            work.new_neighbors.insert(message.sender.clone());
        } else if decision.is_some() {
            forget(work, &message.sender, Some(message.info.seq));
        }
        work.answers.push(Answer {
            sender: message.sender.clone(),
            epoch: message.epoch,
            jaccard: similarity,
            edge,
            conflict,
            decision,
        });
        Ok(())
    }

    fn on_verify_result(&mut self, work: &mut Work, message: &VerifyResult) -> PyResult<()> {
        let decision =
            self.take_decision(work, &message.sender, message.decision.as_ref(), false)?;
        let stale = match &decision {
            Some(d) => match &message.decision {
                None => true,
                Some(m) => m.version < d.version,
            },
            None => false,
        };
        let asked = content_id(&message.sender);
        let record = &mut work.record;
        if message.epoch == record.epoch {
            if let Some(at) = record.pending_verify.iter().position(|h| h == asked) {
                record.pending_verify.remove(at);
                if let (Some(facts), Some(rank)) = (&message.conflict, &message.info.rank) {
                    if record.alive && !stale && !settled(decision.as_ref(), None) {
                        work.conflicts.push(Conflict {
                            content_hash: message.sender.clone(),
                            jaccard: message.jaccard,
                            rank: rank.clone(),
                            text: message.text.clone(),
                            facts: facts.clone(),
                        });
                    }
                }
            }
        }
        if stale {
            return Ok(());
        }
        if message.edge {
            if work.record.alive {
                self.remember(
                    work,
                    &message.sender,
                    message.jaccard,
                    &message.info,
                    message.report.as_ref(),
                );
            } else {
                work.late_edges.insert(
                    message.sender.clone(),
                    LateEdge {
                        jaccard: message.jaccard,
                        info: message.info.clone(),
                        report: message.report.clone(),
                    },
                );
            }
        } else if decision.is_some() {
            forget(work, &message.sender, Some(message.info.seq));
        }
        Ok(())
    }

    /// `Discovery._take_decision`.
    fn take_decision(
        &mut self,
        work: &mut Work,
        other: &str,
        mark: Option<&PairMark>,
        verify: bool,
    ) -> PyResult<Option<PairMark>> {
        let held = work.record.decisions.get(other).cloned();
        let Some(mark) = mark else { return Ok(held) };
        if let Some(h) = &held {
            if h.version >= mark.version {
                return Ok(held);
            }
        }
        work.record.decisions.insert(other.to_owned(), mark.clone());
        if matches!(&work.record.conflict, Some(c) if c.content_hash == other) {
            work.record.conflict = None;
        }
        if mark.kind == "keep_separate" {
            forget(work, other, None);
            self.resolve_flag(work, other)?;
            if let Some(at) = work.record.flagged.iter().position(|h| h == other) {
                work.record.flagged.remove(at);
            }
            return Ok(Some(mark.clone()));
        }
        if mark.kind == "merge" {
            let entry_readers = work
                .record
                .neighbors
                .get(other)
                .map(|e| e.info.readers.clone());
            let flagged_at = work.record.flagged.iter().position(|h| h == other);
            match (flagged_at, entry_readers) {
                (Some(at), Some(their_readers)) => {
                    if covered(&their_readers, &readers(&work.record)) {
                        work.record.flagged.remove(at);
                        self.resolve_flag(work, other)?;
                    } else {
                        let key = review_key(&work.key, other);
                        let value = self.audit(
                            None,
                            "decision_refused",
                            "merge",
                            &[
                                ("subject", Detail::Str(key.clone())),
                                (
                                    "detail",
                                    Detail::Str(
                                        "neither copy is readable by every reader of the other (I2)"
                                            .to_owned(),
                                    ),
                                ),
                            ],
                        )?;
                        self.output("audit", &key, Some(value))?;
                    }
                }
                _ => self.resolve_flag(work, other)?,
            }
            if verify && work.record.alive && !work.record.neighbors.contains_key(other) {
                work.decided_verify.push(other.to_owned());
            }
            return Ok(Some(mark.clone()));
        }
        forget(work, other, None);
        if verify && work.record.alive {
            work.decided_verify.push(other.to_owned());
        }
        Ok(Some(mark.clone()))
    }

    fn resolve_flag(&mut self, work: &mut Work, other: &str) -> PyResult<()> {
        let record = &mut work.record;
        if record.flag_partner == other {
            record.flag_partner.clear();
            record.conflicted = false;
        }
        if let Some(at) = record.raised.iter().position(|h| h == other) {
            record.raised.remove(at);
            let key = review_key(&work.key, other);
            self.output("review", &key, None)?;
        }
        Ok(())
    }

    fn decision_for(&self, work: &Work, other: &str) -> Option<PairMark> {
        let decisions = &work.record.decisions;
        if decisions.is_empty() {
            return None;
        }
        if other.len() != work.key.len() {
            let mut sorted: Vec<(&String, &PairMark)> = decisions.iter().collect();
            sorted.sort_by(|a, b| a.0.cmp(b.0));
            return sorted
                .into_iter()
                .find(|(h, _)| content_id(h) == other)
                .map(|(_, m)| m.clone());
        }
        decisions.get(other).cloned()
    }

    fn on_neighbor_update(&mut self, work: &mut Work, message: &NeighborUpdate) {
        let record = &mut work.record;
        let Some(entry) = record.neighbors.get_mut(&message.sender) else {
            if message.info.role != Role::Dead {
                work.strangers.insert(message.sender.clone());
            }
            return;
        };
        if message.info.seq < entry.info.seq {
            return;
        }
        if message.info.role == Role::Dead {
            record.neighbors.shift_remove(&message.sender);
            record.members.shift_remove(&message.sender);
            return;
        }
        entry.info = message.info.clone();
        match &message.report {
            Some(report) if message.info.target == work.key => {
                record
                    .members
                    .insert(message.sender.clone(), report.clone());
            }
            _ => {
                record.members.shift_remove(&message.sender);
            }
        }
    }

    fn remember(
        &mut self,
        work: &mut Work,
        other: &str,
        similarity: f64,
        info: &Info,
        report: Option<&MemberReport>,
    ) {
        let record = &mut work.record;
        if settled(record.decisions.get(other), Some("keep_separate")) {
            return;
        }
        match record.neighbors.get_mut(other) {
            None => {
                record.neighbors.insert(
                    other.to_owned(),
                    NeighborEntry {
                        jaccard: similarity,
                        info: info.clone(),
                    },
                );
                work.new_neighbors.insert(other.to_owned());
            }
            Some(entry) => {
                if info.seq > entry.info.seq {
                    entry.info = info.clone();
                } else if info.seq < entry.info.seq {
                    return;
                }
            }
        }
        let target_is_me = record.neighbors[other].info.target == work.key;
        if !target_is_me {
            record.members.shift_remove(other);
        } else if let Some(report) = report {
            record.members.insert(other.to_owned(), report.clone());
        }
    }

    /// `Discovery.answers`: the answers owed, each with the fact tokens to send when the sender is to flag.
    fn answers(&mut self, work: &mut Work, rank: &Rank) -> PyResult<Owed> {
        let mut owed = Vec::with_capacity(work.answers.len());
        for i in 0..work.answers.len() {
            let mut facts_for_them = None;
            if let Some(conflict) = &work.answers[i].conflict {
                if self.policy.compare(&conflict.rank, rank) == std::cmp::Ordering::Less {
                    work.conflicts.push(conflict.clone());
                } else {
                    let norm = self.norm(work)?;
                    facts_for_them = Some(self.facts(&norm)?);
                }
            }
            owed.push((i, facts_for_them));
        }
        Ok(owed)
    }

    fn flag_conflict(&mut self, work: &mut Work) -> PyResult<()> {
        let record = &work.record;
        if record.conflicted || (work.conflicts.is_empty() && record.conflict.is_none()) {
            return Ok(());
        }
        let mut found: Vec<Conflict> = work.conflicts.clone();
        if let Some(c) = &record.conflict {
            found.push(c.clone());
        }
        found.retain(|c| !settled(record.decisions.get(&c.content_hash), None));
        if found.is_empty() {
            work.record.conflict = None;
            return Ok(());
        }
        let policy = self.policy;
        let best = found
            .iter()
            .min_by(|a, b| {
                b.jaccard
                    .partial_cmp(&a.jaccard)
                    .unwrap_or(std::cmp::Ordering::Equal)
                    .then_with(|| policy.compare(&a.rank, &b.rank))
            })
            .expect("not empty")
            .clone();
        let record = &mut work.record;
        if !record.pending_bands.is_empty() || !record.pending_verify.is_empty() {
            record.conflict = Some(best);
            return Ok(());
        }
        record.conflicted = true;
        record.conflict = None;
        record.flag_partner = best.content_hash.clone();
        if !record.raised.contains(&best.content_hash) {
            record.raised.push(best.content_hash.clone());
        }
        let norm = self.norm(work)?;
        let mine = self.facts(&norm)?;
        let (low, high): (&Vec<String>, &Vec<String>) = if work.key < best.content_hash {
            (&mine, &best.facts)
        } else {
            (&best.facts, &mine)
        };
        let detail: String = self
            .helpers
            .describe_fact_difference
            .bind(self.py)
            .call1((low.clone(), high.clone()))?
            .extract()?;
        let py = self.py;
        let a = PyDict::new(py);
        a.set_item(pyo3::intern!(py, "content_hash"), &work.key)?;
        a.set_item(pyo3::intern!(py, "text"), &work.record.text)?;
        let b = PyDict::new(py);
        b.set_item(pyo3::intern!(py, "content_hash"), &best.content_hash)?;
        b.set_item(pyo3::intern!(py, "text"), &best.text)?;
        let value = self.review(
            "fact_conflict",
            (&work.key, a),
            (&best.content_hash, b),
            best.jaccard,
            &detail,
        )?;
        let key = review_key(&work.key, &best.content_hash);
        self.output("review", &key, Some(value))
    }

    fn request(
        &mut self,
        work: &mut Work,
        other: &str,
        info: &Bound<'py, PyAny>,
        decision: Option<PairMark>,
        report: Option<&MemberReport>,
        sketch: &[u8],
    ) -> PyResult<Bound<'py, PyAny>> {
        let norm = self.norm(work)?;
        let py = self.py;
        let decision = self.make.mark(&decision)?;
        let report = self.make.report(&report.cloned())?;
        self.make.classes.verify_request.bind(py).call1((
            other,
            &work.key,
            work.record.epoch,
            norm,
            &work.record.text,
            info,
            decision,
            report,
            PyBytes::new(py, sketch),
        ))
    }

    fn answer_result(
        &mut self,
        work: &Work,
        answer: &Answer,
        info: &Bound<'py, PyAny>,
        facts: Option<&Rc<Vec<String>>>,
        report: Option<&MemberReport>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = self.py;
        let conflict = match facts {
            Some(f) => PyTuple::new(py, f.iter())?.into_any(),
            None => py.None().into_bound(py),
        };
        let text = if facts.is_none() {
            ""
        } else {
            work.record.text.as_str()
        };
        let decision = self.make.mark(&answer.decision)?;
        let report = self.make.report(&report.cloned())?;
        self.make.classes.verify_result.bind(py).call1((
            &answer.sender,
            &work.key,
            answer.epoch,
            answer.jaccard,
            answer.edge,
            info,
            conflict,
            text,
            decision,
            report,
        ))
    }

    fn ask_and_answer(
        &mut self,
        work: &mut Work,
        info: &Bound<'py, PyAny>,
        report: Option<&MemberReport>,
        owed: Owed,
    ) -> PyResult<()> {
        let target = if report.is_some() {
            work.record.target.clone()
        } else {
            String::new()
        };
        let to_verify = work.to_verify.clone();
        let sketch = work.record.sketch.clone();
        for other in &to_verify {
            let decision = self.decision_for(work, other);
            let obj = self.request(work, other, info, decision, None, &sketch)?;
            self.emit(obj);
        }
        if work.record.pending_bands.is_empty() {
            work.record.sketch.clear();
        }
        let mut asking: HashSet<String> = to_verify.iter().cloned().collect();
        let strangers: Vec<String> = work
            .strangers
            .iter()
            .filter(|h| !work.record.neighbors.contains_key(*h))
            .cloned()
            .collect();
        for other in strangers {
            if !asking.contains(content_id(&other)) {
                work.decided_verify.push(other);
            }
        }
        let mut seen = HashSet::default();
        let decided: Vec<String> = work
            .decided_verify
            .iter()
            .filter(|h| seen.insert((*h).clone()))
            .cloned()
            .collect();
        for other in decided {
            let id = content_id(&other).to_owned();
            if asking.contains(&id) {
                continue;
            }
            asking.insert(id);
            let decision = work.record.decisions.get(&other).cloned();
            let theirs = if other == target { report } else { None };
            let obj = self.request(work, &other, info, decision, theirs, b"")?;
            self.emit(obj);
        }
        for (i, facts) in owed {
            let answer = &work.answers[i];
            let theirs = if answer.sender == target {
                report
            } else {
                None
            };
            let obj = self.answer_result(work, answer, info, facts.as_ref(), theirs)?;
            self.emit(obj);
        }
        Ok(())
    }
}

fn forget(work: &mut Work, other: &str, seq: Option<i64>) {
    let record = &mut work.record;
    let Some(entry) = record.neighbors.get(other) else {
        return;
    };
    if let Some(seq) = seq {
        if seq < entry.info.seq {
            return;
        }
    }
    record.neighbors.shift_remove(other);
    record.members.shift_remove(other);
    work.new_neighbors.remove(other);
}

// ---------------------------------------------------------------------------------------------------------------
// Output values (`streamdedup.core.records`).

const CHUNK_SCHEMA: &str = "streamdedup.chunk/v2";
const AUDIT_SCHEMA: &str = "streamdedup.audit/v1";
const REVIEW_SCHEMA: &str = "streamdedup.review/v1";

enum Detail {
    Str(String),
    Float(f64),
    Position(String, i64),
}

impl<'a, 'py> Batch<'a, 'py> {
    fn timestamp(&self, micros: i64) -> PyResult<String> {
        match format_timestamp(micros) {
            Some(text) => Ok(text),
            None => self
                .helpers
                .format_timestamp
                .bind(self.py)
                .call1((micros,))?
                .extract(),
        }
    }

    fn audit(
        &self,
        chunk_id: Option<&str>,
        action: &str,
        reason: &str,
        detail: &[(&str, Detail)],
    ) -> PyResult<Bound<'py, PyDict>> {
        let py = self.py;
        let d = PyDict::new(py);
        d.set_item(pyo3::intern!(py, "schema"), AUDIT_SCHEMA)?;
        d.set_item(pyo3::intern!(py, "chunk_id"), chunk_id)?;
        d.set_item(pyo3::intern!(py, "action"), action)?;
        d.set_item(pyo3::intern!(py, "reason"), reason)?;
        for (name, value) in detail {
            match value {
                Detail::Str(s) => d.set_item(*name, s)?,
                Detail::Float(f) => d.set_item(*name, *f)?,
                Detail::Position(source_id, position) => {
                    let moved = PyDict::new(py);
                    moved.set_item(pyo3::intern!(py, "source_id"), source_id)?;
                    moved.set_item(pyo3::intern!(py, "position"), *position)?;
                    d.set_item(*name, moved)?;
                }
            }
        }
        Ok(d)
    }

    fn review(
        &self,
        reason: &str,
        a: (&str, Bound<'py, PyDict>),
        b: (&str, Bound<'py, PyDict>),
        jaccard: f64,
        detail: &str,
    ) -> PyResult<Bound<'py, PyDict>> {
        let (a, b) = if a.0 > b.0 { (b, a) } else { (a, b) };
        let py = self.py;
        let d = PyDict::new(py);
        d.set_item(pyo3::intern!(py, "schema"), REVIEW_SCHEMA)?;
        d.set_item(pyo3::intern!(py, "reason"), reason)?;
        d.set_item(pyo3::intern!(py, "a"), a.1)?;
        d.set_item(pyo3::intern!(py, "b"), b.1)?;
        d.set_item(pyo3::intern!(py, "jaccard"), round6(jaccard))?;
        d.set_item(pyo3::intern!(py, "detail"), detail)?;
        Ok(d)
    }

    /// `records.chunk_value` at `revision`: the digest of the value's MessagePack encoding without its revision
    /// (what `_emit_chunk` compares), and the value as the JSON msgspec writes for it (a `msgspec.Raw`), or None
    /// when the digest is the one last written.
    fn chunk(
        &mut self,
        work: &Work,
        readers: &[String],
        revision: i64,
    ) -> PyResult<(String, Option<Bound<'py, PyAny>>)> {
        let record = &work.record;
        let key = work.key.as_str();
        let policy = self.policy;
        let max_sources = self.params.max_chunk_sources;
        let mut listed: Vec<(&String, &MemberReport)> = record.members.iter().collect();
        listed.sort_by(|a, b| {
            let by_rank = match (&a.1.rank, &b.1.rank) {
                (None, None) => std::cmp::Ordering::Equal,
                (None, Some(_)) => std::cmp::Ordering::Less,
                (Some(_), None) => std::cmp::Ordering::Greater,
                (Some(x), Some(y)) => policy.compare(x, y),
            };
            by_rank.then_with(|| a.0.cmp(b.0))
        });
        listed.truncate(max_sources.saturating_sub(1));
        let mut candidates: Vec<SourceEntry> = record
            .top
            .iter()
            .map(|r| SourceEntry {
                r,
                content_hash: key,
            })
            .collect();
        if !listed.is_empty() {
            for (h, report) in &listed {
                candidates.extend(
                    report
                        .refs
                        .iter()
                        .map(|r| SourceEntry { r, content_hash: h }),
                );
            }
            candidates.sort_by(|a, b| self.ref_cmp(a.r, b.r));
        }
        candidates.truncate(max_sources);
        let (text, canonical, member_count, source_count) = chunk_head(record);
        let mut timestamps = Vec::with_capacity(candidates.len());
        for c in &candidates {
            timestamps.push(self.timestamp(c.r.attrs.modified_at)?);
        }

        let mut w = MpWriter::with_capacity(512 + text.len());
        w.map(10);
        w.str("schema");
        w.str(CHUNK_SCHEMA);
        w.str("chunk_id");
        w.str(key);
        w.str("text");
        w.str(text);
        w.str("content_hash");
        w.str(key);
        w.str("canonical");
        w.map(2);
        w.str("source_id");
        w.str(&canonical.0);
        w.str("position");
        w.int(canonical.1);
        w.str("acl");
        w.strings(readers);
        w.str("members");
        w.array(1 + listed.len());
        w.map(3);
        w.str("content_hash");
        w.str(key);
        w.str("relation");
        w.str("canonical");
        w.str("jaccard");
        w.float(1.0);
        for (h, report) in &listed {
            w.map(3);
            w.str("content_hash");
            w.str(h);
            w.str("relation");
            w.str("near");
            w.str("jaccard");
            w.float(round6(report.jaccard));
        }
        w.str("member_count");
        w.int(member_count);
        w.str("sources");
        w.array(candidates.len());
        let mut acls = Vec::with_capacity(candidates.len());
        for (c, stamp) in candidates.iter().zip(&timestamps) {
            let attrs = &c.r.attrs;
            let mut acl = attrs.acl.clone();
            acl.sort();
            let fields =
                7 + usize::from(attrs.title.is_some()) + usize::from(attrs.metadata.is_some());
            w.map(fields);
            w.str("source_id");
            w.str(&c.r.source_id);
            w.str("position");
            w.int(c.r.position);
            w.str("content_hash");
            w.str(c.content_hash);
            w.str("acl");
            w.strings(&acl);
            w.str("modified_at");
            w.str(stamp);
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
            acls.push(acl);
        }
        w.str("source_count");
        w.int(source_count);
        let digest =
            streamdedup_kernels::hex(streamdedup_kernels::text::blake2b(&w.out, 16).as_bytes());
        if digest == record.record_digest {
            return Ok((digest, None));
        }

        // The value as msgspec writes the twin's dict: the same fields in the same order, then `revision`.
        let mut j = JsonWriter::with_capacity(w.out.len() + w.out.len() / 4 + 64);
        j.raw(b"{\"schema\":");
        j.str(CHUNK_SCHEMA);
        j.raw(b",\"chunk_id\":");
        j.str(key);
        j.raw(b",\"text\":");
        j.str(text);
        j.raw(b",\"content_hash\":");
        j.str(key);
        j.raw(b",\"canonical\":{\"source_id\":");
        j.str(&canonical.0);
        j.raw(b",\"position\":");
        j.int(canonical.1);
        j.raw(b"},\"acl\":");
        j.strings(readers);
        j.raw(b",\"members\":[{\"content_hash\":");
        j.str(key);
        j.raw(b",\"relation\":\"canonical\",\"jaccard\":1.0}");
        for (h, report) in &listed {
            j.raw(b",{\"content_hash\":");
            j.str(h);
            j.raw(b",\"relation\":\"near\",\"jaccard\":");
            j.float(round6(report.jaccard));
            j.raw(b"}");
        }
        j.raw(b"],\"member_count\":");
        j.int(member_count);
        j.raw(b",\"sources\":[");
        for (i, ((c, stamp), acl)) in candidates.iter().zip(&timestamps).zip(&acls).enumerate() {
            let attrs = &c.r.attrs;
            j.raw(if i == 0 {
                b"{\"source_id\":"
            } else {
                b",{\"source_id\":"
            });
            j.str(&c.r.source_id);
            j.raw(b",\"position\":");
            j.int(c.r.position);
            j.raw(b",\"content_hash\":");
            j.str(c.content_hash);
            j.raw(b",\"acl\":");
            j.strings(acl);
            j.raw(b",\"modified_at\":");
            j.str(stamp);
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
                if !j.value(metadata) {
                    // Not a JSON document's metadata (binary data, keys that are not strings): the value as
                    // Python objects, which the output's own encoder writes as it can.
                    let value =
                        self.chunk_object(work, readers, &listed, &candidates, &timestamps, &acls)?;
                    value.set_item(pyo3::intern!(self.py, "revision"), revision)?;
                    return Ok((digest, Some(value.into_any())));
                }
            }
            j.raw(b"}");
        }
        j.raw(b"],\"source_count\":");
        j.int(source_count);
        j.raw(b",\"revision\":");
        j.int(revision);
        j.raw(b"}");
        let py = self.py;
        let value = self
            .make
            .classes
            .raw
            .bind(py)
            .call1((PyBytes::new(py, &j.out),))?;
        Ok((digest, Some(value)))
    }

    /// The `canonical-chunks` value of [`Batch::chunk`] as Python objects, without its revision.
    fn chunk_object(
        &self,
        work: &Work,
        readers: &[String],
        listed: &[(&String, &MemberReport)],
        candidates: &[SourceEntry],
        timestamps: &[String],
        acls: &[Vec<String>],
    ) -> PyResult<Bound<'py, PyDict>> {
        let key = work.key.as_str();
        let (text, canonical, member_count, source_count) = chunk_head(&work.record);
        let py = self.py;
        let d = PyDict::new(py);
        d.set_item(pyo3::intern!(py, "schema"), CHUNK_SCHEMA)?;
        d.set_item(pyo3::intern!(py, "chunk_id"), key)?;
        d.set_item(pyo3::intern!(py, "text"), text)?;
        d.set_item(pyo3::intern!(py, "content_hash"), key)?;
        let at = PyDict::new(py);
        at.set_item(pyo3::intern!(py, "source_id"), &canonical.0)?;
        at.set_item(pyo3::intern!(py, "position"), canonical.1)?;
        d.set_item(pyo3::intern!(py, "canonical"), at)?;
        d.set_item(pyo3::intern!(py, "acl"), PyList::new(py, readers)?)?;
        let members = PyList::empty(py);
        let own = PyDict::new(py);
        own.set_item(pyo3::intern!(py, "content_hash"), key)?;
        own.set_item(pyo3::intern!(py, "relation"), "canonical")?;
        own.set_item(pyo3::intern!(py, "jaccard"), 1.0)?;
        members.append(own)?;
        for (h, report) in listed {
            let m = PyDict::new(py);
            m.set_item(pyo3::intern!(py, "content_hash"), h)?;
            m.set_item(pyo3::intern!(py, "relation"), "near")?;
            m.set_item(pyo3::intern!(py, "jaccard"), round6(report.jaccard))?;
            members.append(m)?;
        }
        d.set_item(pyo3::intern!(py, "members"), members)?;
        d.set_item(pyo3::intern!(py, "member_count"), member_count)?;
        let sources = PyList::empty(py);
        for ((c, stamp), acl) in candidates.iter().zip(timestamps).zip(acls) {
            let attrs = &c.r.attrs;
            let s = PyDict::new(py);
            s.set_item(pyo3::intern!(py, "source_id"), &c.r.source_id)?;
            s.set_item(pyo3::intern!(py, "position"), c.r.position)?;
            s.set_item(pyo3::intern!(py, "content_hash"), c.content_hash)?;
            s.set_item(pyo3::intern!(py, "acl"), PyList::new(py, acl)?)?;
            s.set_item(pyo3::intern!(py, "modified_at"), stamp)?;
            s.set_item(pyo3::intern!(py, "authority"), attrs.authority)?;
            s.set_item(pyo3::intern!(py, "uri"), &attrs.uri)?;
            if let Some(title) = &attrs.title {
                s.set_item(pyo3::intern!(py, "title"), title)?;
            }
            if let Some(metadata) = &attrs.metadata {
                s.set_item(
                    pyo3::intern!(py, "metadata"),
                    py::value_to_py(py, metadata)?,
                )?;
            }
            sources.append(s)?;
        }
        d.set_item(pyo3::intern!(py, "sources"), sources)?;
        d.set_item(pyo3::intern!(py, "source_count"), source_count)?;
        Ok(d)
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

// ---------------------------------------------------------------------------------------------------------------
// Settling (`content_settle.Settlement`) and the content's life (`content.ContentStage`).

fn differs(a: &Info, b: &Info) -> bool {
    a.role != b.role || a.rank != b.rank || a.readers != b.readers || a.target != b.target
}

fn chunk_of(status: &ChunkStatus) -> (&str, bool, f64) {
    (&status.chunk_id, status.near, status.jaccard)
}

impl<'a, 'py> Batch<'a, 'py> {
    fn settle(&mut self, work: &mut Work) -> PyResult<()> {
        let py = self.py;
        if !work.record.alive {
            let dead = self.make.info(&dead_info(work.record.seq))?;
            let mut unanswered: Vec<(String, i64, Option<PairMark>)> = work
                .answers
                .iter()
                .map(|a| (a.sender.clone(), a.epoch, a.decision.clone()))
                .collect();
            unanswered.extend(work.asked_while_dead.iter().map(|m| {
                (
                    m.sender.clone(),
                    m.epoch,
                    work.record.decisions.get(&m.sender).cloned(),
                )
            }));
            for (sender, epoch, decision) in unanswered {
                let decision = self.make.mark(&decision)?;
                let obj = self.make.classes.verify_result.bind(py).call1((
                    sender,
                    &work.key,
                    epoch,
                    0.0,
                    false,
                    &dead,
                    py.None(),
                    "",
                    decision,
                ))?;
                self.emit(obj);
            }
            let mut others: BTreeSet<&String> = work.late_edges.keys().collect();
            others.extend(work.strangers.iter());
            for other in others {
                let obj = self
                    .make
                    .classes
                    .neighbor_update
                    .bind(py)
                    .call1((other, &work.key, &dead))?;
                self.emit(obj);
            }
            return Ok(());
        }
        let late = std::mem::take(&mut work.late_edges);
        for (other, edge) in &late {
            self.remember(work, other, edge.jaccard, &edge.info, edge.report.as_ref());
        }
        work.late_edges = late;
        let asked = std::mem::take(&mut work.asked_while_dead);
        for message in &asked {
            self.on_verify_request(work, message)?;
        }
        work.asked_while_dead.clear();
        self.ensure_top(work)?;
        let first = {
            let Some(top) = work.record.top.first() else {
                return Err(PyValueError::new_err(format!(
                    "content {:?} is alive without a live source position",
                    work.key
                )));
            };
            Ref {
                source_id: top.source_id.clone(),
                position: top.position,
                attrs: top.attrs.clone(),
                text: String::new(),
            }
        };
        let rank = rank_of(
            &work.key,
            work.record.length,
            &first.source_id,
            &first.attrs,
        );
        let readers = readers(&work.record);
        let owed = self.answers(work, &rank)?;
        if !work.record.candidates.is_empty() && work.record.pending_bands.is_empty() {
            self.choose_candidates(work);
        }
        let asking: HashSet<String> = work.to_verify.iter().cloned().collect();
        let mut seen = HashSet::default();
        work.decided_verify = work
            .decided_verify
            .iter()
            .filter(|h| seen.insert((*h).clone()) && !asking.contains(content_id(h)))
            .cloned()
            .collect();
        let decided: Vec<String> = work
            .decided_verify
            .iter()
            .map(|h| content_id(h).to_owned())
            .collect();
        let record = &mut work.record;
        record.pending_verify.extend(work.to_verify.iter().cloned());
        record.pending_verify.extend(decided.iter().cloned());
        record.checked.extend(work.to_verify.iter().cloned());
        for h in decided {
            if !record.checked.contains(&h) {
                record.checked.push(h);
            }
        }
        self.flag_conflict(work)?;
        if work.record.pending_bands.is_empty() && work.record.pending_verify.is_empty() {
            self.decide(work, &rank, &readers)?;
        }
        let record = &mut work.record;
        let canonical_ref =
            (record.role == Role::Canonical).then(|| (first.source_id.clone(), first.position));
        record.canonical_ref = canonical_ref.clone();
        if canonical_ref.is_some()
            && work.was_role == Role::Canonical
            && work.was_ref != canonical_ref
        {
            let before = work.was_ref.clone();
            self.source_swap(work, before, &first)?;
        }
        let record = &mut work.record;
        let mut info = Info {
            seq: record.seq,
            role: record.role,
            rank: Some(rank.clone()),
            readers: readers.clone(),
            target: record.target.clone(),
        };
        let report = (record.role == Role::Member).then(|| MemberReport {
            jaccard: record.jaccard,
            refs: source_refs(&record.top),
            count: record.positions,
            rank: Some(rank.clone()),
        });
        let status = ChunkStatus {
            chunk_id: if record.role == Role::Canonical {
                work.key.clone()
            } else {
                record.target.clone()
            },
            near: record.role == Role::Member,
            jaccard: record.jaccard,
            canonical_ref,
        };
        let info_changed = match &record.sent_info {
            None => true,
            Some(sent) => differs(sent, &info),
        };
        let report_changed = report != record.sent_report;
        let status_changed = Some(&status) != record.sent_status.as_ref();
        if info_changed || report_changed || status_changed {
            record.seq += 1;
            info.seq = record.seq;
        }
        let info_obj = self.make.info(&info)?;
        self.tell_neighbors(
            work,
            info,
            &info_obj,
            report.clone(),
            info_changed,
            report_changed,
        )?;
        self.tell_sources(work, status, status_changed)?;
        self.emit_chunk(work, &readers)?;
        self.ask_and_answer(work, &info_obj, report.as_ref(), owed)
    }

    /// `Settlement.answer_unchanged`.
    fn answer_unchanged(&mut self, work: &mut Work) -> PyResult<bool> {
        let record = &work.record;
        let Some(info) = &record.sent_info else {
            return Ok(false);
        };
        if !record.alive
            || info.seq != record.seq
            || record.top.is_empty()
            || !record.pending_bands.is_empty()
            || !record.pending_verify.is_empty()
        {
            return Ok(false);
        }
        if work
            .answers
            .iter()
            .any(|a| a.edge || a.conflict.is_some() || a.decision.is_some())
        {
            return Ok(false);
        }
        let report = record.sent_report.clone();
        let target = if report.is_some() {
            record.target.clone()
        } else {
            String::new()
        };
        let info_obj = self.make.info(info)?;
        for answer in &work.answers {
            let theirs = if answer.sender == target {
                report.as_ref()
            } else {
                None
            };
            let obj = self.answer_result(work, answer, &info_obj, None, theirs)?;
            self.emit(obj);
        }
        Ok(true)
    }

    fn tell_neighbors(
        &mut self,
        work: &mut Work,
        info: Info,
        info_obj: &Bound<'py, PyAny>,
        report: Option<MemberReport>,
        info_changed: bool,
        report_changed: bool,
    ) -> PyResult<()> {
        let record = &work.record;
        let mut told: BTreeSet<String> = if info_changed {
            record.neighbors.keys().cloned().collect()
        } else if report_changed && !record.target.is_empty() {
            std::iter::once(record.target.clone()).collect()
        } else {
            BTreeSet::new()
        };
        told.extend(work.new_neighbors.iter().cloned());
        let report_obj = self.make.report(&report)?;
        let none = self.py.None().into_bound(self.py);
        for other in told {
            if work.record.neighbors.contains_key(&other) {
                let theirs = if other == work.record.target {
                    &report_obj
                } else {
                    &none
                };
                let obj = self
                    .make
                    .classes
                    .neighbor_update
                    .bind(self.py)
                    .call1((&other, &work.key, info_obj, theirs))?;
                self.emit(obj);
            }
        }
        work.record.sent_info = Some(info);
        work.record.sent_report = report;
        Ok(())
    }

    fn source_swap(
        &mut self,
        work: &mut Work,
        before: Option<Position>,
        after: &Ref,
    ) -> PyResult<()> {
        let key = work.key.clone();
        let reason = match &before {
            None => "canonical source removed",
            Some((source_id, position)) => {
                let policy = self.policy;
                let entry = self.get_ref(&ref_key(&key, source_id))?;
                match entry {
                    Some(RefEntry {
                        attrs: Some(old),
                        positions,
                        ..
                    }) if positions.contains(position) => {
                        let new = &after.attrs;
                        policy.reason(
                            &Rank {
                                authority: new.authority,
                                modified_at: new.modified_at,
                                length: 0,
                                source_id: after.source_id.clone(),
                                content_hash: String::new(),
                                preferred: new.preferred,
                            },
                            &Rank {
                                authority: old.authority,
                                modified_at: old.modified_at,
                                length: 0,
                                source_id: source_id.clone(),
                                content_hash: String::new(),
                                preferred: old.preferred,
                            },
                        )
                    }
                    _ => "canonical source removed",
                }
            }
        };
        let value = self.audit(
            Some(&key),
            "swap",
            reason,
            &[(
                "canonical",
                Detail::Position(after.source_id.clone(), after.position),
            )],
        )?;
        self.output("audit", &key, Some(value))
    }

    fn decide(&mut self, work: &mut Work, rank: &Rank, readers: &[String]) -> PyResult<()> {
        let key = work.key.clone();
        let decision = {
            let record = &work.record;
            let mut neighbors: Vec<(&String, f64, &Info)> = record
                .neighbors
                .iter()
                .map(|(h, e)| (h, e.jaccard, &e.info))
                .collect();
            neighbors.sort_by(|a, b| a.0.cmp(b.0));
            let merged: Vec<&String> = record
                .decisions
                .iter()
                .filter(|(_, m)| m.kind == "merge")
                .map(|(h, _)| h)
                .collect();
            decide(
                rank,
                readers,
                &neighbors,
                self.policy,
                record.role == Role::Pending,
                &merged,
            )
        };
        let Some(decision) = decision else {
            return Ok(());
        };
        for other in &decision.refused {
            if work.record.flagged.contains(other) {
                continue;
            }
            work.record.flagged.push(other.clone());
            if !work.record.raised.contains(other) {
                work.record.raised.push(other.clone());
            }
            let entry = &work.record.neighbors[other];
            let py = self.py;
            let a = PyDict::new(py);
            a.set_item(pyo3::intern!(py, "content_hash"), &key)?;
            a.set_item(pyo3::intern!(py, "acl"), PyList::new(py, readers)?)?;
            let b = PyDict::new(py);
            b.set_item(pyo3::intern!(py, "content_hash"), other)?;
            b.set_item(
                pyo3::intern!(py, "acl"),
                PyList::new(py, &entry.info.readers)?,
            )?;
            let jaccard = entry.jaccard;
            let value = self.review(
                "acl_boundary",
                (&key, a),
                (other, b),
                jaccard,
                "the better-ranked copy is not readable by every reader of the other",
            )?;
            self.output("review", &review_key(&key, other), Some(value))?;
        }
        let old_role = work.was_role;
        let old_target = work.was_target.clone();
        let record = &mut work.record;
        record.role = decision.role;
        record.target = decision.target;
        record.jaccard = decision.jaccard;
        if (old_role, &old_target) == (record.role, &record.target) {
            return Ok(());
        }
        let near_jaccard = round6(record.jaccard);
        let old_info = record.neighbors.get(&old_target).map(|e| e.info.clone());
        if old_role == Role::Member {
            let reason = split_reason(rank, readers, old_info.as_ref(), self.policy);
            if work.record.role == Role::Canonical && old_info.is_none() {
                let value = self.audit(
                    Some(&key),
                    "swap",
                    reason,
                    &[("previous_chunk_id", Detail::Str(old_target.clone()))],
                )?;
                self.output("audit", &key, Some(value))?;
            } else {
                let value = self.audit(
                    Some(&old_target),
                    "split",
                    reason,
                    &[("content_hash", Detail::Str(key.clone()))],
                )?;
                self.output("audit", &old_target, Some(value))?;
            }
        }
        if work.record.role == Role::Member {
            let target = work.record.target.clone();
            let target_rank = work.record.neighbors[&target].info.rank.clone();
            let near = [
                ("content_hash", Detail::Str(key.clone())),
                ("jaccard", Detail::Float(near_jaccard)),
            ];
            match target_rank {
                Some(target_rank) if old_role == Role::Canonical => {
                    let reason = if self.policy.better(&target_rank, rank) {
                        self.policy.reason(&target_rank, rank)
                    } else {
                        "merged by a reviewer"
                    };
                    let [(n1, d1), (n2, d2)] = near;
                    let value = self.audit(
                        Some(&target),
                        "swap",
                        reason,
                        &[
                            ("previous_chunk_id", Detail::Str(key.clone())),
                            (n1, d1),
                            (n2, d2),
                        ],
                    )?;
                    self.output("audit", &target, Some(value))?;
                }
                _ => {
                    let value = self.audit(Some(&target), "merge", "near", &near)?;
                    self.output("audit", &target, Some(value))?;
                }
            }
        }
        Ok(())
    }

    fn tell_sources(
        &mut self,
        work: &mut Work,
        status: ChunkStatus,
        changed: bool,
    ) -> PyResult<()> {
        let previous = work.record.sent_status.replace(status.clone());
        if status.chunk_id.is_empty() {
            return Ok(());
        }
        let key = work.key.clone();
        let mut live: BTreeMap<String, i64> = BTreeMap::new();
        let new_chunk = changed
            && match &previous {
                None => true,
                Some(p) => chunk_of(p) != chunk_of(&status),
            };
        if new_chunk {
            if work.record.top.len() as i64 == work.record.positions {
                let listed: BTreeSet<String> = work
                    .record
                    .top
                    .iter()
                    .map(|t| t.source_id.clone())
                    .collect();
                for s in listed {
                    let version = self.get_ref(&ref_key(&key, &s))?.map(|e| e.version);
                    if let Some(version) = version {
                        live.insert(s, version);
                    }
                }
            } else {
                for (s, e) in self.live(&key)? {
                    live.insert(s, e.version);
                }
            }
        } else {
            let mut wanted: BTreeSet<String> = work.answer_sources.clone();
            if changed {
                if let Some(p) = &previous {
                    for r in [&p.canonical_ref, &status.canonical_ref]
                        .into_iter()
                        .flatten()
                    {
                        wanted.insert(r.0.clone());
                    }
                }
            }
            for s in wanted {
                let version = self
                    .get_ref(&ref_key(&key, &s))?
                    .filter(|e| !e.positions.is_empty())
                    .map(|e| e.version);
                if let Some(version) = version {
                    live.insert(s, version);
                }
            }
        }
        // As the source keeps it (`state.StatusEntry`): the content's own hash as "=", the canonical position only
        // if it is in that source. The batch sends each source its list at the end (`SourceStatuses`).
        let chunk_id = if status.chunk_id == key {
            "=".to_owned()
        } else {
            status.chunk_id.clone()
        };
        for (source_id, version) in live {
            let canonical_position = match &status.canonical_ref {
                Some((s, p)) if *s == source_id => *p,
                _ => -1,
            };
            self.told.entry(source_id).or_default().push(Told {
                content_hash: key.clone(),
                seq: work.record.seq,
                version,
                chunk_id: chunk_id.clone(),
                near: status.near,
                jaccard: status.jaccard,
                canonical_position,
            });
        }
        Ok(())
    }

    fn emit_chunk(&mut self, work: &mut Work, readers: &[String]) -> PyResult<()> {
        let key = work.key.clone();
        if work.record.role != Role::Canonical || work.record.canonical_ref.is_none() {
            if !work.record.record_digest.is_empty() {
                self.output("canonical-chunks", &key, None)?;
                work.record.record_digest.clear();
            }
            return Ok(());
        }
        let (digest, value) = self.chunk(work, readers, work.record.revision + 1)?;
        let Some(value) = value else { return Ok(()) };
        work.record.record_digest = digest;
        work.record.revision += 1;
        self.output_value("canonical-chunks", &key, value)
    }

    fn on_ref_update(&mut self, work: &mut Work, message: &RefUpdate) -> PyResult<()> {
        if !self.apply_ref(work, message)? {
            return Ok(());
        }
        let record = &work.record;
        let alive = record.positions > 0 && record.has_text;
        if alive && !record.alive {
            birth(work);
        } else if record.alive && !alive {
            self.death(work)?;
        }
        Ok(())
    }

    fn death(&mut self, work: &mut Work) -> PyResult<()> {
        let key = work.key.clone();
        if work.record.indexed {
            let obj = self.leave(work)?;
            self.emit(obj);
        }
        if work.record.role == Role::Canonical {
            let value = self.audit(Some(&key), "retract", "no live source", &[])?;
            self.output("audit", &key, Some(value))?;
        }
        if !work.record.record_digest.is_empty() {
            self.output("canonical-chunks", &key, None)?;
        }
        work.record.seq += 1;
        let dead = dead_info(work.record.seq);
        let dead_obj = self.make.info(&dead)?;
        let mut others: Vec<&String> = work.record.neighbors.keys().collect();
        others.sort();
        let py = self.py;
        let mut sent = Vec::with_capacity(others.len());
        for other in others {
            sent.push(
                self.make
                    .classes
                    .neighbor_update
                    .bind(py)
                    .call1((other, &key, &dead_obj))?,
            );
        }
        for obj in sent {
            self.emit(obj);
        }
        let old = std::mem::take(&mut work.record);
        *work.record = ContentRecord {
            seq: old.seq,
            epoch: old.epoch,
            revision: old.revision,
            has_text: old.has_text,
            text: old.text,
            norm_stored: old.norm_stored,
            length: old.length,
            decisions: old.decisions,
            raised: old.raised,
            role: Role::Dead,
            sent_info: Some(dead),
            ..ContentRecord::default()
        };
        work.born = false;
        work.was_role = Role::Dead;
        work.was_target = String::new();
        work.was_ref = None;
        work.to_verify.clear();
        work.decided_verify.clear();
        work.new_neighbors.clear();
        Ok(())
    }
}

fn dead_info(seq: i64) -> Info {
    Info {
        seq,
        role: Role::Dead,
        rank: None,
        readers: Vec::new(),
        target: String::new(),
    }
}

fn birth(work: &mut Work) {
    let record = &mut work.record;
    record.alive = true;
    record.epoch += 1;
    record.role = Role::Pending;
    record.target = String::new();
    record.jaccard = 1.0;
    record.candidates = IndexMap::new();
    record.conflict = None;
    work.was_role = Role::Pending;
    work.was_target = String::new();
    work.was_ref = None;
    work.born = true;
    let mut merged: Vec<&String> = record
        .decisions
        .iter()
        .filter(|(_, m)| m.kind == "merge")
        .map(|(h, _)| h)
        .collect();
    merged.sort();
    work.decided_verify.extend(merged.into_iter().cloned());
}

// ---------------------------------------------------------------------------------------------------------------
// The batch (`ContentStage.handle`).

struct Ids {
    cache: HashMap<String, Option<ContentIds>>,
    dirty: BTreeSet<String>,
}

impl<'a, 'py> Batch<'a, 'py> {
    fn prefetch_ids(&mut self, ids: &mut Ids, keys: Vec<String>) -> PyResult<()> {
        let mut seen = HashSet::default();
        let wanted: Vec<String> = keys
            .into_iter()
            .filter(|k| !ids.cache.contains_key(k) && seen.insert(k.clone()))
            .collect();
        let raws = self.read_many(&wanted)?;
        for (key, raw) in wanted.into_iter().zip(raws) {
            let entry = match raw {
                Some(raw) => {
                    let mut r = MpReader::new(raw.as_bytes());
                    Some(ContentIds::decode(&mut r).map_err(|e| {
                        PyValueError::new_err(format!("malformed ids record at {key:?}: {e}"))
                    })?)
                }
                None => None,
            };
            ids.cache.insert(key, entry);
        }
        Ok(())
    }

    /// `ContentStage._resolve`.
    fn resolve(&mut self, messages: Vec<In>, ids: &mut Ids) -> PyResult<Vec<In>> {
        let keys = messages
            .iter()
            .filter(|m| by_id(m))
            .map(|m| id_key(m.key()))
            .collect();
        self.prefetch_ids(ids, keys)?;
        let fields = self.params.num_perm;
        let needed = self.params.dismiss_below;
        let py = self.py;
        let mut resolved = Vec::with_capacity(messages.len());
        for message in messages {
            let In::Verify(request) = &message else {
                resolved.push(message);
                continue;
            };
            if request.content_hash.len() != CONTENT_ID_CHARS {
                resolved.push(message);
                continue;
            }
            let found = ids
                .cache
                .get(&id_key(&request.content_hash))
                .cloned()
                .flatten();
            let found = match found {
                Some(f) if !f.hashes.is_empty() => f,
                _ => {
                    let dead = self.make.info(&dead_info(0))?;
                    let obj = self.make.classes.verify_result.bind(py).call1((
                        &request.sender,
                        &request.content_hash,
                        request.epoch,
                        0.0,
                        false,
                        dead,
                    ))?;
                    self.emit(obj);
                    continue;
                }
            };
            let theirs: &[u8] = if request.decision.is_none() {
                &request.sketch
            } else {
                b""
            };
            for (index, content_hash) in found.hashes.iter().enumerate() {
                let mine: &[u8] = if !theirs.is_empty() && index < found.sketches.len() {
                    &found.sketches[index]
                } else {
                    b""
                };
                if !mine.is_empty() && mine.len() == theirs.len() {
                    let agreed = agreements(mine, theirs, fields);
                    if agreed < needed as i64 {
                        let unread = self.make.info(&Info {
                            seq: 0,
                            role: Role::Pending,
                            rank: None,
                            readers: Vec::new(),
                            target: String::new(),
                        })?;
                        let obj = self.make.classes.verify_result.bind(py).call1((
                            &request.sender,
                            content_hash,
                            request.epoch,
                            estimate(agreed, fields),
                            false,
                            unread,
                        ))?;
                        self.emit(obj);
                        continue;
                    }
                }
                let mut whole = request.clone();
                whole.content_hash = content_hash.clone();
                resolved.push(In::Verify(whole));
            }
        }
        Ok(resolved)
    }

    /// `ContentStage._index`.
    fn index(
        &mut self,
        works: &IndexMap<String, Box<Work>, rustc_hash::FxBuildHasher>,
        keys: &[String],
        ids: &mut Ids,
    ) -> PyResult<()> {
        let pairs: Vec<(String, &Work)> = keys
            .iter()
            .map(|k| (id_key(content_id(k)), &*works[k]))
            .collect();
        self.prefetch_ids(ids, pairs.iter().map(|(k, _)| k.clone()).collect())?;
        for (index_key, work) in pairs {
            let entry = ids
                .cache
                .get_mut(&index_key)
                .expect("prefetched")
                .get_or_insert_with(ContentIds::default);
            if entry.sketches.len() < entry.hashes.len() {
                let missing = entry.hashes.len() - entry.sketches.len();
                entry
                    .sketches
                    .extend(std::iter::repeat_n(Vec::new(), missing));
            }
            match entry.hashes.iter().position(|h| *h == work.key) {
                None => {
                    entry.hashes.push(work.key.clone());
                    entry.sketches.push(work.record.sketch.clone());
                    ids.dirty.insert(index_key);
                }
                Some(at) if entry.sketches[at].is_empty() => {
                    entry.sketches[at] = work.record.sketch.clone();
                    ids.dirty.insert(index_key);
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    fn run(&mut self, messages: Vec<In>) -> PyResult<Vec<(String, Option<Vec<u8>>)>> {
        let mut ids = Ids {
            cache: HashMap::default(),
            dirty: BTreeSet::new(),
        };
        let messages = if messages.iter().any(by_id) {
            self.resolve(messages, &mut ids)?
        } else {
            messages
        };
        // The records of the batch's contents, and the refs that change with those of the canonical positions.
        let mut keys: Vec<String> = Vec::new();
        let mut seen = HashSet::default();
        for m in &messages {
            if seen.insert(m.key()) {
                keys.push(m.key().to_owned());
            }
        }
        let raws = self.read_many(&keys)?;
        // Each record with the size it was stored at (what its encoding needs again, about).
        let mut records: HashMap<String, (Box<ContentRecord>, usize)> =
            HashMap::with_capacity_and_hasher(keys.len(), Default::default());
        let distinct = keys.len();
        for (key, raw) in keys.into_iter().zip(raws) {
            if let Some(raw) = raw {
                let raw = raw.as_bytes();
                let mut r = MpReader::new(raw);
                let record = ContentRecord::decode(&mut r).map_err(|e| {
                    PyValueError::new_err(format!("malformed content record at {key:?}: {e}"))
                })?;
                records.insert(key, (Box::new(record), raw.len()));
            }
        }
        let mut wanted: Vec<String> = Vec::new();
        let mut seen_refs = HashSet::default();
        for m in &messages {
            if let In::Ref(u) = m {
                let k = ref_key(&u.content_hash, &u.source_id);
                if seen_refs.insert(k.clone()) {
                    wanted.push(k);
                }
            }
        }
        for m in &messages {
            if let In::Ref(u) = m {
                if let Some(Some((source_id, _))) =
                    records.get(&u.content_hash).map(|r| &r.0.canonical_ref)
                {
                    let k = ref_key(&u.content_hash, source_id);
                    if seen_refs.insert(k.clone()) {
                        wanted.push(k);
                    }
                }
            }
        }
        self.prefetch_refs(wanted)?;

        let mut works: IndexMap<String, Box<Work>, rustc_hash::FxBuildHasher> =
            IndexMap::with_capacity_and_hasher(distinct, Default::default());
        let mut sizes: HashMap<String, usize> = HashMap::default();
        let mut only_asked: HashSet<String> = HashSet::default();
        for message in &messages {
            let key = message.key();
            let is_request = matches!(message, In::Verify(_));
            if !works.contains_key(key) {
                let record = match records.remove(key) {
                    Some((record, size)) => {
                        sizes.insert(key.to_owned(), size);
                        record
                    }
                    None => Box::default(),
                };
                works.insert(key.to_owned(), Box::new(Work::new(key.to_owned(), record)));
                if is_request {
                    only_asked.insert(key.to_owned());
                }
            } else if !is_request {
                only_asked.remove(key);
            }
            let work = works.get_mut(key).expect("inserted above");
            match message {
                In::Ref(m) => self.on_ref_update(work, m)?,
                In::Ack(m) => self.on_band_answer(work, m),
                In::Verify(m) => self.on_verify_request(work, m)?,
                In::Result(m) => self.on_verify_result(work, m)?,
                In::Decision(m) => {
                    self.take_decision(work, &m.other, Some(&m.mark), true)?;
                }
                In::Neighbor(m) => self.on_neighbor_update(work, m),
            }
        }
        let born: Vec<String> = works
            .values()
            .filter(|w| w.born)
            .map(|w| w.key.clone())
            .collect();
        if !born.is_empty() {
            self.start(&mut works, &born)?;
            let indexed: Vec<String> = born
                .into_iter()
                .filter(|k| works[k].record.indexed)
                .collect();
            self.index(&works, &indexed, &mut ids)?;
        }
        // A content that heard from the band stage or a verification may now tell its sources of a new chunk
        // (`tell_sources`), which reads the ref of each source it lists: read those of the batch in one call.
        let mut told: Vec<String> = Vec::new();
        let mut seen_told = HashSet::default();
        for message in &messages {
            if matches!(message, In::Ack(_) | In::Result(_)) && seen_told.insert(message.key()) {
                for r in &works[message.key()].record.top {
                    told.push(ref_key(message.key(), &r.source_id));
                }
            }
        }
        told.sort_unstable();
        told.dedup();
        self.prefetch_refs(told)?;
        let mut marked: BTreeSet<String> = BTreeSet::new();
        for (key, work) in works.iter_mut() {
            if only_asked.contains(key) && self.answer_unchanged(work)? {
                continue;
            }
            self.settle(work)?;
            marked.insert(key.clone());
        }
        let mut writes = Vec::with_capacity(marked.len() + self.refs_dirty.len() + ids.dirty.len());
        for key in marked {
            let mut w =
                MpWriter::with_capacity(sizes.get(&key).copied().unwrap_or(0).max(768) + 256);
            works[&key].record.encode(&mut w);
            writes.push((key, Some(w.out)));
        }
        for key in std::mem::take(&mut self.refs_dirty) {
            let value = self.refs[&key].as_ref().map(|entry| {
                let mut w = MpWriter::with_capacity(128);
                entry.encode(&mut w);
                w.out
            });
            writes.push((key, value));
        }
        for key in ids.dirty {
            let value = ids.cache[&key].as_ref().map(|entry| {
                let mut w = MpWriter::with_capacity(64);
                entry.encode(&mut w);
                w.out
            });
            writes.push((key, value));
        }
        Ok(writes)
    }
}

/// The content stage, compiled: built once per engine, applied to each batch of one partition.
#[pyclass(frozen, module = "streamdedup.core._native")]
pub struct ContentKernel {
    classes: Classes,
    params: Params,
    policy: Policy,
    helpers: Helpers,
}

fn required<'py>(d: &Bound<'py, PyDict>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    d.get_item(name)?
        .ok_or_else(|| PyTypeError::new_err(format!("missing {name}")))
}

#[pymethods]
impl ContentKernel {
    /// ContentKernel(classes, params, criteria, helpers, scheme)
    /// --
    ///
    /// ``classes``: the message, output and record classes by name; ``params``: the engine's parameters the stage
    /// reads, by name; ``criteria``: the canonical policy's; ``helpers``: the Python functions it calls back;
    /// ``scheme``: the compiled signature scheme (`SignatureScheme.compiled`), which it calls for a new text's
    /// features.
    #[new]
    fn new(
        classes: &Bound<'_, PyDict>,
        params: &Bound<'_, PyDict>,
        criteria: Vec<String>,
        helpers: &Bound<'_, PyDict>,
        scheme: Py<crate::Scheme>,
    ) -> PyResult<Self> {
        let criteria = criteria
            .iter()
            .map(|c| {
                super::policy::Criterion::parse(c)
                    .ok_or_else(|| PyValueError::new_err(format!("unknown policy criterion {c:?}")))
            })
            .collect::<PyResult<_>>()?;
        Ok(ContentKernel {
            classes: Classes::from_dict(classes)?,
            params: Params {
                threshold: required(params, "threshold")?.extract()?,
                min_shingles: required(params, "min_shingles")?.extract()?,
                max_candidates: required(params, "max_candidates")?.extract()?,
                max_chunk_sources: required(params, "max_chunk_sources")?.extract()?,
                shingle_size: required(params, "shingle_size")?.extract()?,
                num_perm: required(params, "num_perm")?.extract()?,
                bands: required(params, "bands")?.extract()?,
                rows: required(params, "rows")?.extract()?,
                dismiss_below: required(params, "dismiss_below")?.extract()?,
            },
            policy: Policy { criteria },
            helpers: Helpers {
                normalize: required(helpers, "normalize")?.unbind(),
                fact_tokens: required(helpers, "fact_tokens")?.unbind(),
                describe_fact_difference: required(helpers, "describe_fact_difference")?.unbind(),
                format_timestamp: required(helpers, "format_timestamp")?.unbind(),
                scheme,
            },
        })
    }

    /// apply(messages, read, scan)
    /// --
    ///
    /// Apply a batch of messages for one partition. ``read(keys)`` returns the stored values of keys (None where
    /// absent), ``scan(prefix)`` every (key, value) under a prefix. Return the writes, ``(key, value or None)``,
    /// and the messages and outputs the batch emits, in order.
    fn apply<'py>(
        &self,
        py: Python<'py>,
        messages: Vec<Bound<'py, PyAny>>,
        read: Bound<'py, PyAny>,
        scan: Bound<'py, PyAny>,
    ) -> PyResult<Applied<'py>> {
        let mut reader = py::Reader::default();
        let mut parsed = Vec::with_capacity(messages.len());
        let source_refs = self.classes.source_refs.bind(py);
        for message in &messages {
            if message.get_type().is(source_refs) {
                read_source_refs(message, &mut reader, &mut parsed)?;
            } else {
                parsed.push(read_message(message, &self.classes, &mut reader)?);
            }
        }
        let mut batch = Batch {
            py,
            params: &self.params,
            policy: &self.policy,
            helpers: &self.helpers,
            make: Writer::new(py, &self.classes),
            read: &read,
            scan: &scan,
            out: Vec::new(),
            refs: HashMap::default(),
            refs_dirty: BTreeSet::new(),
            shingles: HashMap::default(),
            facts: HashMap::default(),
            told: BTreeMap::new(),
        };
        let writes = batch.run(parsed)?;
        for (source_id, mut told) in std::mem::take(&mut batch.told) {
            let packed = PyBytes::new(py, &pack_told(&mut told));
            let obj = self
                .classes
                .source_statuses
                .bind(py)
                .call1((source_id, packed))?;
            batch.emit(obj);
        }
        let writes = writes
            .into_iter()
            .map(|(k, v)| (k, v.map(|v| PyBytes::new(py, &v))))
            .collect();
        Ok((writes, batch.out))
    }
}
