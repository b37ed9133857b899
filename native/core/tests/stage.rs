//! The content stage's batch with a fake host: what it writes, sends and outputs as a content is born, decided
//! and dies, and as a second copy of its text verifies against it.

use std::collections::BTreeMap;
use std::rc::Rc;

use streamdedup_kernels::keys::{content_id, id_key, ref_key};
use streamdedup_kernels::mapping::read_statuses;
use streamdedup_kernels::model::{ContentRecord, Info, MemberReport, RefEntry, Role, SourceAttrs};
use streamdedup_kernels::mp::Reader;
use streamdedup_kernels::policy::{Criterion, Policy};
use streamdedup_kernels::signature::{Features, Scheme};
use streamdedup_kernels::stage::{
    apply, BandAck, Host, In, OutputValue, Params, RefUpdate, VerifyRequest, VerifyRequestOut,
    VerifyResultOut,
};

/// What the fake host saw, in order.
#[derive(Debug, PartialEq)]
enum Sent {
    Band {
        join: bool,
        content_hash: String,
        epoch: i64,
        bands: usize,
    },
    Request {
        to: String,
        from: String,
    },
    Result {
        to: String,
        from: String,
        jaccard: f64,
        edge: bool,
    },
    Neighbor {
        to: String,
        from: String,
        role: Role,
    },
    Output {
        topic: String,
        key: String,
        value: String,
    },
    Statuses {
        source_id: String,
        chunks: Vec<(String, String)>,
    },
}

struct FakeHost {
    store: BTreeMap<String, Vec<u8>>,
    scheme: Scheme,
    sent: Vec<Sent>,
    /// The requests sent, as the messages their receivers take.
    requests: Vec<VerifyRequest>,
}

impl Host for FakeHost {
    type Error = String;
    type Text = String;
    type Bytes = Vec<u8>;
    type Info = Info;

    fn error(message: String) -> String {
        message
    }

    fn read(&mut self, keys: &[String]) -> Result<Vec<Option<Vec<u8>>>, String> {
        Ok(keys.iter().map(|k| self.store.get(k).cloned()).collect())
    }

