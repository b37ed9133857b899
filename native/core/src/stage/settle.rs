//! Settling a content at the end of a batch (`streamdedup.core.stages.content_settle.Settlement`): its first
//! positions, its verification plan and its decision, then what it tells its neighbours, its sources, the chunk
//! records and the contents it asks or answers.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashSet as HashSet;

use crate::keys::{content_id, ref_key};
use crate::mapping::Told;
use crate::model::{
    ChunkStatus, Info, MemberReport, PairMark, Position, Rank, Ref, RefEntry, Role,
};
use crate::policy::rank_of;

use super::records::Detail;
use super::work::{dead_info, readers, source_refs, Owed, Work};
use super::{Batch, Host, OutputValue, VerifyResultOut};

fn differs(a: &Info, b: &Info) -> bool {
    a.role != b.role || a.rank != b.rank || a.readers != b.readers || a.target != b.target
}

fn chunk_of(status: &ChunkStatus) -> (&str, bool, f64) {
    (&status.chunk_id, status.near, status.jaccard)
}

/// A content's first position, without its text: its canonical position if it is canonical.
fn first_position<H: Host>(work: &Work) -> Result<Ref, H::Error> {
    let Some(top) = work.record.top.first() else {
        return Err(H::error(format!(
            "content {:?} is alive without a live source position",
            work.key
        )));
    };
    Ok(Ref {
        source_id: top.source_id.clone(),
        position: top.position,
        attrs: top.attrs.clone(),
        text: String::new(),
    })
}

impl<H: Host> Batch<'_, H> {
    /// `Settlement.settle`: settle one content of the batch.
    pub(super) fn settle(&mut self, work: &mut Work) -> Result<(), H::Error> {
        if !work.record.alive {
            return self.settle_dead(work);
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
        let first = first_position::<H>(work)?;
        let rank = rank_of(
            &work.key,
            work.record.length,
            &first.source_id,
            &first.attrs,
        );
        let readers = readers(&work.record);
        let owed = self.answers(work, &rank)?;
        self.plan_verification(work);
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
        self.tell(work, rank, readers, canonical_ref, owed)
    }

    /// A content dead at the end of the batch answers every request it holds and tells those that found it.
    fn settle_dead(&mut self, work: &mut Work) -> Result<(), H::Error> {
        let dead = self.host.info(&dead_info(work.record.seq))?;
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
            self.host.verify_result(&VerifyResultOut {
                content_hash: &sender,
                sender: &work.key,
                epoch,
                jaccard: 0.0,
                edge: false,
                info: &dead,
                conflict: None,
                text: "",
                decision: decision.as_ref(),
                report: None,
            })?;
        }
        let mut others: BTreeSet<&String> = work.late_edges.keys().collect();
        others.extend(work.strangers.iter());
        for other in others {
            self.host.neighbor_update(other, &work.key, &dead, None)?;
        }
        Ok(())
    }

    /// The pairs a content asks to verify: its band candidates once its bands answered, and those a decision or
    /// a stranger asks again; each is pending and checked.
    fn plan_verification(&mut self, work: &mut Work) {
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
    }

    /// What a settled content tells: its info and report to its neighbours, its chunk to its sources, its chunk
    /// record, then its requests and answers.
    fn tell(
        &mut self,
        work: &mut Work,
        rank: Rank,
        readers: Vec<String>,
        canonical_ref: Option<Position>,
        owed: Owed,
    ) -> Result<(), H::Error> {
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
            rank: Some(rank),
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
        let info_obj = self.host.info(&info)?;
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

    /// `Settlement.answer_unchanged`: a content only asked, and unchanged, answers from what it last told.
    pub(super) fn answer_unchanged(&mut self, work: &mut Work) -> Result<bool, H::Error> {
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
        let info_obj = self.host.info(info)?;
        for answer in &work.answers {
            let theirs = if answer.sender == target {
                report.as_ref()
            } else {
                None
            };
            self.answer_result(work, answer, &info_obj, None, theirs)?;
        }
        Ok(true)
    }

    fn tell_neighbors(
        &mut self,
        work: &mut Work,
        info: Info,
        info_obj: &H::Info,
        report: Option<MemberReport>,
        info_changed: bool,
        report_changed: bool,
    ) -> Result<(), H::Error> {
        let record = &work.record;
        let mut told: BTreeSet<String> = if info_changed {
            record.neighbors.keys().cloned().collect()
        } else if report_changed && !record.target.is_empty() {
            std::iter::once(record.target.clone()).collect()
        } else {
            BTreeSet::new()
        };
        told.extend(work.new_neighbors.iter().cloned());
        for other in told {
            if work.record.neighbors.contains_key(&other) {
                let theirs = if other == work.record.target {
                    report.as_ref()
                } else {
                    None
                };
                self.host
                    .neighbor_update(&other, &work.key, info_obj, theirs)?;
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
    ) -> Result<(), H::Error> {
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
                                outdated: !new.outdated_by.is_empty(),
                            },
                            &Rank {
                                authority: old.authority,
                                modified_at: old.modified_at,
                                length: 0,
                                source_id: source_id.clone(),
                                content_hash: String::new(),
                                preferred: old.preferred,
                                outdated: !old.outdated_by.is_empty(),
                            },
                        )
                    }
                    _ => "canonical source removed",
                }
            }
        };
        self.audit(
            &key,
            Some(&key),
            "swap",
            reason,
            &[(
                "canonical",
                Detail::Position(after.source_id.clone(), after.position),
            )],
        )
    }

    fn tell_sources(
        &mut self,
        work: &mut Work,
        status: ChunkStatus,
        changed: bool,
    ) -> Result<(), H::Error> {
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

    fn emit_chunk(&mut self, work: &mut Work, readers: &[String]) -> Result<(), H::Error> {
        if work.record.role != Role::Canonical || work.record.canonical_ref.is_none() {
            if !work.record.record_digest.is_empty() {
                self.host
                    .output("canonical-chunks", &work.key, OutputValue::Tombstone)?;
                work.record.record_digest.clear();
            }
            return Ok(());
        }
        let Some(digest) = self.chunk(work, readers, work.record.revision + 1)? else {
            return Ok(());
        };
        work.record.record_digest = digest;
        work.record.revision += 1;
        Ok(())
    }
}
