//! The content stage's messages and output values between Python objects and the records of `model.rs`.

use std::collections::HashMap;
use std::rc::Rc;

use pyo3::exceptions::PyTypeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use super::model::{Info, MemberReport, PairMark, Rank, Ref, Role, SourceAttrs};
use super::mp::Value;

/// The package's classes the stage reads and builds.
pub struct Classes {
    pub ref_update: Py<PyAny>,
    pub source_refs: Py<PyAny>,
    pub band_ack: Py<PyAny>,
    pub verify_request: Py<PyAny>,
    pub verify_result: Py<PyAny>,
    pub pair_decision: Py<PyAny>,
    pub neighbor_update: Py<PyAny>,
    pub source_statuses: Py<PyAny>,
    pub band_join: Py<PyAny>,
    pub band_leave: Py<PyAny>,
    pub output: Py<PyAny>,
    pub info: Py<PyAny>,
    pub rank: Py<PyAny>,
    pub pair_mark: Py<PyAny>,
    pub member_report: Py<PyAny>,
    pub source_ref: Py<PyAny>,
    pub source_attrs: Py<PyAny>,
    pub raw: Py<PyAny>,
}

impl Classes {
    pub fn from_dict(classes: &Bound<'_, PyDict>) -> PyResult<Self> {
        let get = |name: &str| -> PyResult<Py<PyAny>> {
            classes
                .get_item(name)?
                .map(Bound::unbind)
                .ok_or_else(|| PyTypeError::new_err(format!("missing class {name}")))
        };
        Ok(Classes {
            ref_update: get("RefUpdate")?,
            source_refs: get("SourceRefs")?,
            band_ack: get("BandAck")?,
            verify_request: get("VerifyRequest")?,
            verify_result: get("VerifyResult")?,
            pair_decision: get("PairDecision")?,
            neighbor_update: get("NeighborUpdate")?,
            source_statuses: get("SourceStatuses")?,
            band_join: get("BandJoin")?,
            band_leave: get("BandLeave")?,
            output: get("Output")?,
            info: get("Info")?,
            rank: get("Rank")?,
            pair_mark: get("PairMark")?,
            member_report: get("MemberReport")?,
            source_ref: get("SourceRef")?,
            source_attrs: get("SourceAttrs")?,
            raw: get("Raw")?,
        })
    }
}

/// Reads message parts from Python objects, sharing the attributes that one object stands for.
#[derive(Default)]
pub struct Reader {
    attrs: HashMap<usize, Rc<SourceAttrs>>,
}

fn value_of(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    Ok(if obj.is_none() {
        Value::Nil
    } else if let Ok(b) = obj.cast::<PyBool>() {
        Value::Bool(b.is_true())
    } else if obj.is_instance_of::<PyInt>() {
        match obj.extract::<i64>() {
            Ok(v) => Value::Int(v),
            Err(_) => Value::UInt(obj.extract::<u64>()?),
        }
    } else if let Ok(f) = obj.cast::<PyFloat>() {
        Value::Float(f.value())
    } else if let Ok(s) = obj.cast::<PyString>() {
        Value::Str(s.to_str()?.to_owned())
    } else if let Ok(b) = obj.cast::<PyBytes>() {
        Value::Bin(b.as_bytes().to_vec())
    } else if let Ok(d) = obj.cast::<PyDict>() {
        let mut items = Vec::with_capacity(d.len());
        for (k, v) in d.iter() {
            items.push((value_of(&k)?, value_of(&v)?));
        }
        Value::Map(items)
    } else if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        Value::Array(
            obj.try_iter()?
                .map(|item| value_of(&item?))
                .collect::<PyResult<_>>()?,
        )
    } else {
        return Err(PyTypeError::new_err(format!(
            "metadata holds a {}",
            obj.get_type().name()?
        )));
    })
}

