//! The content stage, compiled, for Python: messages read from the package's objects, the batch run by the core
//! (`streamdedup_kernels::stage`) with a Python host, the writes and emitted objects handed back.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use streamdedup_kernels::policy::{Criterion, Policy};
use streamdedup_kernels::stage::{self, Params};

use super::host::{Helpers, PyHost};
use super::messages::{read_message, read_source_refs};
use super::py::{self, Classes, Writer};

/// What a batch writes, ``(key, value or None)``, and the messages and outputs it emits.
type Applied<'py> = (
    Vec<(String, Option<Bound<'py, PyBytes>>)>,
    Vec<Bound<'py, PyAny>>,
);

/// The content stage, compiled: built once per engine, applied to each batch of one partition.
#[pyclass(frozen, module = "streamdedup.core._native")]
pub struct ContentKernel {
    classes: Classes,
    params: Params,
    policy: Policy,
    helpers: Helpers,
}

fn required<'py>(d: &Bound<'py, PyDict>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    d.get_item(name)?
        .ok_or_else(|| PyTypeError::new_err(format!("missing {name}")))
}

#[pymethods]
impl ContentKernel {
    /// ContentKernel(classes, params, criteria, helpers, scheme)
    /// --
    ///
    /// ``classes``: the message, output and record classes by name; ``params``: the engine's parameters the stage
    /// reads, by name; ``criteria``: the canonical policy's; ``helpers``: the Python functions it calls back;
    /// ``scheme``: the compiled signature scheme (`SignatureScheme.compiled`), which it calls for a new text's
    /// features.
    #[new]
    fn new(
        classes: &Bound<'_, PyDict>,
        params: &Bound<'_, PyDict>,
        criteria: Vec<String>,
        helpers: &Bound<'_, PyDict>,
        scheme: Py<crate::Scheme>,
    ) -> PyResult<Self> {
        let criteria = criteria
            .iter()
            .map(|c| {
                Criterion::parse(c)
                    .ok_or_else(|| PyValueError::new_err(format!("unknown policy criterion {c:?}")))
            })
            .collect::<PyResult<_>>()?;
        Ok(ContentKernel {
            classes: Classes::from_dict(classes)?,
            params: Params {
                threshold: required(params, "threshold")?.extract()?,
                min_shingles: required(params, "min_shingles")?.extract()?,
                max_candidates: required(params, "max_candidates")?.extract()?,
                max_chunk_sources: required(params, "max_chunk_sources")?.extract()?,
                shingle_size: required(params, "shingle_size")?.extract()?,
                num_perm: required(params, "num_perm")?.extract()?,
                bands: required(params, "bands")?.extract()?,
                rows: required(params, "rows")?.extract()?,
                dismiss_below: required(params, "dismiss_below")?.extract()?,
            },
            policy: Policy { criteria },
            helpers: Helpers {
                normalize: required(helpers, "normalize")?.unbind(),
                fact_tokens: required(helpers, "fact_tokens")?.unbind(),
                describe_fact_difference: required(helpers, "describe_fact_difference")?.unbind(),
                format_timestamp: required(helpers, "format_timestamp")?.unbind(),
                scheme,
            },
        })
    }

    /// apply(messages, read, scan)
    /// --
    ///
    /// Apply a batch of messages for one partition. ``read(keys)`` returns the stored values of keys (None where
    /// absent), ``scan(prefix)`` every (key, value) under a prefix. Return the writes, ``(key, value or None)``,
    /// and the messages and outputs the batch emits, in order.
    fn apply<'py>(
        &self,
        py: Python<'py>,
        messages: Vec<Bound<'py, PyAny>>,
        read: Bound<'py, PyAny>,
        scan: Bound<'py, PyAny>,
    ) -> PyResult<Applied<'py>> {
        let mut reader = py::Reader::default();
        let mut parsed = Vec::with_capacity(messages.len());
        let source_refs = self.classes.source_refs.bind(py);
        for message in &messages {
            if message.get_type().is(source_refs) {
                read_source_refs(message, &mut reader, &mut parsed)?;
            } else {
                parsed.push(read_message(message, &self.classes, &mut reader)?);
            }
        }
        let mut host = PyHost {
            py,
            helpers: &self.helpers,
            make: Writer::new(py, &self.classes),
            read: &read,
            scan: &scan,
            out: Vec::new(),
        };
        let writes = stage::apply(&mut host, &self.params, &self.policy, parsed)?;
        let writes = writes
            .into_iter()
            .map(|(k, v)| (k, v.map(|v| PyBytes::new(py, &v))))
            .collect();
        Ok((writes, host.out))
    }
}
