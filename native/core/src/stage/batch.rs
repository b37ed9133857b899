//! The batch (`streamdedup.core.stages.content.ContentStage.handle`): requests addressed by content id resolved,
//! the batch's records and refs read at once, each message applied to its content's work, new texts started in
//! their bands, each content settled, and the writes.

use std::collections::BTreeSet;

use indexmap::IndexMap;
use rustc_hash::{FxBuildHasher, FxHashMap as HashMap, FxHashSet as HashSet};

use crate::keys::{content_id, id_key, ref_key, CONTENT_ID_CHARS};
use crate::model::{ContentIds, ContentRecord, Info, Role};
use crate::mp::{Reader, Writer};
use crate::shingles::{agreements, estimate};

use super::messages::{by_id, In, VerifyRequest};
use super::work::{dead_info, Ids, Work};
use super::{Batch, Host, VerifyResultOut, Writes};

/// The messages of a batch, with the host's texts.
type Messages<H> = Vec<In<<H as Host>::Text>>;
/// The batch's works by content hash, in order of first message.
type Works = IndexMap<String, Box<Work>, FxBuildHasher>;
/// The batch's stored records by content hash, each with the size it was stored at (what its encoding needs
/// again, about).
type Records = HashMap<String, (Box<ContentRecord>, usize)>;
/// The works of a batch after its messages: the works, the sizes their records were stored at, and the contents
/// that were only asked to verify.
type Applied = (Works, HashMap<String, usize>, HashSet<String>);

/// The answer to a request that is not verified: from a content that is not there (`info` dead), or that its
/// sketch dismisses (`jaccard` the sketches' estimate).
fn unanswered<'a, I>(
    request: &'a VerifyRequest,
    content_hash: &'a str,
    jaccard: f64,
    info: &'a I,
) -> VerifyResultOut<'a, I> {
    VerifyResultOut {
        content_hash: &request.sender,
        sender: content_hash,
        epoch: request.epoch,
        jaccard,
        edge: false,
        info,
        conflict: None,
        text: "",
        decision: None,
        report: None,
    }
}

