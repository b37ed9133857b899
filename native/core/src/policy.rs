//! The canonical policy (`streamdedup.core.policy`) and star clustering's decision
//! (`streamdedup.core.clustering`).

use std::cmp::Ordering;

use crate::model::{Info, Rank, Role, SourceAttrs};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Criterion {
    Authority,
    ModifiedAt,
    Length,
    SourceId,
}

impl Criterion {
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "authority" => Criterion::Authority,
            "modified_at" => Criterion::ModifiedAt,
            "length" => Criterion::Length,
            "source_id" => Criterion::SourceId,
            _ => return None,
        })
    }

    fn reason(self) -> &'static str {
        match self {
            Criterion::Authority => "higher authority",
            Criterion::ModifiedAt => "newer modified_at",
            Criterion::Length => "longer text",
            Criterion::SourceId => "lower source_id",
        }
    }

    /// How ``a`` sorts against ``b`` by this criterion alone (the better first).
    fn compare(self, a: &Rank, b: &Rank) -> Ordering {
        match self {
            Criterion::Authority => b.authority.cmp(&a.authority),
            Criterion::ModifiedAt => b.modified_at.cmp(&a.modified_at),
            Criterion::Length => b.length.cmp(&a.length),
            Criterion::SourceId => a.source_id.cmp(&b.source_id),
        }
    }
}

/// An ordered list of criteria: the better rank sorts first.
pub struct Policy {
    pub criteria: Vec<Criterion>,
}

impl Policy {
    /// How rank ``a`` sorts against ``b`` (`CanonicalPolicy.sort_key`): a current copy before an outdated one, a
    /// reviewer's preference, the criteria, then the content hash.
    pub fn compare(&self, a: &Rank, b: &Rank) -> Ordering {
        a.outdated
            .cmp(&b.outdated)
            .then_with(|| b.preferred.cmp(&a.preferred))
            .then_with(|| {
                self.criteria
                    .iter()
                    .map(|c| c.compare(a, b))
                    .find(|o| o.is_ne())
                    .unwrap_or(Ordering::Equal)
            })
            .then_with(|| a.content_hash.cmp(&b.content_hash))
    }

    pub fn better(&self, a: &Rank, b: &Rank) -> bool {
        self.compare(a, b) == Ordering::Less
    }

    /// The first criterion that decides between two ranks.
    pub fn reason(&self, winner: &Rank, loser: &Rank) -> &'static str {
        if winner.outdated != loser.outdated {
            return "current version";
        }
        if winner.preferred != loser.preferred {
            return "preferred by a reviewer";
        }
        self.criteria
            .iter()
            .find(|c| c.compare(winner, loser).is_ne())
            .map_or("lower content hash", |c| c.reason())
    }

    /// How source position ``a`` sorts against ``b`` (`CanonicalPolicy.ref_order`): a current source first, then
    /// a preferred one, the criteria but length, then position, then source_id.
    pub fn compare_refs(
        &self,
        a: (&str, i64, &SourceAttrs),
        b: (&str, i64, &SourceAttrs),
    ) -> Ordering {
        (!a.2.outdated_by.is_empty())
            .cmp(&!b.2.outdated_by.is_empty())
            .then_with(|| b.2.preferred.cmp(&a.2.preferred))
            .then_with(|| {
                self.criteria
                    .iter()
                    .map(|c| match c {
                        Criterion::Authority => b.2.authority.cmp(&a.2.authority),
                        Criterion::ModifiedAt => b.2.modified_at.cmp(&a.2.modified_at),
                        Criterion::Length => Ordering::Equal,
                        Criterion::SourceId => a.0.cmp(b.0),
                    })
                    .find(|o| o.is_ne())
                    .unwrap_or(Ordering::Equal)
            })
            .then_with(|| a.1.cmp(&b.1))
            .then_with(|| a.0.cmp(b.0))
    }
}

/// The rank of a content whose best source position is ``(source_id, attrs)``.
pub fn rank_of(content_hash: &str, length: i64, source_id: &str, attrs: &SourceAttrs) -> Rank {
    Rank {
        authority: attrs.authority,
        modified_at: attrs.modified_at,
        length,
        source_id: source_id.to_owned(),
        content_hash: content_hash.to_owned(),
        preferred: attrs.preferred,
        outdated: !attrs.outdated_by.is_empty(),
    }
}

pub const EVERYONE: &str = "*";

/// Whether every principal in ``readers`` is also in ``by`` (``*`` covers everyone).
pub fn covered(readers: &[String], by: &[String]) -> bool {
    if by.iter().any(|p| p == EVERYONE) {
        return true;
    }
    if readers.iter().any(|p| p == EVERYONE) {
        return false;
    }
    readers.iter().all(|p| by.contains(p))
}

fn joins_the_other_way(readers: &[String], other: &[String]) -> bool {
    covered(readers, other) && !covered(other, readers)
}

/// Where a content belongs (`clustering.Decision`).
pub struct Decision {
    pub role: Role,
    pub target: String,
    pub jaccard: f64,
    pub refused: Vec<String>,
}

/// `clustering.decide`: ``neighbors`` in content-hash order.
pub fn decide(
    rank: &Rank,
    readers: &[String],
    neighbors: &[(&String, f64, &Info)],
    policy: &Policy,
    first: bool,
    merged: &[&String],
) -> Option<Decision> {
    let mut better = Vec::new();
    let mut reversed = Vec::new();
    for &(h, j, info) in neighbors {
        let Some(their) = &info.rank else { continue };
        if policy.better(their, rank) {
            better.push((h, j, info));
        } else if merged.contains(&h) && joins_the_other_way(readers, &info.readers) {
            reversed.push((h, j, info));
        }
    }
    if first && better.iter().any(|(_, _, info)| info.role == Role::Pending) {
        return None;
    }
    let mut fits: Vec<(&String, f64, &Rank)> = Vec::new();
    let mut refused = Vec::new();
    for &(h, jaccard, info) in &better {
        let Some(their) = &info.rank else { continue };
        if info.role != Role::Canonical {
            continue;
        }
        if covered(readers, &info.readers) {
            fits.push((h, jaccard, their));
        } else if !(merged.contains(&h) && joins_the_other_way(&info.readers, readers)) {
            refused.push(h.clone());
        }
    }
    for &(h, j, info) in &reversed {
        if info.role == Role::Canonical {
            if let Some(their) = &info.rank {
                fits.push((h, j, their));
            }
        }
    }
    refused.sort();
    let best = fits.iter().min_by(|a, b| {
        b.1.partial_cmp(&a.1)
            .unwrap_or(Ordering::Equal)
            .then_with(|| policy.compare(a.2, b.2))
    });
    Some(match best {
        Some(&(target, jaccard, _)) => Decision {
            role: Role::Member,
            target: target.clone(),
            jaccard,
            refused,
        },
        None => Decision {
            role: Role::Canonical,
            target: String::new(),
            jaccard: 1.0,
            refused,
        },
    })
}

/// `clustering.split_reason`: why a member left the canonical it was in.
pub fn split_reason(
    rank: &Rank,
    readers: &[String],
    target: Option<&Info>,
    policy: &Policy,
) -> &'static str {
    let Some(target) = target else {
        return "canonical deleted";
    };
    if target.role != Role::Canonical {
        return "canonical changed";
    }
    if !covered(readers, &target.readers) {
        return "acl boundary";
    }
    match &target.rank {
        Some(their) if policy.better(their, rank) => "better match",
        _ => "rank changed",
    }
}
