//! The discovery of a content's near copies (`streamdedup.core.stages.content_discovery.Discovery`): its LSH bands
//! joined and left, the band stage's candidates, reviewers' decisions about pairs, and what its neighbours tell it.

use rustc_hash::FxHashSet as HashSet;

use indexmap::IndexMap;

use crate::keys::{content_id, review_key};
use crate::model::{Info, MemberReport, NeighborEntry, PairMark, Role};
use crate::policy::covered;
use crate::signature::band_keys;

use super::messages::{BandAck, NeighborUpdate};
use super::records::Detail;
use super::work::{forget, readers, settled, Work};
use super::{Batch, Host, OutputValue};

impl<H: Host> Batch<'_, H> {
    /// `Discovery.start`: join the bands of texts that came alive in this batch.
    pub(super) fn start(
        &mut self,
        works: &mut IndexMap<String, Box<Work>, rustc_hash::FxBuildHasher>,
        born: &[String],
    ) -> Result<(), H::Error> {
        let mut norms = Vec::with_capacity(born.len());
        for key in born {
            let work = works.get_mut(key).expect("born works exist");
            norms.push(self.norm(work)?);
        }
        let p = self.params;
        let texts: Vec<&str> = norms.iter().map(String::as_str).collect();
        let features = self
            .host
            .features(&texts, p.bands, p.rows, p.min_shingles as i64)?;
        for (key, found) in born.iter().zip(features) {
            let Some(hashes) = found.bands else { continue };
            let band_keys = band_keys(&hashes);
            let work = works.get_mut(key).expect("born works exist");
            let record = &mut work.record;
            record.indexed = true;
            record.sketch = found.sketch;
            self.host.band(true, key, record.epoch, &band_keys)?;
            record.pending_bands = band_keys;
        }
        Ok(())
    }

    /// `Discovery.leave`: leave the bands of a text that died.
    pub(super) fn leave(&mut self, work: &mut Work) -> Result<(), H::Error> {
        let norm = self.norm(work)?;
        let p = self.params;
        let mut features = self.host.features(&[&norm], p.bands, p.rows, 0)?;
        let found = features.pop().expect("one text, one answer");
        let band_keys = band_keys(&found.bands.expect("asked for with min_shingles 0"));
        self.host
            .band(false, &work.key, work.record.epoch, &band_keys)
    }

    pub(super) fn on_band_answer(&mut self, work: &mut Work, message: &BandAck) {
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

    pub(super) fn choose_candidates(&mut self, work: &mut Work) {
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

    /// `Discovery._take_decision`.
    pub(super) fn take_decision(
        &mut self,
        work: &mut Work,
        other: &str,
        mark: Option<&PairMark>,
        verify: bool,
    ) -> Result<Option<PairMark>, H::Error> {
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
                        self.audit(
                            &key,
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

    pub(super) fn resolve_flag(&mut self, work: &mut Work, other: &str) -> Result<(), H::Error> {
        let record = &mut work.record;
        if record.flag_partner == other {
            record.flag_partner.clear();
            record.conflicted = false;
        }
        if let Some(at) = record.raised.iter().position(|h| h == other) {
            record.raised.remove(at);
            let key = review_key(&work.key, other);
            self.host.output("review", &key, OutputValue::Tombstone)?;
        }
        Ok(())
    }

    pub(super) fn decision_for(&self, work: &Work, other: &str) -> Option<PairMark> {
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

    pub(super) fn on_neighbor_update(&mut self, work: &mut Work, message: &NeighborUpdate) {
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

    pub(super) fn remember(
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
}
