//! The content stage's records, encoded as msgspec encodes them.

use std::rc::Rc;

use indexmap::IndexMap;
use streamdedup_kernels::model::{
    reencode, ChunkStatus, Conflict, ContentIds, ContentRecord, Info, MemberReport, NeighborEntry,
    PairMark, Rank, Ref, RefEntry, Role, SourceAttrs,
};
use streamdedup_kernels::mp::{Reader, Value, Writer};

fn attrs() -> Rc<SourceAttrs> {
    Rc::new(SourceAttrs {
        acl: vec!["alice".into(), "*".into()],
        modified_at: 1_700_000_000_000_000,
        authority: 3,
        uri: Some("https://example.com/a".into()),
        title: None,
        metadata: Some(Value::Map(vec![(Value::Str("k".into()), Value::Int(1))])),
        preferred: true,
        outdated_by: "policies/a-v2".into(),
    })
}

fn rank(h: &str) -> Rank {
    Rank {
        authority: 1,
        modified_at: 2,
        length: 3,
        source_id: "s".into(),
        content_hash: h.into(),
        preferred: false,
        outdated: true,
    }
}

fn info() -> Info {
    Info {
        seq: 4,
        role: Role::Member,
        rank: Some(rank("h1")),
        readers: vec!["bob".into()],
        target: "h0".into(),
    }
}

fn report() -> MemberReport {
    MemberReport {
        jaccard: 0.875,
        refs: vec![Ref {
            source_id: "doc".into(),
            position: 2,
            attrs: attrs(),
            text: String::new(),
        }],
        count: 3,
        rank: Some(rank("h1")),
    }
}

/// A record with every field away from its default.
fn full_record() -> ContentRecord {
    let mut principals = IndexMap::new();
    principals.insert("alice".to_owned(), 2);
    let mut candidates = IndexMap::new();
    candidates.insert("abcd".to_owned(), 5);
    let mut neighbors = IndexMap::new();
    neighbors.insert(
        "h2".to_owned(),
        NeighborEntry {
            jaccard: 0.9,
            info: info(),
        },
    );
    let mut members = IndexMap::new();
    members.insert("h3".to_owned(), report());
    let mut decisions = IndexMap::new();
    decisions.insert(
        "h4".to_owned(),
        PairMark {
            kind: "merge".into(),
            version: 7,
        },
    );
    ContentRecord {
        seq: 1,
        epoch: 2,
        alive: true,
        has_text: true,
        norm_stored: "a b".into(),
        text: "A, b".into(),
        length: 3,
        indexed: true,
        positions: 2,
        principals,
        top: vec![Ref {
            source_id: "doc".into(),
            position: 0,
            attrs: attrs(),
            text: "A,  b".into(),
        }],
        pending_bands: vec!["000abc".into()],
        candidates,
        sketch: vec![1, 2, 3],
        pending_verify: vec!["h5".into()],
        checked: vec!["h6".into()],
        neighbors,
        role: Role::Canonical,
        target: "h7".into(),
        jaccard: 0.5,
        canonical_ref: Some(("doc".into(), 0)),
        members,
        sent_info: Some(info()),
        sent_report: Some(report()),
        sent_status: Some(ChunkStatus {
            chunk_id: "h0".into(),
            near: true,
            jaccard: 0.8,
            canonical_ref: None,
        }),
        record_digest: "ff".into(),
        revision: 9,
        flagged: vec!["h8".into()],
        conflicted: true,
        conflict: Some(Conflict {
            content_hash: "h9".into(),
            jaccard: 0.95,
            rank: rank("h9"),
            text: "t".into(),
            facts: vec!["42".into()],
        }),
        flag_partner: "h9".into(),
        raised: vec!["h9".into()],
        decisions,
    }
}

fn encoded(record: &ContentRecord) -> Vec<u8> {
    let mut w = Writer::default();
    record.encode(&mut w);
    w.out
}

/// The keys of an encoded map, in order.
fn map_keys(data: &[u8]) -> Vec<String> {
    let mut r = Reader::new(data);
    let n = r.map().unwrap();
    (0..n)
        .map(|_| {
            let key = r.string().unwrap();
            r.skip().unwrap();
            key
        })
        .collect()
}

#[test]
fn a_full_record_round_trips() {
    let record = full_record();
    let data = encoded(&record);
    let back = ContentRecord::decode(&mut Reader::new(&data)).unwrap();
    assert_eq!(back, record);
    assert_eq!(reencode("content", &data).unwrap(), data);
}

#[test]
fn a_record_encodes_its_fields_in_the_order_it_lists_them() {
    let data = encoded(&full_record());
    assert_eq!(map_keys(&data), ContentRecord::FIELDS);
    assert_eq!(
        data[0], 0xde,
        "33 fields: a map16 header, as msgspec reserves it"
    );
}

#[test]
fn a_default_record_leaves_out_every_default() {
    let data = encoded(&ContentRecord::default());
    assert_eq!(data, [0xde, 0, 0]);
    let record = ContentRecord {
        jaccard: 1.0,
        role: Role::Pending,
        seq: 3,
        ..ContentRecord::default()
    };
    assert_eq!(map_keys(&encoded(&record)), ["seq"]);
}

