//! Verification of candidate pairs (`streamdedup.core.stages.content_discovery.Discovery`): the exact Jaccard and
//! facts of a pair, the answers a content owes, its fact conflict, and the requests and answers it sends.

use std::rc::Rc;

use rustc_hash::FxHashSet as HashSet;

use crate::keys::content_id;
use crate::model::{Conflict, MemberReport, PairMark, Rank};
use crate::shingles::jaccard;

use super::messages::{VerifyRequest, VerifyResult};
use super::records::ReviewSide;
use super::work::{forget, settled, Answer, LateEdge, Owed, Work};
use super::{Batch, Host, VerifyRequestOut, VerifyResultOut};

impl<H: Host> Batch<'_, H> {
    pub(super) fn on_verify_request(
        &mut self,
        work: &mut Work,
        message: &VerifyRequest,
    ) -> Result<(), H::Error> {
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
                                outdated: false,
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

    pub(super) fn on_verify_result(
        &mut self,
        work: &mut Work,
        message: &VerifyResult,
    ) -> Result<(), H::Error> {
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

    /// `Discovery.answers`: the answers owed, each with the fact tokens to send when the sender is to flag.
    pub(super) fn answers(&mut self, work: &mut Work, rank: &Rank) -> Result<Owed, H::Error> {
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

    pub(super) fn flag_conflict(&mut self, work: &mut Work) -> Result<(), H::Error> {
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
        let detail = self.host.describe_fact_difference(low, high)?;
        let side = |content_hash, text| ReviewSide {
            content_hash,
            text: Some(text),
            acl: None,
        };
        self.review(
            "fact_conflict",
            side(&work.key, &work.record.text),
            side(&best.content_hash, &best.text),
            best.jaccard,
            &detail,
        )
    }

    fn request(
        &mut self,
        work: &mut Work,
        other: &str,
        info: &H::Info,
        decision: Option<PairMark>,
        report: Option<&MemberReport>,
        sketch: &[u8],
    ) -> Result<(), H::Error> {
        let norm = self.norm(work)?;
        self.host.verify_request(&VerifyRequestOut {
            content_hash: other,
            sender: &work.key,
            epoch: work.record.epoch,
            norm: &norm,
            text: &work.record.text,
            info,
            decision: decision.as_ref(),
            report,
            sketch,
        })
    }

    pub(super) fn answer_result(
        &mut self,
        work: &Work,
        answer: &Answer,
        info: &H::Info,
        facts: Option<&Rc<Vec<String>>>,
        report: Option<&MemberReport>,
    ) -> Result<(), H::Error> {
        let text = if facts.is_none() {
            ""
        } else {
            work.record.text.as_str()
        };
        self.host.verify_result(&VerifyResultOut {
            content_hash: &answer.sender,
            sender: &work.key,
            epoch: answer.epoch,
            jaccard: answer.jaccard,
            edge: answer.edge,
            info,
            conflict: facts.map(|f| f.as_slice()),
            text,
            decision: answer.decision.as_ref(),
            report,
        })
    }

    pub(super) fn ask_and_answer(
        &mut self,
        work: &mut Work,
        info: &H::Info,
        report: Option<&MemberReport>,
        owed: Owed,
    ) -> Result<(), H::Error> {
        let target = if report.is_some() {
            work.record.target.clone()
        } else {
            String::new()
        };
        let to_verify = work.to_verify.clone();
        let sketch = work.record.sketch.clone();
        for other in &to_verify {
            let decision = self.decision_for(work, other);
            self.request(work, other, info, decision, None, &sketch)?;
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
            self.request(work, &other, info, decision, theirs, b"")?;
        }
        for (i, facts) in owed {
            let answer = &work.answers[i];
            let theirs = if answer.sender == target {
                report
            } else {
                None
            };
            self.answer_result(work, answer, info, facts.as_ref(), theirs)?;
        }
        Ok(())
    }
}
