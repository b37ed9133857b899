//! The collection stage's line counts: the documents of a collection containing each normalized line
//! (`streamdedup.core.stages.collection`, whose `count_in_python` is the twin the tests compare this with).
//!
//! Records are MessagePack arrays, as msgspec writes the package's `array_like` structs: a line is
//! `[count, text]` (`LineRecord`), a source's last counted version `[version, counted]` (`CollectionMember`).

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::text::read_added_lines;

/// The fields of a line record (`LineRecord`) and a collection member (`CollectionMember`) by the names they are
/// encoded under, in the order `encode_line` and `encode_member` write them.
pub const LINE_RECORD_FIELDS: &[&str] = &["count", "text"];
pub const COLLECTION_MEMBER_FIELDS: &[&str] = &["version", "counted"];

fn malformed(what: &str, key: &str) -> String {
    format!("malformed {what} record at {key:?}")
}

/// Read a record's two fields, `[first, second]`: a shorter array leaves the defaults, a longer one is refused
/// (this version writes two; msgspec would ignore the rest).
fn fields<'a>(raw: &'a [u8], what: &str, key: &str) -> Result<(u32, &'a [u8]), String> {
    let mut rest = raw;
    let length = rmp::decode::read_array_len(&mut rest).map_err(|_| malformed(what, key))?;
    if length > 2 {
        return Err(malformed(what, key));
    }
    Ok((length, rest))
}

/// Decode a line record: `(count, text)`.
pub fn decode_line(raw: &[u8], key: &str) -> Result<(i64, String), String> {
    let (length, mut rest) = fields(raw, "line", key)?;
    let mut line = (0, String::new());
    if length >= 1 {
        line.0 = rmp::decode::read_int(&mut rest).map_err(|_| malformed("line", key))?;
    }
    if length == 2 {
        let (text, tail) =
            rmp::decode::read_str_from_slice(rest).map_err(|_| malformed("line", key))?;
        line.1 = text.to_owned();
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(malformed("line", key));
    }
    Ok(line)
}

/// Decode a member record: `(version, counted)`.
pub fn decode_member(raw: &[u8], key: &str) -> Result<(i64, bool), String> {
    let (length, mut rest) = fields(raw, "member", key)?;
    let mut member = (-1, false);
    if length >= 1 {
        member.0 = rmp::decode::read_int(&mut rest).map_err(|_| malformed("member", key))?;
    }
    if length == 2 {
        member.1 = rmp::decode::read_bool(&mut rest).map_err(|_| malformed("member", key))?;
    }
    if !rest.is_empty() {
        return Err(malformed("member", key));
    }
    Ok(member)
}

pub fn encode_line(count: i64, text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + 16);
    // Writing to a Vec cannot fail.
    rmp::encode::write_array_len(&mut out, 2).expect("write to a Vec");
    rmp::encode::write_sint(&mut out, count).expect("write to a Vec");
    rmp::encode::write_str(&mut out, text).expect("write to a Vec");
    out
}

pub fn encode_member(version: i64, counted: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(12);
    rmp::encode::write_array_len(&mut out, 2).expect("write to a Vec");
    rmp::encode::write_sint(&mut out, version).expect("write to a Vec");
    rmp::encode::write_bool(&mut out, counted).expect("write to a Vec");
    out
}

/// A member or line record's key, `f"{kind}\0{collection}\0{name}"` (`collection.member_key`, `line_key`),
/// built without the formatting machinery (about 950 instructions a key through `format!`).
pub fn record_key(kind: &str, collection: &str, name: &str) -> String {
    let mut key = String::with_capacity(kind.len() + collection.len() + name.len() + 2);
    key.push_str(kind);
    key.push('\0');
    key.push_str(collection);
    key.push('\0');
    key.push_str(name);
    key
}

/// One line update of a batch: `added` is packed `[line hash, normalized line]` arrays, `removed` line hashes.
pub struct LineUpdate<'a, S> {
    pub collection: &'a str,
    pub source_id: &'a str,
    pub version: i64,
    pub counted: bool,
    pub added: &'a [u8],
    pub removed: &'a [S],
}

/// The records a batch reads: member keys first, then line keys, each once, in order of first use.
pub struct Plan<'a> {
    pub names: Vec<String>,
    slot: HashMap<String, usize>,
    first_line: usize,
    member_at: Vec<usize>,
    added: Vec<Vec<(&'a str, &'a str)>>,
    line_at: Vec<(Vec<usize>, Vec<usize>)>,
}

