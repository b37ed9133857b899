//! The field lists of the records the kernels decode and encode, for the test that holds them to the package's
//! msgspec structs.

use std::collections::BTreeMap;

use pyo3::prelude::*;

/// record_fields()
/// --
///
/// Return, for each record struct the kernels decode or encode (by the name of its msgspec class), its fields by
/// the names they are encoded under, in the order the kernels encode them.
#[pyfunction]
pub fn record_fields() -> BTreeMap<&'static str, Vec<&'static str>> {
    streamdedup_kernels::model::record_fields()
        .into_iter()
        .map(|(name, fields)| (name, fields.to_vec()))
        .collect()
}
