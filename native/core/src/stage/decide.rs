//! A content's decision (`streamdedup.core.stages.content_settle`, `clustering.decide`) and its life
//! (`content.ContentStage`): the cluster it joins and the records that tell of a change, and its birth and
//! death as its sources come and go.

use crate::keys::round6;
use crate::model::{ContentRecord, Info, Rank, Role};
use crate::policy::{decide, split_reason};

use super::messages::RefUpdate;
use super::records::{Detail, ReviewSide};
use super::work::{birth, dead_info, Work};
use super::{Batch, Host, OutputValue};

impl<H: Host> Batch<'_, H> {
    /// `Settlement.decide`: where the content belongs, once its discovery is complete.
    pub(super) fn decide(
        &mut self,
        work: &mut Work,
        rank: &Rank,
        readers: &[String],
    ) -> Result<(), H::Error> {
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
        self.flag_refused(work, &decision.refused, readers)?;
        let old_role = work.was_role;
        let old_target = work.was_target.clone();
        let record = &mut work.record;
        record.role = decision.role;
        record.target = decision.target;
        record.jaccard = decision.jaccard;
        if (old_role, &old_target) == (record.role, &record.target) {
            return Ok(());
        }
        if old_role == Role::Member {
            self.audit_split(work, rank, readers, &old_target)?;
        }
        if work.record.role == Role::Member {
            self.audit_merge(work, rank, old_role)?;
        }
        Ok(())
    }

    /// Flag each better-ranked canonical the content's readers cannot join (`acl_boundary`), once.
    fn flag_refused(
        &mut self,
        work: &mut Work,
        refused: &[String],
        readers: &[String],
    ) -> Result<(), H::Error> {
        for other in refused {
            if work.record.flagged.contains(other) {
                continue;
            }
            work.record.flagged.push(other.clone());
            if !work.record.raised.contains(other) {
                work.record.raised.push(other.clone());
            }
            let entry = &work.record.neighbors[other];
            let side = |content_hash, acl| ReviewSide {
                content_hash,
                text: None,
                acl: Some(acl),
            };
            self.review(
                "acl_boundary",
                side(&work.key, readers),
                side(other, &entry.info.readers),
                entry.jaccard,
                "the better-ranked copy is not readable by every reader of the other",
            )?;
        }
        Ok(())
    }

    /// A member left the canonical `old_target`: a swap when it is canonical and the old one is gone, else a split.
    fn audit_split(
        &mut self,
        work: &Work,
        rank: &Rank,
        readers: &[String],
        old_target: &str,
    ) -> Result<(), H::Error> {
        let key = &work.key;
        let old_info = work.record.neighbors.get(old_target).map(|e| &e.info);
        let reason = split_reason(rank, readers, old_info, self.policy);
        if work.record.role == Role::Canonical && old_info.is_none() {
            let detail = [("previous_chunk_id", Detail::Str(old_target.to_owned()))];
            self.audit(key, Some(key), "swap", reason, &detail)
        } else {
            let detail = [("content_hash", Detail::Str(key.clone()))];
            self.audit(old_target, Some(old_target), "split", reason, &detail)
        }
    }

    /// The content joined its target: a swap when it was canonical (the target took its place), else a merge.
    fn audit_merge(&mut self, work: &Work, rank: &Rank, old_role: Role) -> Result<(), H::Error> {
        let key = &work.key;
        let target = &work.record.target;
        let near_jaccard = round6(work.record.jaccard);
        let target_rank = &work.record.neighbors[target].info.rank;
        let near = [
            ("content_hash", Detail::Str(key.clone())),
            ("jaccard", Detail::Float(near_jaccard)),
        ];
        match target_rank {
            Some(target_rank) if old_role == Role::Canonical => {
                let reason = if self.policy.better(target_rank, rank) {
                    self.policy.reason(target_rank, rank)
                } else {
                    "merged by a reviewer"
                };
                let [(n1, d1), (n2, d2)] = near;
                let detail = [
                    ("previous_chunk_id", Detail::Str(key.clone())),
                    (n1, d1),
                    (n2, d2),
                ];
                self.audit(target, Some(target), "swap", reason, &detail)
            }
            _ => self.audit(target, Some(target), "merge", "near", &near),
        }
    }

    /// `ContentStage._on_ref_update`: a source's positions of the content changed; it may be born or die.
    pub(super) fn on_ref_update(
        &mut self,
        work: &mut Work,
        message: &RefUpdate<H::Text>,
    ) -> Result<(), H::Error> {
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

    /// `ContentStage._death`: the content lost its last live source.
    fn death(&mut self, work: &mut Work) -> Result<(), H::Error> {
        let key = work.key.clone();
        if work.record.indexed {
            self.leave(work)?;
        }
        if work.record.role == Role::Canonical {
            self.audit(&key, Some(&key), "retract", "no live source", &[])?;
        }
        if !work.record.record_digest.is_empty() {
            self.host
                .output("canonical-chunks", &key, OutputValue::Tombstone)?;
        }
        work.record.seq += 1;
        let dead = dead_info(work.record.seq);
        let dead_obj = self.host.info(&dead)?;
        let mut others: Vec<&String> = work.record.neighbors.keys().collect();
        others.sort();
        for other in others {
            self.host.neighbor_update(other, &key, &dead_obj, None)?;
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
