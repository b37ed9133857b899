//! The content stage's host in Python (`streamdedup_kernels::stage::Host`): the state read through the callables
//! `apply` is given, the helpers only Python has, and every message and output built as the package's objects.

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use streamdedup_kernels::model::{Info, MemberReport};
use streamdedup_kernels::signature::Features;
use streamdedup_kernels::stage::{
    Audit, ChunkView, Detail, Host, OutputValue, Review, ReviewSide, VerifyRequestOut,
    VerifyResultOut, AUDIT_SCHEMA, CHUNK_SCHEMA, REVIEW_SCHEMA,
};

use super::messages::Text;
use super::py::{self, Writer};
use crate::Bytes;

/// What the stage calls back into Python for (text that is not ASCII, rare events).
pub struct Helpers {
    pub normalize: Py<PyAny>,
    pub fact_tokens: Py<PyAny>,
    pub describe_fact_difference: Py<PyAny>,
    pub format_timestamp: Py<PyAny>,
    /// The compiled signature scheme (`SignatureScheme.compiled`): not a callback, called in Rust.
    pub scheme: Py<crate::Scheme>,
}

/// One batch's host: what it reads with, calls back, and the messages and outputs it emitted, in order.
pub struct PyHost<'a, 'py> {
    pub py: Python<'py>,
    pub helpers: &'a Helpers,
    pub make: Writer<'a, 'py>,
    pub read: &'a Bound<'py, PyAny>,
    pub scan: &'a Bound<'py, PyAny>,
    pub out: Vec<Bound<'py, PyAny>>,
}