impl<H: Host> Batch<'_, H> {
    fn prefetch_ids(&mut self, ids: &mut Ids, keys: Vec<String>) -> Result<(), H::Error> {
        let mut seen = HashSet::default();
        let wanted: Vec<String> = keys
            .into_iter()
            .filter(|k| !ids.cache.contains_key(k) && seen.insert(k.clone()))
            .collect();
        let raws = self.read_many(&wanted)?;
        for (key, raw) in wanted.into_iter().zip(raws) {
            let entry =
                match raw {
                    Some(raw) => {
                        let mut r = Reader::new(raw.as_ref());
                        Some(ContentIds::decode(&mut r).map_err(|e| {
                            H::error(format!("malformed ids record at {key:?}: {e}"))
                        })?)
                    }
                    None => None,
                };
            ids.cache.insert(key, entry);
        }
        Ok(())
    }

    /// `ContentStage._resolve`.
    fn resolve(&mut self, messages: Messages<H>, ids: &mut Ids) -> Result<Messages<H>, H::Error> {
        let keys = messages
            .iter()
            .filter(|m| by_id(m))
            .map(|m| id_key(m.key()))
            .collect();
        self.prefetch_ids(ids, keys)?;
        let fields = self.params.num_perm;
        let needed = self.params.dismiss_below;
        let mut resolved = Vec::with_capacity(messages.len());
        for message in messages {
            let In::Verify(request) = &message else {
                resolved.push(message);
                continue;
            };
            if request.content_hash.len() != CONTENT_ID_CHARS {
                resolved.push(message);
                continue;
            }
            let found = ids
                .cache
                .get(&id_key(&request.content_hash))
                .cloned()
                .flatten();
            let found = match found {
                Some(f) if !f.hashes.is_empty() => f,
                _ => {
                    let dead = self.host.info(&dead_info(0))?;
                    self.host.verify_result(&unanswered(
                        request,
                        &request.content_hash,
                        0.0,
                        &dead,
                    ))?;
                    continue;
                }
            };
            let theirs: &[u8] = if request.decision.is_none() {
                &request.sketch
            } else {
                b""
            };
            for (index, content_hash) in found.hashes.iter().enumerate() {
                let mine: &[u8] = if !theirs.is_empty() && index < found.sketches.len() {
                    &found.sketches[index]
                } else {
                    b""
                };
                if !mine.is_empty() && mine.len() == theirs.len() {
                    let agreed = agreements(mine, theirs, fields);
                    if agreed < needed as i64 {
                        let unread = self.host.info(&Info {
                            seq: 0,
                            role: Role::Pending,
                            rank: None,
                            readers: Vec::new(),
                            target: String::new(),
                        })?;
                        let estimated = estimate(agreed, fields);
                        self.host.verify_result(&unanswered(
                            request,
                            content_hash,
                            estimated,
                            &unread,
                        ))?;
                        continue;
                    }
                }
                let mut whole = request.clone();
                whole.content_hash = content_hash.clone();
                resolved.push(In::Verify(whole));
            }
        }
        Ok(resolved)
    }

    /// `ContentStage._index`.
    fn index(
        &mut self,
        works: &IndexMap<String, Box<Work>, FxBuildHasher>,
        keys: &[String],
        ids: &mut Ids,
    ) -> Result<(), H::Error> {
        let pairs: Vec<(String, &Work)> = keys
            .iter()
            .map(|k| (id_key(content_id(k)), &*works[k]))
            .collect();
        self.prefetch_ids(ids, pairs.iter().map(|(k, _)| k.clone()).collect())?;
        for (index_key, work) in pairs {
            let entry = ids
                .cache
                .get_mut(&index_key)
                .expect("prefetched")
                .get_or_insert_with(ContentIds::default);
            if entry.sketches.len() < entry.hashes.len() {
                let missing = entry.hashes.len() - entry.sketches.len();
                entry
                    .sketches
                    .extend(std::iter::repeat_n(Vec::new(), missing));
            }
            match entry.hashes.iter().position(|h| *h == work.key) {
                None => {
                    entry.hashes.push(work.key.clone());
                    entry.sketches.push(work.record.sketch.clone());
                    ids.dirty.insert(index_key);
                }
                Some(at) if entry.sketches[at].is_empty() => {
                    entry.sketches[at] = work.record.sketch.clone();
                    ids.dirty.insert(index_key);
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// `ContentStage.handle`: apply the batch and return its writes.
    pub(super) fn run(&mut self, messages: Messages<H>) -> Result<Writes, H::Error> {
        let mut ids = Ids {
            cache: HashMap::default(),
            dirty: BTreeSet::new(),
        };
        let messages = if messages.iter().any(by_id) {
            self.resolve(messages, &mut ids)?
        } else {
            messages
        };
        let (records, distinct) = self.load(&messages)?;
        let (mut works, sizes, only_asked) = self.apply_messages(&messages, records, distinct)?;
        let born: Vec<String> = works
            .values()
            .filter(|w| w.born)
            .map(|w| w.key.clone())
            .collect();
        if !born.is_empty() {
            self.start(&mut works, &born)?;
            let indexed: Vec<String> = born
                .into_iter()
                .filter(|k| works[k].record.indexed)
                .collect();
            self.index(&works, &indexed, &mut ids)?;
        }
        self.prefetch_told(&messages, &works)?;
        let mut marked: BTreeSet<String> = BTreeSet::new();
        for (key, work) in works.iter_mut() {
            if only_asked.contains(key) && self.answer_unchanged(work)? {
                continue;
            }
            self.settle(work)?;
            marked.insert(key.clone());
        }
        Ok(self.writes(&works, marked, &sizes, ids))
    }

    /// Read the records of the batch's contents, and the refs that change with those of the canonical positions;
    /// the records, and how many contents the batch has.
    fn load(&mut self, messages: &Messages<H>) -> Result<(Records, usize), H::Error> {
        let mut keys: Vec<String> = Vec::new();
        let mut seen = HashSet::default();
        for m in messages {
            if seen.insert(m.key()) {
                keys.push(m.key().to_owned());
            }
        }
        let raws = self.read_many(&keys)?;
        let distinct = keys.len();
        let mut records: Records =
            HashMap::with_capacity_and_hasher(keys.len(), Default::default());
        for (key, raw) in keys.into_iter().zip(raws) {
            if let Some(raw) = raw {
                let raw = raw.as_ref();
                let mut r = Reader::new(raw);
                let record = ContentRecord::decode(&mut r)
                    .map_err(|e| H::error(format!("malformed content record at {key:?}: {e}")))?;
                records.insert(key, (Box::new(record), raw.len()));
            }
        }
        let mut wanted: Vec<String> = Vec::new();
        let mut seen_refs = HashSet::default();
        for m in messages {
            if let In::Ref(u) = m {
                let k = ref_key(&u.content_hash, &u.source_id);
                if seen_refs.insert(k.clone()) {
                    wanted.push(k);
                }
            }
        }
        for m in messages {
            if let In::Ref(u) = m {
                if let Some(Some((source_id, _))) =
                    records.get(&u.content_hash).map(|r| &r.0.canonical_ref)
                {
                    let k = ref_key(&u.content_hash, source_id);
                    if seen_refs.insert(k.clone()) {
                        wanted.push(k);
                    }
                }
            }
        }
        self.prefetch_refs(wanted)?;
        Ok((records, distinct))
    }

    /// Apply each message to its content's work: the works, the sizes their records were stored at, and the
    /// contents that were only asked to verify.
    fn apply_messages(
        &mut self,
        messages: &Messages<H>,
        mut records: Records,
        distinct: usize,
    ) -> Result<Applied, H::Error> {
        let mut works: Works = IndexMap::with_capacity_and_hasher(distinct, Default::default());
        let mut sizes: HashMap<String, usize> = HashMap::default();
        let mut only_asked: HashSet<String> = HashSet::default();
        for message in messages {
            let key = message.key();
            let is_request = matches!(message, In::Verify(_));
            if !works.contains_key(key) {
                let record = match records.remove(key) {
                    Some((record, size)) => {
                        sizes.insert(key.to_owned(), size);
                        record
                    }
                    None => Box::default(),
                };
                works.insert(key.to_owned(), Box::new(Work::new(key.to_owned(), record)));
                if is_request {
                    only_asked.insert(key.to_owned());
                }
            } else if !is_request {
                only_asked.remove(key);
            }
            let work = works.get_mut(key).expect("inserted above");
            match message {
                In::Ref(m) => self.on_ref_update(work, m)?,
                In::Ack(m) => self.on_band_answer(work, m),
                In::Verify(m) => self.on_verify_request(work, m)?,
                In::Result(m) => self.on_verify_result(work, m)?,
                In::Decision(m) => {
                    self.take_decision(work, &m.other, Some(&m.mark), true)?;
                }
                In::Neighbor(m) => self.on_neighbor_update(work, m),
            }
        }
        Ok((works, sizes, only_asked))
    }

    /// A content that heard from the band stage or a verification may now tell its sources of a new chunk
    /// (`tell_sources`), which reads the ref of each source it lists: read those of the batch in one call.
    fn prefetch_told(&mut self, messages: &Messages<H>, works: &Works) -> Result<(), H::Error> {
        let mut told: Vec<String> = Vec::new();
        let mut seen_told = HashSet::default();
        for message in messages {
            if matches!(message, In::Ack(_) | In::Result(_)) && seen_told.insert(message.key()) {
                for r in &works[message.key()].record.top {
                    told.push(ref_key(message.key(), &r.source_id));
                }
            }
        }
        told.sort_unstable();
        told.dedup();
        self.prefetch_refs(told)
    }

    /// The batch's writes: the records of the contents it settled, then the refs, then the content ids.
    fn writes(
        &mut self,
        works: &Works,
        marked: BTreeSet<String>,
        sizes: &HashMap<String, usize>,
        ids: Ids,
    ) -> Writes {
        let mut writes = Vec::with_capacity(marked.len() + self.refs_dirty.len() + ids.dirty.len());
        for key in marked {
            let mut w = Writer::with_capacity(sizes.get(&key).copied().unwrap_or(0).max(768) + 256);
            works[&key].record.encode(&mut w);
            writes.push((key, Some(w.out)));
        }
        for key in std::mem::take(&mut self.refs_dirty) {
            let value = self.refs[&key].as_ref().map(|entry| {
                let mut w = Writer::with_capacity(128);
                entry.encode(&mut w);
                w.out
            });
            writes.push((key, value));
        }
        for key in ids.dirty {
            let value = ids.cache[&key].as_ref().map(|entry| {
                let mut w = Writer::with_capacity(64);
                entry.encode(&mut w);
                w.out
            });
            writes.push((key, value));
        }
        writes
    }
}