#[test]
fn source_attrs_encode_their_fields_in_order_without_defaults() {
    let mut w = Writer::default();
    attrs().encode(&mut w);
    assert_eq!(
        map_keys(&w.out),
        [
            "acl",
            "modified_at",
            "authority",
            "uri",
            "metadata",
            "preferred",
            "outdated_by"
        ]
    );
    let all: Vec<&str> = SourceAttrs::FIELDS.to_vec();
    assert_eq!(
        all,
        [
            "acl",
            "modified_at",
            "authority",
            "uri",
            "title",
            "metadata",
            "preferred",
            "outdated_by"
        ]
    );
    assert_eq!(
        SourceAttrs::decode(&mut Reader::new(&w.out)).unwrap(),
        *attrs()
    );
}

#[test]
fn unknown_fields_are_skipped_and_required_ones_checked() {
    let mut w = Writer::default();
    w.map(2);
    w.str("future");
    w.strings(&["x".to_owned()]);
    w.str("seq");
    w.int(5);
    let record = ContentRecord::decode(&mut Reader::new(&w.out)).unwrap();
    assert_eq!(record.seq, 5);
    let mut w = Writer::default();
    w.map(1);
    w.str("acl");
    w.strings(&[]);
    let err = SourceAttrs::decode(&mut Reader::new(&w.out)).unwrap_err();
    assert_eq!(err.to_string(), "expected the attributes' modified_at");
}

#[test]
fn array_structs_write_every_field_they_list() {
    let arrays: Vec<(Vec<u8>, usize)> = vec![
        (with(|w| rank("h").encode(w)), Rank::FIELDS.len()),
        (with(|w| info().encode(w)), Info::FIELDS.len()),
        (with(|w| report().encode(w)), MemberReport::FIELDS.len()),
        (
            with(|w| RefEntry::default().encode(w)),
            RefEntry::FIELDS.len(),
        ),
        (
            with(|w| ContentIds::default().encode(w)),
            ContentIds::FIELDS.len(),
        ),
        (
            with(|w| report().refs[0].encode(w, false)),
            Ref::FIELDS.len(),
        ),
        (
            with(|w| report().refs[0].encode(w, true)),
            Ref::TOP_FIELDS.len(),
        ),
        (
            with(|w| {
                PairMark {
                    kind: "merge".into(),
                    version: 1,
                }
                .encode(w)
            }),
            PairMark::FIELDS.len(),
        ),
    ];
    for (data, fields) in arrays {
        assert_eq!(Reader::new(&data).array().unwrap(), fields);
    }
}

fn with(f: impl FnOnce(&mut Writer)) -> Vec<u8> {
    let mut w = Writer::default();
    f(&mut w);
    w.out
}

#[test]
fn shorter_and_longer_array_structs_read_as_msgspec_reads_them() {
    // An info of two fields: the rest default.
    let data = with(|w| {
        w.array(2);
        w.int(3);
        w.str("dead");
    });
    let found = Info::decode(&mut Reader::new(&data)).unwrap();
    assert_eq!(
        (found.seq, found.role, found.rank, found.target.as_str()),
        (3, Role::Dead, None, "")
    );
    // A rank of six fields (written before `outdated`): current.
    let data = with(|w| {
        w.array(6);
        for v in [1, 2, 3] {
            w.int(v);
        }
        w.str("s");
        w.str("h");
        w.boolean(true);
    });
    let mut r = Reader::new(&data);
    let found = Rank::decode(&mut r).unwrap();
    assert!(found.preferred && !found.outdated);
    assert!(r.finished());
    // A rank of seven fields, the seventh `outdated`; an eighth field is ignored.
    let data = with(|w| {
        w.array(8);
        for v in [1, 2, 3] {
            w.int(v);
        }
        w.str("s");
        w.str("h");
        w.boolean(false);
        w.boolean(true);
        w.str("later");
    });
    let mut r = Reader::new(&data);
    let found = Rank::decode(&mut r).unwrap();
    assert!(!found.preferred && found.outdated);
    assert!(r.finished());
    // A rank of four fields lacks a required one.
    let data = with(|w| {
        w.array(4);
        for v in [1, 2, 3, 4] {
            w.int(v);
        }
    });
    assert!(Rank::decode(&mut Reader::new(&data)).is_err());
}

#[test]
fn ref_entries_and_ids_round_trip() {
    let entry = RefEntry {
        version: 3,
        positions: vec![0, 4],
        texts: vec!["a".into(), "b".into()],
        attrs: Some(attrs()),
        attrs_seq: 2,
    };
    let data = with(|w| entry.encode(w));
    assert_eq!(RefEntry::decode(&mut Reader::new(&data)).unwrap(), entry);
    assert_eq!(reencode("ref", &data).unwrap(), data);
    // An empty array is a default entry (msgspec's omit_defaults reads back the same).
    assert_eq!(
        RefEntry::decode(&mut Reader::new(&[0x90])).unwrap(),
        RefEntry::default()
    );
    let ids = ContentIds {
        hashes: vec!["h1".into(), "h2".into()],
        sketches: vec![vec![1, 2], vec![]],
    };
    let data = with(|w| ids.encode(w));
    assert_eq!(ContentIds::decode(&mut Reader::new(&data)).unwrap(), ids);
    assert!(reencode("nothing", &data).is_err());
    let mut trailing = data.clone();
    trailing.push(0xc0);
    assert!(reencode("ids", &trailing).is_err());
}