impl<'py> Host for PyHost<'_, 'py> {
    type Error = PyErr;
    type Text = Text;
    type Bytes = Bytes<'py>;
    type Info = Bound<'py, PyAny>;

    fn error(message: String) -> PyErr {
        PyValueError::new_err(message)
    }

    fn read(&mut self, keys: &[String]) -> PyResult<Vec<Option<Bytes<'py>>>> {
        let found: Vec<Option<Bound<'py, PyBytes>>> =
            self.read.call1((PyList::new(self.py, keys)?,))?.extract()?;
        Ok(found.into_iter().map(|raw| raw.map(Bytes)).collect())
    }

    fn scan(&mut self, prefix: &str) -> PyResult<Vec<(String, Vec<u8>)>> {
        self.scan.call1((prefix,))?.extract()
    }

    fn normalize(&mut self, text: &str) -> PyResult<String> {
        self.helpers
            .normalize
            .bind(self.py)
            .call1((text,))?
            .extract()
    }

    fn fact_tokens(&mut self, norm: &str) -> PyResult<Vec<String>> {
        self.helpers
            .fact_tokens
            .bind(self.py)
            .call1((norm,))?
            .extract()
    }

    fn describe_fact_difference(&mut self, low: &[String], high: &[String]) -> PyResult<String> {
        self.helpers
            .describe_fact_difference
            .bind(self.py)
            .call1((low.to_vec(), high.to_vec()))?
            .extract()
    }

    fn format_timestamp(&mut self, micros: i64) -> PyResult<String> {
        self.helpers
            .format_timestamp
            .bind(self.py)
            .call1((micros,))?
            .extract()
    }

    fn features(
        &mut self,
        texts: &[&str],
        bands: usize,
        rows: usize,
        min_shingles: i64,
    ) -> PyResult<Vec<Features>> {
        self.helpers
            .scheme
            .get()
            .compute(self.py, texts, bands, rows, min_shingles)
    }

    fn info(&mut self, info: &Info) -> PyResult<Bound<'py, PyAny>> {
        self.make.info(info)
    }

    fn band(
        &mut self,
        join: bool,
        content_hash: &str,
        epoch: i64,
        bands: &[String],
    ) -> PyResult<()> {
        let classes = self.make.classes;
        let class = if join {
            &classes.band_join
        } else {
            &classes.band_leave
        };
        let obj =
            class
                .bind(self.py)
                .call1((content_hash, epoch, PyTuple::new(self.py, bands)?))?;
        self.out.push(obj);
        Ok(())
    }

    fn verify_request(&mut self, m: &VerifyRequestOut<'_, Bound<'py, PyAny>>) -> PyResult<()> {
        let py = self.py;
        let decision = self.make.mark(m.decision)?;
        let report = self.make.report(m.report)?;
        let obj = self.make.classes.verify_request.bind(py).call1((
            m.content_hash,
            m.sender,
            m.epoch,
            m.norm,
            m.text,
            m.info,
            decision,
            report,
            PyBytes::new(py, m.sketch),
        ))?;
        self.out.push(obj);
        Ok(())
    }

    fn verify_result(&mut self, m: &VerifyResultOut<'_, Bound<'py, PyAny>>) -> PyResult<()> {
        let py = self.py;
        let conflict = match m.conflict {
            Some(facts) => PyTuple::new(py, facts)?.into_any(),
            None => py.None().into_bound(py),
        };
        let decision = self.make.mark(m.decision)?;
        let report = self.make.report(m.report)?;
        let obj = self.make.classes.verify_result.bind(py).call1((
            m.content_hash,
            m.sender,
            m.epoch,
            m.jaccard,
            m.edge,
            m.info,
            conflict,
            m.text,
            decision,
            report,
        ))?;
        self.out.push(obj);
        Ok(())
    }

    fn neighbor_update(
        &mut self,
        content_hash: &str,
        sender: &str,
        info: &Bound<'py, PyAny>,
        report: Option<&MemberReport>,
    ) -> PyResult<()> {
        let report = self.make.report(report)?;
        let obj = self.make.classes.neighbor_update.bind(self.py).call1((
            content_hash,
            sender,
            info,
            report,
        ))?;
        self.out.push(obj);
        Ok(())
    }

    fn output(&mut self, topic: &str, key: &str, value: OutputValue<'_>) -> PyResult<()> {
        let py = self.py;
        let value = match value {
            OutputValue::Tombstone => py.None().into_bound(py),
            OutputValue::Audit(audit) => audit_value(py, &audit)?.into_any(),
            OutputValue::Review(review) => review_value(py, &review)?.into_any(),
            OutputValue::ChunkJson(json) => self
                .make
                .classes
                .raw
                .bind(py)
                .call1((PyBytes::new(py, json),))?,
            OutputValue::Chunk(view) => chunk_value(py, view)?.into_any(),
        };
        let obj = self
            .make
            .classes
            .output
            .bind(py)
            .call1((topic, key, value))?;
        self.out.push(obj);
        Ok(())
    }

    fn source_statuses(&mut self, source_id: &str, packed: &[u8]) -> PyResult<()> {
        let obj = self
            .make
            .classes
            .source_statuses
            .bind(self.py)
            .call1((source_id, PyBytes::new(self.py, packed)))?;
        self.out.push(obj);
        Ok(())
    }
}

/// An audit record as the Python twin's dict.
fn audit_value<'py>(py: Python<'py>, audit: &Audit<'_>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item(intern!(py, "schema"), AUDIT_SCHEMA)?;
    d.set_item(intern!(py, "chunk_id"), audit.chunk_id)?;
    d.set_item(intern!(py, "action"), audit.action)?;
    d.set_item(intern!(py, "reason"), audit.reason)?;
    for (name, value) in audit.detail {
        match value {
            Detail::Str(s) => d.set_item(*name, s)?,
            Detail::Float(f) => d.set_item(*name, *f)?,
            Detail::Position(source_id, position) => {
                let moved = PyDict::new(py);
                moved.set_item(intern!(py, "source_id"), source_id)?;
                moved.set_item(intern!(py, "position"), *position)?;
                d.set_item(*name, moved)?;
            }
        }
    }
    Ok(d)
}

