//! The content stage's records and the parts of messages they hold, encoded as msgspec encodes the package's
//! structs (`streamdedup.core.state`, `streamdedup.core.messages`, `streamdedup.core.model`): the same bytes, so
//! that a state written by either implementation reads the same in the other.

mod entries;
mod parts;
mod record;

pub use entries::{ChunkStatus, Conflict, ContentIds, NeighborEntry, Position, RefEntry};
pub use parts::{Info, MemberReport, PairMark, Rank, Ref, Role, SourceAttrs};
pub use record::ContentRecord;

use indexmap::IndexMap;

use crate::mp::{Malformed, Reader, Result, Writer};

fn optional_string(r: &mut Reader) -> Result<Option<String>> {
    Ok(if r.nil() { None } else { Some(r.string()?) })
}

/// The fields of an array-like struct as msgspec reads them: `required` at least, those past `fields` ignored.
struct Fields {
    given: usize,
    extra: usize,
}

impl Fields {
    fn open(r: &mut Reader, required: usize, fields: usize, what: &'static str) -> Result<Self> {
        let n = r.array()?;
        if n < required {
            return Err(Malformed(what));
        }
        Ok(Fields {
            given: n.min(fields),
            extra: n.saturating_sub(fields),
        })
    }

    /// Whether field ``index`` (from 0) is present.
    fn has(&self, index: usize) -> bool {
        index < self.given
    }

    fn close(self, r: &mut Reader) -> Result<()> {
        for _ in 0..self.extra {
            r.skip()?;
        }
        Ok(())
    }
}

fn map_of<T>(
    r: &mut Reader,
    mut read: impl FnMut(&mut Reader) -> Result<T>,
) -> Result<IndexMap<String, T>> {
    let n = r.map()?;
    let mut found = IndexMap::with_capacity(n);
    for _ in 0..n {
        let key = r.string()?;
        let value = read(r)?;
        found.insert(key, value);
    }
    Ok(found)
}

fn encode_map_of<T>(
    w: &mut Writer,
    map: &IndexMap<String, T>,
    mut write: impl FnMut(&mut Writer, &T),
) {
    w.map(map.len());
    for (key, value) in map {
        w.str(key);
        write(w, value);
    }
}

/// The fields of every record struct this crate decodes or encodes, by the name of its msgspec twin in the
/// package: the names they are encoded under, in the order they are encoded (a field added on one side only is
/// then told by name; `streamdedup.core._native.record_fields`).
pub fn record_fields() -> Vec<(&'static str, &'static [&'static str])> {
    vec![
        ("SourceAttrs", SourceAttrs::FIELDS),
        ("Rank", Rank::FIELDS),
        ("Info", Info::FIELDS),
        ("PairMark", PairMark::FIELDS),
        ("SourceRef", Ref::FIELDS),
        ("TopRef", Ref::TOP_FIELDS),
        ("MemberReport", MemberReport::FIELDS),
        ("RefEntry", RefEntry::FIELDS),
        ("NeighborEntry", NeighborEntry::FIELDS),
        ("Conflict", Conflict::FIELDS),
        ("ChunkStatus", ChunkStatus::FIELDS),
        ("ContentIds", ContentIds::FIELDS),
        ("ContentRecord", &ContentRecord::FIELDS),
        ("StatusEntry", crate::mapping::Status::FIELDS),
        ("LineRecord", crate::lines::LINE_RECORD_FIELDS),
        ("CollectionMember", crate::lines::COLLECTION_MEMBER_FIELDS),
    ]
}

/// Decode a whole record of one of the content stage's kinds and encode it again (what the tests compare with
/// msgspec).
pub fn reencode(kind: &str, raw: &[u8]) -> Result<Vec<u8>> {
    let mut r = Reader::new(raw);
    let mut w = Writer::with_capacity(raw.len() + 16);
    match kind {
        "content" => ContentRecord::decode(&mut r)?.encode(&mut w),
        "ref" => RefEntry::decode(&mut r)?.encode(&mut w),
        "ids" => ContentIds::decode(&mut r)?.encode(&mut w),
        _ => return Err(Malformed("a record kind")),
    }
    if !r.finished() {
        return Err(Malformed("the end of the record"));
    }
    Ok(w.out)
}