pub fn value_to_py<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Nil => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Int(i) => i.into_pyobject(py)?.into_any(),
        Value::UInt(u) => u.into_pyobject(py)?.into_any(),
        Value::Float(f) => PyFloat::new(py, *f).into_any(),
        Value::Str(s) => PyString::new(py, s).into_any(),
        Value::Bin(b) => PyBytes::new(py, b).into_any(),
        Value::Array(items) => PyList::new(
            py,
            items
                .iter()
                .map(|v| value_to_py(py, v))
                .collect::<PyResult<Vec<_>>>()?,
        )?
        .into_any(),
        Value::Map(items) => {
            let d = PyDict::new(py);
            for (k, v) in items {
                d.set_item(value_to_py(py, k)?, value_to_py(py, v)?)?;
            }
            d.into_any()
        }
    })
}

pub fn strings(obj: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    obj.try_iter()?
        .map(|item| Ok(item?.cast_into::<PyString>()?.to_str()?.to_owned()))
        .collect()
}

impl Reader {
    pub fn attrs(&mut self, obj: &Bound<'_, PyAny>) -> PyResult<Rc<SourceAttrs>> {
        let id = obj.as_ptr() as usize;
        if let Some(found) = self.attrs.get(&id) {
            return Ok(found.clone());
        }
        let py = obj.py();
        let optional = |name: &Bound<'_, PyString>| -> PyResult<Option<String>> {
            let v = obj.getattr(name)?;
            Ok(if v.is_none() {
                None
            } else {
                Some(v.extract()?)
            })
        };
        let metadata = obj.getattr(intern!(py, "metadata"))?;
        let attrs = Rc::new(SourceAttrs {
            acl: strings(&obj.getattr(intern!(py, "acl"))?)?,
            modified_at: obj.getattr(intern!(py, "modified_at"))?.extract()?,
            authority: obj.getattr(intern!(py, "authority"))?.extract()?,
            uri: optional(intern!(py, "uri"))?,
            title: optional(intern!(py, "title"))?,
            metadata: if metadata.is_none() {
                None
            } else {
                Some(value_of(&metadata)?)
            },
            preferred: obj.getattr(intern!(py, "preferred"))?.extract()?,
            outdated_by: obj.getattr(intern!(py, "outdated_by"))?.extract()?,
        });
        self.attrs.insert(id, attrs.clone());
        Ok(attrs)
    }

    pub fn rank(&self, obj: &Bound<'_, PyAny>) -> PyResult<Option<Rank>> {
        if obj.is_none() {
            return Ok(None);
        }
        let py = obj.py();
        Ok(Some(Rank {
            authority: obj.getattr(intern!(py, "authority"))?.extract()?,
            modified_at: obj.getattr(intern!(py, "modified_at"))?.extract()?,
            length: obj.getattr(intern!(py, "length"))?.extract()?,
            source_id: obj.getattr(intern!(py, "source_id"))?.extract()?,
            content_hash: obj.getattr(intern!(py, "content_hash"))?.extract()?,
            preferred: obj.getattr(intern!(py, "preferred"))?.extract()?,
            outdated: obj.getattr(intern!(py, "outdated"))?.extract()?,
        }))
    }

    pub fn info(&self, obj: &Bound<'_, PyAny>) -> PyResult<Info> {
        let py = obj.py();
        let role: String = obj.getattr(intern!(py, "role"))?.extract()?;
        Ok(Info {
            seq: obj.getattr(intern!(py, "seq"))?.extract()?,
            role: Role::parse(&role).map_err(|_| PyTypeError::new_err("an info's role"))?,
            rank: self.rank(&obj.getattr(intern!(py, "rank"))?)?,
            readers: strings(&obj.getattr(intern!(py, "readers"))?)?,
            target: obj.getattr(intern!(py, "target"))?.extract()?,
        })
    }

    pub fn mark(&self, obj: &Bound<'_, PyAny>) -> PyResult<Option<PairMark>> {
        if obj.is_none() {
            return Ok(None);
        }
        let py = obj.py();
        Ok(Some(PairMark {
            kind: obj.getattr(intern!(py, "kind"))?.extract()?,
            version: obj.getattr(intern!(py, "version"))?.extract()?,
        }))
    }

    pub fn report(&mut self, obj: &Bound<'_, PyAny>) -> PyResult<Option<MemberReport>> {
        if obj.is_none() {
            return Ok(None);
        }
        let py = obj.py();
        let mut refs = Vec::new();
        for item in obj.getattr(intern!(py, "refs"))?.try_iter()? {
            let item = item?;
            refs.push(Ref {
                source_id: item.getattr(intern!(py, "source_id"))?.extract()?,
                position: item.getattr(intern!(py, "position"))?.extract()?,
                attrs: self.attrs(&item.getattr(intern!(py, "attrs"))?)?,
                text: String::new(),
            });
        }
        Ok(Some(MemberReport {
            jaccard: obj.getattr(intern!(py, "jaccard"))?.extract()?,
            refs,
            count: obj.getattr(intern!(py, "count"))?.extract()?,
            rank: self.rank(&obj.getattr(intern!(py, "rank"))?)?,
        }))
    }
}

