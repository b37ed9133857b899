//! The batch's working set (`streamdedup.core.stages.content_work`): each content's record and what the batch
//! learnt about it, and the steps on a record that need nothing else.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use indexmap::IndexMap;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::model::{
    Conflict, ContentIds, ContentRecord, Info, MemberReport, PairMark, Position, Ref, RefEntry,
    Role,
};
use crate::policy::EVERYONE;

use super::messages::VerifyRequest;

/// An answer a content owes a verify request, sent when it settles.
pub(super) struct Answer {
    pub(super) sender: String,
    pub(super) epoch: i64,
    pub(super) jaccard: f64,
    pub(super) edge: bool,
    pub(super) conflict: Option<Conflict>,
    pub(super) decision: Option<PairMark>,
}

/// The answers a content owes (by index into `Work::answers`), each with the fact tokens to send the sender when
/// the sender is to flag the pair.
pub(super) type Owed = Vec<(usize, Option<Rc<Vec<String>>>)>;

/// A verified edge that came while the content was dead: remembered if it comes alive in the batch.
pub(super) struct LateEdge {
    pub(super) jaccard: f64,
    pub(super) info: Info,
    pub(super) report: Option<MemberReport>,
}

/// A content of the batch: its record, and what the batch learnt about it (`content_work.Work`).
pub(super) struct Work {
    pub(super) key: String,
    // Boxed, as are the works of a batch: a batch's tables then hold pointers, and its records come from the
    // allocator's reused blocks, not from fresh pages that the system must clear for every batch.
    pub(super) record: Box<ContentRecord>,
    pub(super) norm: Option<String>,
    pub(super) was_role: Role,
    pub(super) was_target: String,
    pub(super) was_ref: Option<Position>,
    pub(super) born: bool,
    pub(super) refill: bool,
    pub(super) answer_sources: BTreeSet<String>,
    pub(super) to_verify: Vec<String>,
    pub(super) decided_verify: Vec<String>,
    pub(super) answers: Vec<Answer>,
    pub(super) asked_while_dead: Vec<VerifyRequest>,
    pub(super) conflicts: Vec<Conflict>,
    pub(super) new_neighbors: HashSet<String>,
    pub(super) late_edges: BTreeMap<String, LateEdge>,
    pub(super) strangers: BTreeSet<String>,
}

impl Work {
    pub(super) fn new(key: String, record: Box<ContentRecord>) -> Self {
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

/// The positions a source's entry holds, as first-position candidates (none without attributes: a tombstone).
pub(super) fn positions_of(source_id: &str, entry: &RefEntry) -> Vec<Ref> {
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

/// Decode a stored `RefEntry`.
pub(super) fn decode_ref<H: super::Host>(raw: &[u8], key: &str) -> Result<RefEntry, H::Error> {
    let mut r = crate::mp::Reader::new(raw);
    RefEntry::decode(&mut r).map_err(|e| H::error(format!("malformed ref record at {key:?}: {e}")))
}

/// Add (``sign`` 1) or remove (-1) a live ref's positions and readers in the content's counts.
pub(super) fn count(record: &mut ContentRecord, entry: &RefEntry, sign: i64) {
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

/// Who reads a content: every principal of its live sources (`*` alone when everyone does), sorted.
pub(super) fn readers(record: &ContentRecord) -> Vec<String> {
    if record.principals.contains_key(EVERYONE) {
        return vec![EVERYONE.to_owned()];
    }
    let mut found: Vec<String> = record.principals.keys().cloned().collect();
    found.sort();
    found
}

/// A member report's positions: the first positions without their texts.
pub(super) fn source_refs(top: &[Ref]) -> Vec<Ref> {
    top.iter()
        .map(|t| Ref {
            source_id: t.source_id.clone(),
            position: t.position,
            attrs: t.attrs.clone(),
            text: String::new(),
        })
        .collect()
}

/// Whether a reviewer settled a pair: a mark of `kind` (of `keep_separate` or `merge` when None).
pub(super) fn settled(mark: Option<&PairMark>, kind: Option<&str>) -> bool {
    match (mark, kind) {
        (None, _) => false,
        (Some(m), Some(kind)) => m.kind == kind,
        (Some(m), None) => m.kind == "keep_separate" || m.kind == "merge",
    }
}

/// Drop a neighbour (unless `seq` is older than what is known of it).
pub(super) fn forget(work: &mut Work, other: &str, seq: Option<i64>) {
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

/// What a dead content tells its neighbours.
pub(super) fn dead_info(seq: i64) -> Info {
    Info {
        seq,
        role: Role::Dead,
        rank: None,
        readers: Vec::new(),
        target: String::new(),
    }
}

/// A content comes alive: a new epoch, undecided, and the pairs a reviewer merged asked again.
pub(super) fn birth(work: &mut Work) {
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

/// The `ContentIds` records the batch read, and those it changed.
pub(super) struct Ids {
    pub(super) cache: HashMap<String, Option<ContentIds>>,
    pub(super) dirty: BTreeSet<String>,
}
