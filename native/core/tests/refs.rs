//! A source version's packed reference updates.

use streamdedup_kernels::keys::content_id;
use streamdedup_kernels::refs::{
    content_hashes, content_partition, pack_refs, read_refs, split_packed,
};
use streamdedup_kernels::signature::positive_murmur2;

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn content_hashes_are_hex_sha256() {
    let hashes = content_hashes(&strings(&["abc"]));
    assert_eq!(
        hashes[0],
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

#[test]
fn a_packed_list_holds_each_content_once_in_hash_order() {
    let norms = strings(&["b", "a", "b"]);
    let hashes = strings(&["h2", "h1", "h2"]);
    let originals = ["B", "A", "B!"];
    let packed = pack_refs(&hashes, &originals, &norms, &["h0", "h2"]);
    let refs = read_refs(&packed).unwrap();
    let listed: Vec<&str> = refs.iter().map(|r| r.content_hash).collect();
    assert_eq!(listed, ["h0", "h1", "h2"]);
    assert!(refs[0].positions.is_empty() && refs[0].texts.is_empty() && refs[0].norm.is_empty());
    assert_eq!(
        (refs[1].positions.as_slice(), refs[1].norm),
        (&[1][..], "a")
    );
    assert_eq!(refs[2].positions, [0, 2]);
    assert_eq!(refs[2].texts, ["B", "B!"]);
    let none: [&str; 0] = [];
    assert!(pack_refs(&[], &none, &[], &none).is_empty());
    assert!(read_refs(b"").unwrap().is_empty());
}

#[test]
fn split_refs_divides_by_content_partition_keeping_order() {
    let hashes: Vec<String> = (0..40).map(|i| format!("{i:064x}")).collect();
    let norms = hashes.clone();
    let packed = pack_refs(&hashes, &hashes, &norms, &[] as &[String]);
    let groups = split_packed(&packed, 4).unwrap();
    let mut seen = 0;
    for (partition, part) in &groups {
        for r in read_refs(part).unwrap() {
            assert_eq!(content_partition(r.content_hash, 4), *partition);
            let expected = positive_murmur2(content_id(r.content_hash).as_bytes()) as usize % 4;
            assert_eq!(*partition, expected);
            seen += 1;
        }
    }
    assert_eq!(seen, 40);
    let firsts: Vec<usize> = groups.iter().map(|g| g.0).collect();
    let mut sorted = firsts.clone();
    sorted.dedup();
    assert_eq!(firsts.len(), sorted.len(), "one list a partition");
    assert_eq!(split_packed(&packed, 1).unwrap().len(), 1);
    assert!(split_packed(b"", 4).unwrap().is_empty());
    assert!(split_packed(&packed[..packed.len() - 3], 4).is_err());
}