fn review_side<'py>(py: Python<'py>, side: &ReviewSide<'_>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item(intern!(py, "content_hash"), side.content_hash)?;
    if let Some(text) = side.text {
        d.set_item(intern!(py, "text"), text)?;
    }
    if let Some(acl) = side.acl {
        d.set_item(intern!(py, "acl"), PyList::new(py, acl)?)?;
    }
    Ok(d)
}

/// A review record as the Python twin's dict.
fn review_value<'py>(py: Python<'py>, review: &Review<'_>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item(intern!(py, "schema"), REVIEW_SCHEMA)?;
    d.set_item(intern!(py, "reason"), review.reason)?;
    d.set_item(intern!(py, "a"), review_side(py, &review.a)?)?;
    d.set_item(intern!(py, "b"), review_side(py, &review.b)?)?;
    d.set_item(intern!(py, "jaccard"), review.jaccard)?;
    d.set_item(intern!(py, "detail"), review.detail)?;
    Ok(d)
}

/// A chunk record as Python objects (its metadata is not a JSON document's), with its revision.
fn chunk_value<'py>(py: Python<'py>, view: &ChunkView<'_>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item(intern!(py, "schema"), CHUNK_SCHEMA)?;
    d.set_item(intern!(py, "chunk_id"), view.key)?;
    d.set_item(intern!(py, "text"), view.text)?;
    d.set_item(intern!(py, "content_hash"), view.key)?;
    let at = PyDict::new(py);
    at.set_item(intern!(py, "source_id"), &view.canonical.0)?;
    at.set_item(intern!(py, "position"), view.canonical.1)?;
    d.set_item(intern!(py, "canonical"), at)?;
    d.set_item(intern!(py, "acl"), PyList::new(py, view.readers)?)?;
    let members = PyList::empty(py);
    let own = PyDict::new(py);
    own.set_item(intern!(py, "content_hash"), view.key)?;
    own.set_item(intern!(py, "relation"), "canonical")?;
    own.set_item(intern!(py, "jaccard"), 1.0)?;
    members.append(own)?;
    for &(h, jaccard) in &view.members {
        let m = PyDict::new(py);
        m.set_item(intern!(py, "content_hash"), h)?;
        m.set_item(intern!(py, "relation"), "near")?;
        m.set_item(intern!(py, "jaccard"), jaccard)?;
        members.append(m)?;
    }
    d.set_item(intern!(py, "members"), members)?;
    d.set_item(intern!(py, "member_count"), view.member_count)?;
    let sources = PyList::empty(py);
    for source in &view.sources {
        let attrs = &source.r.attrs;
        let s = PyDict::new(py);
        s.set_item(intern!(py, "source_id"), &source.r.source_id)?;
        s.set_item(intern!(py, "position"), source.r.position)?;
        s.set_item(intern!(py, "content_hash"), source.content_hash)?;
        s.set_item(intern!(py, "acl"), PyList::new(py, &source.acl)?)?;
        s.set_item(intern!(py, "modified_at"), &source.modified_at)?;
        s.set_item(intern!(py, "authority"), attrs.authority)?;
        s.set_item(intern!(py, "uri"), &attrs.uri)?;
        if let Some(title) = &attrs.title {
            s.set_item(intern!(py, "title"), title)?;
        }
        if let Some(metadata) = &attrs.metadata {
            s.set_item(intern!(py, "metadata"), py::value_to_py(py, metadata)?)?;
        }
        sources.append(s)?;
    }
    d.set_item(intern!(py, "sources"), sources)?;
    d.set_item(intern!(py, "source_count"), view.source_count)?;
    if !view.outdated_by.is_empty() {
        d.set_item(intern!(py, "current"), false)?;
        d.set_item(intern!(py, "outdated_by"), view.outdated_by)?;
    }
    d.set_item(intern!(py, "revision"), view.revision)?;
    Ok(d)
}
