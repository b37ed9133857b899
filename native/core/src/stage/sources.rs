//! A content's sources (`streamdedup.core.stages.content_sources.SourcePositions`): the state the batch reads and
//! writes of them, and its first positions in the canonical policy's order; with the batch's texts computed once.

use std::collections::BTreeMap;
use std::rc::Rc;

use indexmap::IndexMap;

use crate::keys::{ref_key, ref_prefix};
use crate::model::{Ref, RefEntry};
use crate::shingles::Shingles;
use crate::text::normalized_ascii;

use super::messages::RefUpdate;
use super::work::{count, decode_ref, positions_of, Work};
use super::{Batch, Host};

impl<H: Host> Batch<'_, H> {
    // -- state ---------------------------------------------------------------------------------------------------

    /// The stored values of `keys`, in order, as the host's read returned them (decoded in place, not copied).
    pub(super) fn read_many(&mut self, keys: &[String]) -> Result<Vec<Option<H::Bytes>>, H::Error> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let found = self.host.read(keys)?;
        if found.len() != keys.len() {
            return Err(H::error("read returned a value per key".to_owned()));
        }
        Ok(found)
    }

    pub(super) fn prefetch_refs(&mut self, keys: Vec<String>) -> Result<(), H::Error> {
        let wanted: Vec<String> = keys
            .into_iter()
            .filter(|k| !self.refs.contains_key(k))
            .collect();
        let raws = self.read_many(&wanted)?;
        for (key, raw) in wanted.into_iter().zip(raws) {
            let entry = match raw {
                Some(raw) => Some(decode_ref::<H>(raw.as_ref(), &key)?),
                None => None,
            };
            self.refs.insert(key, entry);
        }
        Ok(())
    }

    pub(super) fn get_ref(&mut self, key: &str) -> Result<Option<&RefEntry>, H::Error> {
        if !self.refs.contains_key(key) {
            self.prefetch_refs(vec![key.to_owned()])?;
        }
        Ok(self.refs[key].as_ref())
    }

    pub(super) fn put_ref(&mut self, key: String, entry: RefEntry) {
        self.refs_dirty.insert(key.clone());
        self.refs.insert(key, Some(entry));
    }

    /// Every live source of a content with its entry, in source order (`SourcePositions.live`).
    pub(super) fn live(&mut self, key: &str) -> Result<Vec<(String, RefEntry)>, H::Error> {
        let prefix = ref_prefix(key);
        let stored = self.host.scan(&prefix)?;
        let mut found: BTreeMap<String, Option<RefEntry>> = BTreeMap::new();
        for (k, raw) in stored {
            let entry = decode_ref::<H>(&raw, &k)?;
            found.insert(k, Some(entry));
        }
        for k in self.refs_dirty.range(prefix.clone()..) {
            if !k.starts_with(&prefix) {
                break;
            }
            found.insert(k.clone(), self.refs[k].clone());
        }
        Ok(found
            .into_iter()
            .filter_map(|(k, entry)| {
                let entry = entry?;
                (!entry.positions.is_empty() && entry.attrs.is_some())
                    .then(|| (k[prefix.len()..].to_owned(), entry))
            })
            .collect())
    }

    // -- texts ---------------------------------------------------------------------------------------------------

    pub(super) fn shingles(&mut self, norm: &str) -> Rc<Shingles> {
        if let Some(found) = self.shingles.get(norm) {
            return found.clone();
        }
        let set = Rc::new(Shingles::new(norm, self.params.shingle_size));
        self.shingles.insert(norm.to_owned(), set.clone());
        set
    }

    pub(super) fn facts(&mut self, norm: &str) -> Result<Rc<Vec<String>>, H::Error> {
        if let Some(found) = self.facts.get(norm) {
            return Ok(found.clone());
        }
        let tokens = Rc::new(self.host.fact_tokens(norm)?);
        self.facts.insert(norm.to_owned(), tokens.clone());
        Ok(tokens)
    }

    /// The normalized form of any text: ASCII here, any other by the host (`normalize.normalize`).
    pub(super) fn normalize(&mut self, text: &str) -> Result<String, H::Error> {
        match normalized_ascii(text) {
            Some(norm) => Ok(norm),
            None => self.host.normalize(text),
        }
    }

    /// A content's normalized text (`Work.norm`): stored, or its text's, computed once.
    pub(super) fn norm(&mut self, work: &mut Work) -> Result<String, H::Error> {
        if let Some(norm) = &work.norm {
            return Ok(norm.clone());
        }
        let record = &work.record;
        let norm = if !record.norm_stored.is_empty() {
            record.norm_stored.clone()
        } else if record.has_text {
            self.normalize(&record.text)?
        } else {
            String::new()
        };
        work.norm = Some(norm.clone());
        Ok(norm)
    }

    // -- sources (`content_sources.SourcePositions`) ----------------------------------------------------------

    fn set_texts(&mut self, work: &mut Work, text: &str, norm: &str) -> Result<(), H::Error> {
        let record = &mut work.record;
        record.text = text.to_owned();
        record.has_text = true;
        record.length = norm.chars().count() as i64;
        record.norm_stored = if text == norm || self.normalize(text)? == norm {
            String::new()
        } else {
            norm.to_owned()
        };
        work.norm = Some(norm.to_owned());
        Ok(())
    }

    pub(super) fn apply_ref(
        &mut self,
        work: &mut Work,
        message: &RefUpdate<H::Text>,
    ) -> Result<bool, H::Error> {
        let key = ref_key(&work.key, &message.source_id);
        let entry = self.get_ref(&key)?.cloned();
        if !message.texts.is_empty() && !work.record.has_text {
            self.set_texts(work, &message.texts[0], &message.norm)?;
        }
        if let Some(e) = &entry {
            if (message.version, message.attrs_seq) <= (e.version, e.attrs_seq) {
                return Ok(false);
            }
        }
        let new = if !message.positions.is_empty() {
            let texts = if message.attrs_only {
                match &entry {
                    Some(e) if e.positions == message.positions => e.texts.clone(),
                    _ => Vec::new(),
                }
            } else if message.texts.iter().all(|t| **t == *work.record.text) {
                Vec::new()
            } else {
                message.texts.iter().map(|t| t.to_string()).collect()
            };
            work.answer_sources.insert(message.source_id.clone());
            RefEntry {
                version: message.version,
                positions: message.positions.clone(),
                texts,
                attrs: message.attrs.clone(),
                attrs_seq: message.attrs_seq,
            }
        } else {
            RefEntry {
                version: message.version,
                attrs_seq: message.attrs_seq,
                ..RefEntry::default()
            }
        };
        let record = &mut work.record;
        let complete = record.top.len() as i64 == record.positions;
        if let Some(e) = &entry {
            if !e.positions.is_empty() && e.attrs.is_some() {
                count(record, e, -1);
            }
        }
        if !new.positions.is_empty() {
            count(record, &new, 1);
        }
        self.place(work, &message.source_id, &new, complete);
        self.put_ref(key, new);
        Ok(true)
    }

    pub(super) fn ref_cmp(&self, a: &Ref, b: &Ref) -> std::cmp::Ordering {
        self.policy.compare_refs(
            (&a.source_id, a.position, &a.attrs),
            (&b.source_id, b.position, &b.attrs),
        )
    }

    pub(super) fn place(&self, work: &mut Work, source_id: &str, entry: &RefEntry, complete: bool) {
        let limit = self.params.max_chunk_sources;
        let record = &mut work.record;
        let before = record.top.len();
        let kept: Vec<Ref> = record
            .top
            .iter()
            .filter(|t| t.source_id != source_id)
            .cloned()
            .collect();
        let fresh = positions_of(source_id, entry);
        let mut merged: Vec<Ref>;
        if complete || kept.len() == before {
            merged = kept;
            merged.extend(fresh);
            merged.sort_by(|a, b| self.ref_cmp(a, b));
        } else {
            let bound = kept.last().cloned();
            merged = kept;
            if let Some(bound) = bound {
                merged.extend(
                    fresh
                        .into_iter()
                        .filter(|t| self.ref_cmp(t, &bound) == std::cmp::Ordering::Less),
                );
            }
            merged.sort_by(|a, b| self.ref_cmp(a, b));
            if (merged.len() as i64) < (limit as i64).min(record.positions) {
                work.refill = true;
            }
        }
        merged.truncate(limit);
        work.record.top = merged;
    }

    pub(super) fn ensure_top(&mut self, work: &mut Work) -> Result<(), H::Error> {
        let record = &work.record;
        if work.refill
            || record.top.len() as i64
                != (self.params.max_chunk_sources as i64).min(record.positions)
        {
            self.refill(work)?;
        }
        Ok(())
    }

    pub(super) fn refill(&mut self, work: &mut Work) -> Result<(), H::Error> {
        let live = self.live(&work.key)?;
        let record = &mut work.record;
        record.positions = 0;
        record.principals = IndexMap::new();
        let mut tops = Vec::new();
        for (source_id, entry) in &live {
            count(record, entry, 1);
            tops.extend(positions_of(source_id, entry));
        }
        tops.sort_by(|a, b| self.ref_cmp(a, b));
        tops.truncate(self.params.max_chunk_sources);
        work.record.top = tops;
        work.refill = false;
        Ok(())
    }
}
