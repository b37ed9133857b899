//! The field lists of the records the kernels decode and encode, for the test that holds them to the package's
//! msgspec structs.

use std::collections::BTreeMap;

use pyo3::prelude::*;

use crate::lines::{COLLECTION_MEMBER_FIELDS, LINE_RECORD_FIELDS};

/// record_fields()
/// --
///
/// Return, for each record struct the kernels decode or encode (by the name of its msgspec class), its fields by
/// the names they are encoded under, in the order the kernels encode them.
#[pyfunction]
pub fn record_fields() -> BTreeMap<&'static str, Vec<&'static str>> {
    let mut found: BTreeMap<&'static str, Vec<&'static str>> =
        streamdedup_kernels::model::record_fields()
            .into_iter()
            .map(|(name, fields)| (name, fields.to_vec()))
            .collect();
    found.insert("LineRecord", LINE_RECORD_FIELDS.to_vec());
    found.insert("CollectionMember", COLLECTION_MEMBER_FIELDS.to_vec());
    found
}