    fn scan(&mut self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, String> {
        Ok(self
            .store
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }

    fn normalize(&mut self, text: &str) -> Result<String, String> {
        Err(format!("not ASCII: {text}"))
    }

    fn fact_tokens(&mut self, norm: &str) -> Result<Vec<String>, String> {
        Ok(norm
            .split(' ')
            .filter(|w| w.bytes().all(|b| b.is_ascii_digit()))
            .map(str::to_owned)
            .collect())
    }

    fn describe_fact_difference(
        &mut self,
        low: &[String],
        high: &[String],
    ) -> Result<String, String> {
        Ok(format!("{low:?} / {high:?}"))
    }

    fn format_timestamp(&mut self, micros: i64) -> Result<String, String> {
        Err(format!("out of range: {micros}"))
    }

    fn features(
        &mut self,
        texts: &[&str],
        bands: usize,
        rows: usize,
        min: i64,
    ) -> Result<Vec<Features>, String> {
        Ok(self.scheme.features(texts, bands, rows, min))
    }

    fn info(&mut self, info: &Info) -> Result<Info, String> {
        Ok(info.clone())
    }

    fn band(
        &mut self,
        join: bool,
        content_hash: &str,
        epoch: i64,
        bands: &[String],
    ) -> Result<(), String> {
        self.sent.push(Sent::Band {
            join,
            content_hash: content_hash.to_owned(),
            epoch,
            bands: bands.len(),
        });
        Ok(())
    }

    fn verify_request(&mut self, m: &VerifyRequestOut<'_, Info>) -> Result<(), String> {
        self.sent.push(Sent::Request {
            to: m.content_hash.to_owned(),
            from: m.sender.to_owned(),
        });
        self.requests.push(VerifyRequest {
            content_hash: m.content_hash.to_owned(),
            sender: m.sender.to_owned(),
            epoch: m.epoch,
            norm: m.norm.to_owned(),
            text: m.text.to_owned(),
            info: m.info.clone(),
            decision: m.decision.cloned(),
            report: m.report.cloned(),
            sketch: m.sketch.to_vec(),
        });
        Ok(())
    }

    fn verify_result(&mut self, m: &VerifyResultOut<'_, Info>) -> Result<(), String> {
        self.sent.push(Sent::Result {
            to: m.content_hash.to_owned(),
            from: m.sender.to_owned(),
            jaccard: m.jaccard,
            edge: m.edge,
        });
        Ok(())
    }

    fn neighbor_update(
        &mut self,
        content_hash: &str,
        sender: &str,
        info: &Info,
        _report: Option<&MemberReport>,
    ) -> Result<(), String> {
        self.sent.push(Sent::Neighbor {
            to: content_hash.to_owned(),
            from: sender.to_owned(),
            role: info.role,
        });
        Ok(())
    }

    fn output(&mut self, topic: &str, key: &str, value: OutputValue<'_>) -> Result<(), String> {
        let value = match value {
            OutputValue::Tombstone => "None".to_owned(),
            OutputValue::Audit(a) => format!("audit {} {}", a.action, a.reason),
            OutputValue::Review(r) => format!("review {}", r.reason),
            OutputValue::ChunkJson(json) => String::from_utf8(json.to_vec()).unwrap(),
            OutputValue::Chunk(view) => format!("chunk object {}", view.key),
        };
        self.sent.push(Sent::Output {
            topic: topic.to_owned(),
            key: key.to_owned(),
            value,
        });
        Ok(())
    }

    fn source_statuses(&mut self, source_id: &str, packed: &[u8]) -> Result<(), String> {
        let chunks = read_statuses(packed)
            .unwrap()
            .iter()
            .map(|s| (s.content_hash.to_owned(), s.chunk_id.to_owned()))
            .collect();
        self.sent.push(Sent::Statuses {
            source_id: source_id.to_owned(),
            chunks,
        });
        Ok(())
    }
}

const BANDS: usize = 4;

fn params() -> Params {
    Params {
        threshold: 0.8,
        min_shingles: 2,
        max_candidates: 10,
        max_chunk_sources: 3,
        shingle_size: 2,
        num_perm: 16,
        bands: BANDS,
        rows: 4,
        dismiss_below: 0,
    }
}

fn policy() -> Policy {
    Policy {
        criteria: vec![
            Criterion::Authority,
            Criterion::ModifiedAt,
            Criterion::Length,
            Criterion::SourceId,
        ],
    }
}

fn host() -> FakeHost {
    FakeHost {
        store: BTreeMap::new(),
        scheme: Scheme::new(16, 1, 2).unwrap(),
        sent: Vec::new(),
        requests: Vec::new(),
    }
}

const TEXT: &str = "the quick brown fox jumps over the lazy dog";

fn hash(n: u8) -> String {
    format!("{n:02x}").repeat(32)
}

fn attrs() -> Rc<SourceAttrs> {
    Rc::new(SourceAttrs {
        acl: vec!["*".into()],
        modified_at: 86_400_000_000,
        authority: 0,
        uri: Some("https://docs.example/a".into()),
        title: None,
        metadata: None,
        preferred: false,
        outdated_by: String::new(),
    })
}

fn upsert(content_hash: &str, source_id: &str, version: i64, positions: Vec<i64>) -> In<String> {
    let live = !positions.is_empty();
    In::Ref(RefUpdate {
        content_hash: content_hash.to_owned(),
        source_id: source_id.to_owned(),
        version,
        texts: if live {
            vec![TEXT.to_owned()]
        } else {
            Vec::new()
        },
        norm: if live { TEXT.to_owned() } else { String::new() },
        attrs: live.then(attrs),
        positions,
        attrs_only: false,
        attrs_seq: 0,
    })
}

/// Run a batch, store its writes, and return what it sent.
fn run(host: &mut FakeHost, messages: Vec<In<String>>) -> Vec<Sent> {
    let writes = apply(host, &params(), &policy(), messages).unwrap();
    for (key, value) in writes {
        match value {
            Some(v) => host.store.insert(key, v),
            None => host.store.remove(&key),
        };
    }
    std::mem::take(&mut host.sent)
}

fn record(host: &FakeHost, content_hash: &str) -> ContentRecord {
    ContentRecord::decode(&mut Reader::new(&host.store[content_hash])).unwrap()
}

#[test]
fn a_new_text_joins_its_bands_then_becomes_canonical_then_dies() {
    let mut host = host();
    let h = hash(1);
    let sent = run(&mut host, vec![upsert(&h, "doc", 1, vec![0])]);
    assert_eq!(
        sent,
        [Sent::Band {
            join: true,
            content_hash: h.clone(),
            epoch: 1,
            bands: BANDS
        }]
    );
    let born = record(&host, &h);
    assert!(born.alive && born.indexed && born.has_text);
    assert_eq!(
        (born.role, born.positions, born.pending_bands.len()),
        (Role::Pending, 1, BANDS)
    );
    assert_eq!(born.text, TEXT);
    assert!(
        born.norm_stored.is_empty(),
        "the text is its own normalized form"
    );
    let entry = RefEntry::decode(&mut Reader::new(&host.store[&ref_key(&h, "doc")])).unwrap();
    assert_eq!((entry.version, entry.positions.as_slice()), (1, &[0][..]));
    assert!(host.store.contains_key(&id_key(content_id(&h))));

    // The band stage answers every band, with no candidates: the text is canonical.
    let ack = In::Ack(BandAck {
        content_hash: h.clone(),
        epoch: 1,
        bands: born.pending_bands.clone(),
        candidates: Vec::new(),
    });
    let sent = run(&mut host, vec![ack]);
    assert_eq!(sent.len(), 2, "{sent:?}");
    let Sent::Output { topic, key, value } = &sent[0] else {
        panic!("{sent:?}")
    };
    assert_eq!(
        (topic.as_str(), key.as_str()),
        ("canonical-chunks", h.as_str())
    );
    assert!(value.starts_with("{\"schema\":\"streamdedup.chunk/v2\",\"chunk_id\":\""));
    assert!(value.contains("\"modified_at\":\"1970-01-02T00:00:00Z\""));
    assert!(value.ends_with(",\"source_count\":1,\"revision\":1}"));
    assert_eq!(
        sent[1],
        Sent::Statuses {
            source_id: "doc".into(),
            chunks: vec![(h.clone(), "=".into())]
        }
    );
    let decided = record(&host, &h);
    assert_eq!((decided.role, decided.revision), (Role::Canonical, 1));
    assert_eq!(decided.canonical_ref, Some(("doc".to_owned(), 0)));

    // Its only source drops it: it leaves its bands, its chunk is retracted and gone.
    let sent = run(&mut host, vec![upsert(&h, "doc", 2, Vec::new())]);
    let topics: Vec<String> = sent
        .iter()
        .map(|s| match s {
            Sent::Band { join, .. } => format!("band {join}"),
            Sent::Output { topic, value, .. } => format!("{topic}: {value}"),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        topics,
        [
            "band false",
            "audit: audit retract no live source",
            "canonical-chunks: None"
        ]
    );
    let dead = record(&host, &h);
    assert_eq!(
        (dead.role, dead.alive, dead.positions),
        (Role::Dead, false, 0)
    );
    assert_eq!(dead.text, TEXT, "the text stays for a next life");
}

#[test]
fn an_older_version_of_a_source_changes_nothing() {
    let mut host = host();
    let h = hash(2);
    run(&mut host, vec![upsert(&h, "doc", 5, vec![0])]);
    let before = host.store.clone();
    let sent = run(&mut host, vec![upsert(&h, "doc", 4, vec![0, 1])]);
    assert!(sent.is_empty(), "{sent:?}");
    assert_eq!(record(&host, &h).positions, 1);
    assert_eq!(host.store[&ref_key(&h, "doc")], before[&ref_key(&h, "doc")]);
}

#[test]
fn a_band_candidate_is_asked_to_verify_and_answers() {
    let mut host = host();
    let (a, b) = (hash(3), hash(4));
    run(&mut host, vec![upsert(&a, "one", 1, vec![0])]);
    let bands_a = record(&host, &a).pending_bands;
    run(
        &mut host,
        vec![In::Ack(BandAck {
            content_hash: a.clone(),
            epoch: 1,
            bands: bands_a,
            candidates: Vec::new(),
        })],
    );
    // The same text from another source (another content hash, for the test): a candidate of `a`.
    run(&mut host, vec![upsert(&b, "two", 1, vec![0])]);
    let bands_b = record(&host, &b).pending_bands;
    let sent = run(
        &mut host,
        vec![In::Ack(BandAck {
            content_hash: b.clone(),
            epoch: 1,
            bands: bands_b,
            candidates: vec![(content_id(&a).to_owned(), BANDS as i64)],
        })],
    );
    assert!(
        sent.contains(&Sent::Request {
            to: content_id(&a).to_owned(),
            from: b.clone()
        }),
        "{sent:?}"
    );
    assert_eq!(record(&host, &b).pending_verify, [content_id(&a)]);
    // Addressed by content id, the request reaches `a`, which finds the same text: an edge at 1.0.
    let requests = std::mem::take(&mut host.requests);
    assert_eq!(requests.len(), 1);
    let sent = run(&mut host, requests.into_iter().map(In::Verify).collect());
    assert!(
        sent.contains(&Sent::Result {
            to: b.clone(),
            from: a.clone(),
            jaccard: 1.0,
            edge: true
        }),
        "{sent:?}"
    );
    let verified = record(&host, &a);
    assert_eq!(verified.neighbors.len(), 1);
    assert_eq!(verified.neighbors[&b].jaccard, 1.0);
}

#[test]
fn a_malformed_record_is_the_hosts_error() {
    let mut host = host();
    let h = hash(5);
    host.store.insert(h.clone(), vec![0xc1]);
    let err = apply(
        &mut host,
        &params(),
        &policy(),
        vec![upsert(&h, "doc", 1, vec![0])],
    )
    .err()
    .unwrap();
    assert!(err.starts_with("malformed content record at"), "{err}");
}

#[test]
fn a_chunk_only_outdated_sources_hold_says_so() {
    let mut host = host();
    let h = hash(3);
    let In::Ref(mut update) = upsert(&h, "travel-v1", 1, vec![0]) else {
        unreachable!()
    };
    update.attrs = Some(Rc::new(SourceAttrs {
        outdated_by: "travel-v2".into(),
        ..(*attrs()).clone()
    }));
    run(&mut host, vec![In::Ref(update)]);
    let born = record(&host, &h);
    let ack = In::Ack(BandAck {
        content_hash: h.clone(),
        epoch: 1,
        bands: born.pending_bands.clone(),
        candidates: Vec::new(),
    });
    let sent = run(&mut host, vec![ack]);
    let Sent::Output { topic, value, .. } = &sent[0] else {
        panic!("{sent:?}")
    };
    assert_eq!(topic, "canonical-chunks");
    assert!(
        value.ends_with(
            ",\"source_count\":1,\"current\":false,\"outdated_by\":\"travel-v2\",\"revision\":1}"
        ),
        "{value}"
    );
    assert_eq!(record(&host, &h).top[0].attrs.outdated_by, "travel-v2");
}