impl Plan<'_> {
    fn add(&mut self, key: String) -> usize {
        if let Some(&at) = self.slot.get(&key) {
            return at;
        }
        let at = self.names.len();
        self.slot.insert(key.clone(), at);
        self.names.push(key);
        at
    }
}

/// The keys a batch of updates reads, and where each update's records are among them.
pub fn plan<'a, S: AsRef<str>>(updates: &[LineUpdate<'a, S>]) -> Result<Plan<'a>, String> {
    let mut plan = Plan {
        names: Vec::new(),
        slot: HashMap::default(),
        first_line: 0,
        member_at: Vec::with_capacity(updates.len()),
        added: Vec::with_capacity(updates.len()),
        line_at: Vec::with_capacity(updates.len()),
    };
    for u in updates {
        let at = plan.add(record_key("m", u.collection, u.source_id));
        plan.member_at.push(at);
    }
    plan.first_line = plan.names.len();
    let added_lines = updates
        .iter()
        .map(|u| read_added_lines(u.added))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("malformed line update: {e}"))?;
    for (u, added) in updates.iter().zip(&added_lines) {
        let added = added
            .iter()
            .map(|(hashed, _)| plan.add(record_key("l", u.collection, hashed)))
            .collect();
        let removed = u
            .removed
            .iter()
            .map(|hashed| plan.add(record_key("l", u.collection, hashed.as_ref())))
            .collect();
        plan.line_at.push((added, removed));
    }
    plan.added = added_lines;
    Ok(plan)
}

/// A record decoded on first use: None until read, then the record or None where absent.
type Cell<T> = Option<Option<T>>;

/// What a batch of line updates did.
pub struct Counted<'a> {
    /// The changed records, by slot in key order: the new value, None once gone.
    pub writes: Vec<(usize, Option<Vec<u8>>)>,
    /// Whether each update applied (its version is newer than its source's member record).
    pub applied: Vec<bool>,
    /// The document count of each collection an update applied to.
    pub totals: HashMap<String, i64>,
    /// Per collection, in order of first application, the lines changed, once each: (line slot, line hash).
    touched: Vec<(String, Vec<(usize, &'a str)>)>,
    lines: Vec<Cell<(i64, String)>>,
    first_line: usize,
}

/// The record in `cell` (None where absent), decoded from `raw` on first use.
fn loaded<'c, T, B: AsRef<[u8]>>(
    cell: &'c mut Cell<T>,
    raw: &Option<B>,
    key: &str,
    decode: fn(&[u8], &str) -> Result<T, String>,
) -> Result<&'c mut Option<T>, String> {
    if cell.is_none() {
        *cell = Some(match raw {
            Some(raw) => Some(decode(raw.as_ref(), key)?),
            None => None,
        });
    }
    Ok(cell.as_mut().expect("loaded above"))
}

