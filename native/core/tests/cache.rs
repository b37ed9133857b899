//! The record cache's entries: bounded in bytes, least recently used out first.

use streamdedup_kernels::cache::{cost, Entries, ENTRY_OVERHEAD};

fn key(s: &str) -> Box<[u8]> {
    s.as_bytes().into()
}

#[test]
fn entries_are_counted_at_their_cost() {
    let mut e: Entries<&str> = Entries::new(1_000);
    e.insert(key("k"), "value", 5);
    assert_eq!(e.used, cost(b"k", 5));
    assert_eq!(e.used, 1 + 5 + ENTRY_OVERHEAD);
    e.insert(key("k"), "v", 1);
    assert_eq!(
        e.used,
        cost(b"k", 1),
        "a new value replaces the old one's cost"
    );
    assert_eq!(e.get(b"k"), Some(&"v"));
    e.remove(b"k");
    assert_eq!((e.used, e.len()), (0, 0));
    assert!(e.is_empty());
}

#[test]
fn the_least_recently_used_go_first() {
    let each = cost(b"a", 10);
    let mut e: Entries<u32> = Entries::new(3 * each);
    e.insert(key("a"), 1, 10);
    e.insert(key("b"), 2, 10);
    e.insert(key("c"), 3, 10);
    assert_eq!(e.get(b"a"), Some(&1)); // now b is the least recently used
    e.insert(key("d"), 4, 10);
    assert_eq!(e.get(b"b"), None);
    assert_eq!(e.get(b"a"), Some(&1));
    assert_eq!(e.get(b"c"), Some(&3));
    assert_eq!(e.get(b"d"), Some(&4));
    assert!(e.used <= e.capacity);
}

#[test]
fn a_value_larger_than_the_capacity_is_not_kept_and_drops_the_old() {
    let mut e: Entries<u32> = Entries::new(200);
    e.insert(key("a"), 1, 10);
    e.insert(key("a"), 2, 500);
    assert_eq!(e.get(b"a"), None);
    assert_eq!(e.used, 0);
}