/// Builds Python objects of message parts, each attributes object once.
pub struct Writer<'a, 'py> {
    pub py: Python<'py>,
    pub classes: &'a Classes,
    attrs: HashMap<usize, Bound<'py, PyAny>>,
}

impl<'a, 'py> Writer<'a, 'py> {
    pub fn new(py: Python<'py>, classes: &'a Classes) -> Self {
        Writer {
            py,
            classes,
            attrs: HashMap::new(),
        }
    }

    pub fn attrs(&mut self, attrs: &Rc<SourceAttrs>) -> PyResult<Bound<'py, PyAny>> {
        let id = Rc::as_ptr(attrs) as usize;
        if let Some(found) = self.attrs.get(&id) {
            return Ok(found.clone());
        }
        let py = self.py;
        let kwargs = PyDict::new(py);
        kwargs.set_item(intern!(py, "acl"), PyTuple::new(py, &attrs.acl)?)?;
        kwargs.set_item(intern!(py, "modified_at"), attrs.modified_at)?;
        kwargs.set_item(intern!(py, "authority"), attrs.authority)?;
        kwargs.set_item(intern!(py, "uri"), &attrs.uri)?;
        kwargs.set_item(intern!(py, "title"), &attrs.title)?;
        match &attrs.metadata {
            Some(metadata) => {
                kwargs.set_item(intern!(py, "metadata"), value_to_py(py, metadata)?)?
            }
            None => kwargs.set_item(intern!(py, "metadata"), py.None())?,
        }
        kwargs.set_item(intern!(py, "preferred"), attrs.preferred)?;
        kwargs.set_item(intern!(py, "outdated_by"), &attrs.outdated_by)?;
        let obj = self.classes.source_attrs.bind(py).call((), Some(&kwargs))?;
        self.attrs.insert(id, obj.clone());
        Ok(obj)
    }

    pub fn rank(&self, rank: &Option<Rank>) -> PyResult<Bound<'py, PyAny>> {
        let py = self.py;
        match rank {
            None => Ok(py.None().into_bound(py)),
            Some(r) => self.classes.rank.bind(py).call1((
                r.authority,
                r.modified_at,
                r.length,
                &r.source_id,
                &r.content_hash,
                r.preferred,
                r.outdated,
            )),
        }
    }

    pub fn info(&self, info: &Info) -> PyResult<Bound<'py, PyAny>> {
        let py = self.py;
        self.classes.info.bind(py).call1((
            info.seq,
            info.role.name(),
            self.rank(&info.rank)?,
            PyTuple::new(py, &info.readers)?,
            &info.target,
        ))
    }

    pub fn mark(&self, mark: Option<&PairMark>) -> PyResult<Bound<'py, PyAny>> {
        let py = self.py;
        match mark {
            None => Ok(py.None().into_bound(py)),
            Some(m) => self.classes.pair_mark.bind(py).call1((&m.kind, m.version)),
        }
    }

    pub fn report(&mut self, report: Option<&MemberReport>) -> PyResult<Bound<'py, PyAny>> {
        let py = self.py;
        let Some(report) = report else {
            return Ok(py.None().into_bound(py));
        };
        let mut refs = Vec::with_capacity(report.refs.len());
        for r in &report.refs {
            let attrs = self.attrs(&r.attrs)?;
            refs.push(
                self.classes
                    .source_ref
                    .bind(py)
                    .call1((&r.source_id, r.position, attrs))?,
            );
        }
        self.classes.member_report.bind(py).call1((
            report.jaccard,
            PyTuple::new(py, refs)?,
            report.count,
            self.rank(&report.rank)?,
        ))
    }
}