/// Apply a batch of line updates, in order, to the records `plan` names (`stored`, by slot, as read): see
/// `count_lines` in the bindings. `docs` gives each updated collection's document count before the batch.
pub fn count<'a, S: AsRef<str>, B: AsRef<[u8]>>(
    updates: &'a [LineUpdate<'a, S>],
    plan: &'a Plan<'a>,
    stored: &[Option<B>],
    docs: &HashMap<String, i64>,
) -> Result<Counted<'a>, String> {
    let first_line = plan.first_line;
    let names = &plan.names;
    let mut members: Vec<Cell<(i64, bool)>> = vec![None; first_line];
    let mut counted = Counted {
        writes: Vec::new(),
        applied: Vec::with_capacity(updates.len()),
        totals: HashMap::default(),
        touched: Vec::new(),
        lines: vec![None; names.len() - first_line],
        first_line,
    };
    let mut changed = vec![false; names.len()];
    let mut touched_at: HashMap<String, usize> = HashMap::default();
    for (u, (update, added)) in updates.iter().zip(&plan.added).enumerate() {
        let slot = plan.member_at[u];
        let member = loaded(
            &mut members[slot],
            &stored[slot],
            &names[slot],
            decode_member,
        )?;
        let (was_version, was_counted) = member.unwrap_or((-1, false));
        if update.version <= was_version {
            counted.applied.push(false);
            continue;
        }
        counted.applied.push(true);
        *member = Some((update.version, update.counted));
        changed[slot] = true;
        *counted
            .totals
            .entry(update.collection.to_owned())
            .or_insert_with(|| docs.get(update.collection).copied().unwrap_or(0)) +=
            i64::from(update.counted) - i64::from(was_counted);
        let next = counted.touched.len();
        let at = *touched_at
            .entry(update.collection.to_owned())
            .or_insert(next);
        if at == next {
            counted
                .touched
                .push((update.collection.to_owned(), Vec::new()));
        }
        let (added_at, removed_at) = &plan.line_at[u];
        let removed = update.removed.iter().map(|h| h.as_ref()).zip(removed_at);
        let lines = added
            .iter()
            .zip(added_at)
            .map(|((h, t), at)| (*h, Some(*t), at));
        for (hashed, text, &slot) in lines.chain(removed.map(|(h, at)| (h, None, at))) {
            let cell = &mut counted.lines[slot - first_line];
            let line = loaded(cell, &stored[slot], &names[slot], decode_line)?;
            if !change_line(line, text) {
                continue;
            }
            if !std::mem::replace(&mut changed[slot], true) {
                counted.touched[at].1.push((slot, hashed)); // each line once, however many updates change it
            }
        }
    }
    counted.writes = writes(plan, &members, &counted.lines, &changed);
    Ok(counted)
}

/// Count a line once more (`text`: the line added) or once less (None: removed); false if it was not there to
/// remove.
fn change_line(line: &mut Option<(i64, String)>, text: Option<&str>) -> bool {
    match (text, line.as_mut()) {
        (Some(text), found) => {
            let count = found.map_or(0, |(count, _)| *count);
            *line = Some((count + 1, text.to_owned()));
        }
        (None, None) => return false,
        (None, Some((count, _))) if *count > 1 => *count -= 1,
        (None, Some(_)) => *line = None,
    }
    true
}

/// The changed records in key order, encoded (None once gone).
fn writes(
    plan: &Plan<'_>,
    members: &[Cell<(i64, bool)>],
    lines: &[Cell<(i64, String)>],
    changed: &[bool],
) -> Vec<(usize, Option<Vec<u8>>)> {
    let names = &plan.names;
    let mut order: Vec<usize> = (0..names.len()).filter(|&k| changed[k]).collect();
    order.sort_unstable_by(|&x, &y| names[x].cmp(&names[y]));
    order
        .into_iter()
        .map(|slot| {
            let value = if slot < plan.first_line {
                members[slot]
                    .flatten()
                    .map(|(version, counted)| encode_member(version, counted))
            } else {
                lines[slot - plan.first_line]
                    .as_ref()
                    .and_then(Option::as_ref)
                    .map(|(count, text)| encode_line(*count, text))
            };
            (slot, value)
        })
        .collect()
}

/// A changed line a collection's boilerplate may depend on, with its count and text (None once gone).
pub type FoundLine<'c> = (&'c str, Option<(i64, &'c str)>);

impl Counted<'_> {
    /// Per collection an update applied to, the changed lines that may be boilerplate now: those `watch`ed (its
    /// boilerplate and reviewed lines), and, when the collection has at least `min_docs` documents (and
    /// `min_docs` is positive), those found in at least `fraction` of them.
    pub fn found<'c>(
        &'c self,
        watch: &HashMap<String, HashSet<String>>,
        min_docs: i64,
        fraction: f64,
    ) -> Vec<(&'c str, Vec<FoundLine<'c>>)> {
        let mut found = Vec::with_capacity(self.touched.len());
        for (collection, changes) in &self.touched {
            let total = self.totals[collection];
            let enabled = min_docs > 0 && total >= min_docs;
            let threshold = fraction * total as f64;
            let watched = watch.get(collection);
            let mut per = Vec::new();
            for &(slot, hashed) in changes {
                let line = self.lines[slot - self.first_line]
                    .as_ref()
                    .and_then(Option::as_ref);
                let wanted = watched.is_some_and(|w| w.contains(hashed))
                    || (enabled && line.is_some_and(|(count, _)| *count as f64 >= threshold));
                if wanted {
                    per.push((hashed, line.map(|(count, text)| (*count, text.as_str()))));
                }
            }
            found.push((collection.as_str(), per));
        }
        found
    }
}
