//! The canonical policy and star clustering's decision.

use std::cmp::Ordering;

use streamdedup_kernels::model::{Info, Rank, Role, SourceAttrs};
use streamdedup_kernels::policy::{covered, decide, rank_of, split_reason, Criterion, Policy};

fn policy() -> Policy {
    Policy {
        criteria: ["authority", "modified_at", "length", "source_id"]
            .iter()
            .map(|c| Criterion::parse(c).unwrap())
            .collect(),
    }
}

fn rank(authority: i64, modified_at: i64, length: i64, source_id: &str, h: &str) -> Rank {
    Rank {
        authority,
        modified_at,
        length,
        source_id: source_id.into(),
        content_hash: h.into(),
        preferred: false,
        outdated: false,
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn criteria_order_ranks_in_turn_then_the_content_hash() {
    let p = policy();
    let base = rank(1, 10, 5, "b", "h1");
    assert!(
        p.better(&rank(2, 0, 0, "z", "h9"), &base),
        "higher authority first"
    );
    assert!(p.better(&rank(1, 11, 0, "z", "h9"), &base), "then newer");
    assert!(p.better(&rank(1, 10, 6, "z", "h9"), &base), "then longer");
    assert!(
        p.better(&rank(1, 10, 5, "a", "h9"), &base),
        "then the lower source_id"
    );
    assert!(
        p.better(&rank(1, 10, 5, "b", "h0"), &base),
        "then the lower hash"
    );
    assert_eq!(p.compare(&base, &base), Ordering::Equal);
    let mut preferred = rank(0, 0, 0, "z", "h9");
    preferred.preferred = true;
    assert!(
        p.better(&preferred, &base),
        "a reviewer's preference comes first"
    );
    assert_eq!(p.reason(&preferred, &base), "preferred by a reviewer");
    assert_eq!(
        p.reason(&rank(1, 11, 0, "z", "h9"), &base),
        "newer modified_at"
    );
    assert_eq!(
        p.reason(&rank(1, 10, 5, "b", "h0"), &base),
        "lower content hash"
    );
}

#[test]
fn another_order_of_criteria_decides_otherwise() {
    let p = Policy {
        criteria: vec![Criterion::Length, Criterion::Authority],
    };
    assert!(p.better(&rank(0, 0, 9, "a", "h1"), &rank(5, 0, 1, "a", "h0")));
    assert!(Criterion::parse("size").is_none());
}

#[test]
fn source_positions_sort_by_the_criteria_but_length_then_position() {
    let p = policy();
    let attrs = |authority, modified_at| SourceAttrs {
        acl: vec![],
        modified_at,
        authority,
        uri: None,
        title: None,
        metadata: None,
        preferred: false,
        outdated_by: String::new(),
    };
    let (high, low) = (attrs(2, 0), attrs(1, 5));
    assert_eq!(
        p.compare_refs(("b", 9, &high), ("a", 0, &low)),
        Ordering::Less
    );
    assert_eq!(
        p.compare_refs(("a", 3, &low), ("a", 1, &low)),
        Ordering::Greater
    );
    assert_eq!(
        p.compare_refs(("a", 1, &low), ("b", 1, &low)),
        Ordering::Less
    );
    let r = rank_of("h", 7, "doc", &high);
    assert_eq!((r.authority, r.length, r.source_id.as_str()), (2, 7, "doc"));
}

#[test]
fn a_current_copy_ranks_before_an_outdated_one_even_a_preferred_one() {
    let p = policy();
    let current = rank(0, 0, 0, "z", "h9");
    let mut outdated = rank(5, 99, 50, "a", "h0");
    outdated.preferred = true;
    outdated.outdated = true;
    assert!(p.better(&current, &outdated), "current before preferred");
    assert_eq!(p.compare(&outdated, &current), Ordering::Greater);
    assert_eq!(p.reason(&current, &outdated), "current version");
    // Between two outdated ranks, the preference and the criteria decide as before.
    let mut other = rank(9, 0, 0, "z", "h9");
    other.outdated = true;
    assert!(p.better(&outdated, &other));
    assert_eq!(p.reason(&outdated, &other), "preferred by a reviewer");
    other.preferred = true;
    assert_eq!(p.reason(&other, &outdated), "higher authority");
}

#[test]
fn a_current_source_position_sorts_first_and_an_outdated_one_ranks_outdated() {
    let p = policy();
    let attrs = |preferred, outdated_by: &str| SourceAttrs {
        acl: vec![],
        modified_at: 0,
        authority: if outdated_by.is_empty() { 0 } else { 9 },
        uri: None,
        title: None,
        metadata: None,
        preferred,
        outdated_by: outdated_by.into(),
    };
    let (current, outdated) = (attrs(false, ""), attrs(true, "policy-v3"));
    assert_eq!(
        p.compare_refs(("b", 9, &current), ("a", 0, &outdated)),
        Ordering::Less
    );
    assert_eq!(
        p.compare_refs(("a", 0, &outdated), ("b", 9, &current)),
        Ordering::Greater
    );
    assert!(!rank_of("h", 1, "b", &current).outdated);
    let r = rank_of("h", 1, "a", &outdated);
    assert!(r.outdated && r.preferred);
}

#[test]
fn readers_are_covered_by_a_superset_or_everyone() {
    assert!(covered(&strings(&["a"]), &strings(&["a", "b"])));
    assert!(!covered(&strings(&["a", "c"]), &strings(&["a", "b"])));
    assert!(covered(&strings(&["*"]), &strings(&["*"])));
    assert!(!covered(&strings(&["*"]), &strings(&["a"])));
    assert!(covered(&strings(&["a"]), &strings(&["*"])));
}

fn neighbour(role: Role, rank: Rank, readers: &[&str]) -> Info {
    Info {
        seq: 1,
        role,
        rank: Some(rank),
        readers: strings(readers),
        target: String::new(),
    }
}

#[test]
fn a_content_joins_the_best_covering_canonical() {
    let p = policy();
    let mine = rank(1, 0, 0, "s", "h5");
    let readers = strings(&["a"]);
    let (h1, h2, h3) = ("h1".to_owned(), "h2".to_owned(), "h3".to_owned());
    let better = neighbour(Role::Canonical, rank(3, 0, 0, "s", "h1"), &["a", "b"]);
    let closer = neighbour(Role::Canonical, rank(2, 0, 0, "s", "h2"), &["*"]);
    let worse = neighbour(Role::Canonical, rank(0, 0, 0, "s", "h3"), &["a"]);
    let found = [(&h1, 0.8, &better), (&h2, 0.9, &closer), (&h3, 1.0, &worse)];
    let d = decide(&mine, &readers, &found, &p, false, &[]).unwrap();
    assert_eq!(
        (d.role, d.target.as_str(), d.jaccard),
        (Role::Member, "h2", 0.9)
    );
    // Alone (or above every better one), it is canonical.
    let d = decide(&mine, &readers, &found[2..], &p, false, &[]).unwrap();
    assert_eq!(
        (d.role, d.target.as_str(), d.jaccard),
        (Role::Canonical, "", 1.0)
    );
}

#[test]
fn a_better_canonical_its_readers_cannot_cover_is_refused() {
    let p = policy();
    let mine = rank(1, 0, 0, "s", "h5");
    let h1 = "h1".to_owned();
    let narrow = neighbour(Role::Canonical, rank(3, 0, 0, "s", "h1"), &["b"]);
    let d = decide(
        &mine,
        &strings(&["a"]),
        &[(&h1, 0.9, &narrow)],
        &p,
        false,
        &[],
    )
    .unwrap();
    assert_eq!(d.role, Role::Canonical);
    assert_eq!(d.refused, ["h1"]);
    assert_eq!(
        split_reason(&mine, &strings(&["a"]), Some(&narrow), &p),
        "acl boundary"
    );
    assert_eq!(
        split_reason(&mine, &strings(&["a"]), None, &p),
        "canonical deleted"
    );
}

#[test]
fn a_first_decision_waits_for_a_better_pending_neighbour() {
    let p = policy();
    let mine = rank(1, 0, 0, "s", "h5");
    let h1 = "h1".to_owned();
    let pending = neighbour(Role::Pending, rank(3, 0, 0, "s", "h1"), &["*"]);
    assert!(decide(
        &mine,
        &strings(&["a"]),
        &[(&h1, 0.9, &pending)],
        &p,
        true,
        &[]
    )
    .is_none());
    assert!(decide(
        &mine,
        &strings(&["a"]),
        &[(&h1, 0.9, &pending)],
        &p,
        false,
        &[]
    )
    .is_some());
}
