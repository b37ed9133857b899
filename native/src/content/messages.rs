//! The content stage's messages read from Python objects into the core's (`streamdedup_kernels::stage::In`).

use std::rc::Rc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::{PyBackedBytes, PyBackedStr};
use streamdedup_kernels::stage::{
    BandAck, NeighborUpdate, PairDecision, RefUpdate, VerifyRequest, VerifyResult,
};

use super::py::{self, Classes};

/// A message of the batch, its texts held in Python's memory.
pub type In = streamdedup_kernels::stage::In<Text>;

/// A text a reference update carries, held where the message holds it (most copies of a text never need theirs):
/// a `RefUpdate`'s Python string, or a slice of a `SourceRefs` message's packed list.
pub enum Text {
    Py(PyBackedStr),
    Packed(Rc<PyBackedBytes>, usize, usize),
}

impl std::ops::Deref for Text {
    type Target = str;

    fn deref(&self) -> &str {
        match self {
            Text::Py(text) => text,
            // SAFETY: the slice is a string the packed list's reader checked as UTF-8
            // (`streamdedup_kernels::refs::read_refs`).
            Text::Packed(data, start, end) => unsafe {
                std::str::from_utf8_unchecked(&data[*start..*end])
            },
        }
    }
}

/// Read a `SourceRefs` message: a `RefUpdate` for each content of its packed list, in the list's order.
pub fn read_source_refs(
    obj: &Bound<'_, PyAny>,
    reader: &mut py::Reader,
    parsed: &mut Vec<In>,
) -> PyResult<()> {
    let py = obj.py();
    let source_id: String = obj.getattr(pyo3::intern!(py, "source_id"))?.extract()?;
    let version: i64 = obj.getattr(pyo3::intern!(py, "version"))?.extract()?;
    let attrs_seq: i64 = obj.getattr(pyo3::intern!(py, "attrs_seq"))?.extract()?;
    let attrs = obj.getattr(pyo3::intern!(py, "attrs"))?;
    let attrs = if attrs.is_none() {
        None
    } else {
        Some(reader.attrs(&attrs)?)
    };
    let data = Rc::new(
        obj.getattr(pyo3::intern!(py, "refs"))?
            .extract::<PyBackedBytes>()?,
    );
    let base = data.as_ptr() as usize;
    let text = |s: &str| {
        Text::Packed(
            data.clone(),
            s.as_ptr() as usize - base,
            s.as_ptr() as usize - base + s.len(),
        )
    };
    let refs = streamdedup_kernels::refs::read_refs(&data).map_err(|e| {
        PyValueError::new_err(format!("malformed reference list of {source_id:?}: {e}"))
    })?;
    parsed.reserve(refs.len());
    for entry in refs {
        parsed.push(In::Ref(RefUpdate {
            content_hash: entry.content_hash.to_owned(),
            source_id: source_id.clone(),
            version,
            texts: entry.texts.iter().map(|t| text(t)).collect(),
            norm: text(entry.norm),
            attrs: if entry.positions.is_empty() {
                None
            } else {
                attrs.clone()
            },
            positions: entry.positions,
            attrs_only: false,
            attrs_seq,
        }));
    }
    Ok(())
}

pub fn read_message(
    obj: &Bound<'_, PyAny>,
    classes: &Classes,
    reader: &mut py::Reader,
) -> PyResult<In> {
    let py = obj.py();
    let kind = obj.get_type();
    macro_rules! get {
        ($name:literal) => {
            obj.getattr(pyo3::intern!(py, $name))
        };
    }
    if kind.is(classes.ref_update.bind(py)) {
        let attrs = get!("attrs")?;
        Ok(In::Ref(RefUpdate {
            content_hash: get!("content_hash")?.extract()?,
            source_id: get!("source_id")?.extract()?,
            version: get!("version")?.extract()?,
            positions: get!("positions")?.extract()?,
            texts: get!("texts")?
                .extract::<Vec<PyBackedStr>>()?
                .into_iter()
                .map(Text::Py)
                .collect(),
            norm: Text::Py(get!("norm")?.extract()?),
            attrs: if attrs.is_none() {
                None
            } else {
                Some(reader.attrs(&attrs)?)
            },
            attrs_only: get!("attrs_only")?.extract()?,
            attrs_seq: get!("attrs_seq")?.extract()?,
        }))
    } else if kind.is(classes.band_ack.bind(py)) {
        Ok(In::Ack(BandAck {
            content_hash: get!("content_hash")?.extract()?,
            epoch: get!("epoch")?.extract()?,
            bands: py::strings(&get!("bands")?)?,
            candidates: get!("candidates")?.extract()?,
        }))
    } else if kind.is(classes.verify_request.bind(py)) {
        Ok(In::Verify(VerifyRequest {
            content_hash: get!("content_hash")?.extract()?,
            sender: get!("sender")?.extract()?,
            epoch: get!("epoch")?.extract()?,
            norm: get!("norm")?.extract()?,
            text: get!("text")?.extract()?,
            info: reader.info(&get!("info")?)?,
            decision: reader.mark(&get!("decision")?)?,
            report: reader.report(&get!("report")?)?,
            sketch: get!("sketch")?.extract()?,
        }))
    } else if kind.is(classes.verify_result.bind(py)) {
        let conflict = get!("conflict")?;
        Ok(In::Result(VerifyResult {
            content_hash: get!("content_hash")?.extract()?,
            sender: get!("sender")?.extract()?,
            epoch: get!("epoch")?.extract()?,
            jaccard: get!("jaccard")?.extract()?,
            edge: get!("edge")?.extract()?,
            info: reader.info(&get!("info")?)?,
            conflict: if conflict.is_none() {
                None
            } else {
                Some(py::strings(&conflict)?)
            },
            text: get!("text")?.extract()?,
            decision: reader.mark(&get!("decision")?)?,
            report: reader.report(&get!("report")?)?,
        }))
    } else if kind.is(classes.pair_decision.bind(py)) {
        Ok(In::Decision(PairDecision {
            content_hash: get!("content_hash")?.extract()?,
            other: get!("other")?.extract()?,
            mark: reader
                .mark(&get!("mark")?)?
                .ok_or_else(|| PyTypeError::new_err("a decision without its mark"))?,
        }))
    } else if kind.is(classes.neighbor_update.bind(py)) {
        Ok(In::Neighbor(NeighborUpdate {
            content_hash: get!("content_hash")?.extract()?,
            sender: get!("sender")?.extract()?,
            info: reader.info(&get!("info")?)?,
            report: reader.report(&get!("report")?)?,
        }))
    } else {
        Err(PyTypeError::new_err(format!(
            "content stage cannot handle {}",
            kind.name()?
        )))
    }
}
