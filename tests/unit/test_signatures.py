import numpy as np
import pytest
from datasketch import LeanMinHash, MinHash
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.core import _native
from streamdedup.core.normalize import normalize
from streamdedup.core.numpy_kernels import band_hashes_numpy, numpy_kernel, permutations_numpy
from streamdedup.core.shingles import jaccard, jaccard_of_sets, shingle_set, shingles
from streamdedup.core.signatures import SignatureScheme, estimate_jaccard, shingle_hash32
from streamdedup.core.sketches import sketches

SCHEME = SignatureScheme(num_perm=128, seed=1, shingle_size=5)
WORDS = st.sampled_from("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi".split())


def test_shingles_of_short_text_is_one_shingle():
    assert shingles("a b", 5) == ["a b"]
    assert shingles("", 5) == []


def test_exact_jaccard():
    assert jaccard("a b c d e f", "a b c d e f", 5) == 1.0
    assert jaccard_of_sets(frozenset(), frozenset()) == 1.0
    assert jaccard("a b c d e f g", "a b c d e f h", 5) == pytest.approx(2 / 4)


# Normalized text separates words by single spaces and holds no other whitespace.
TEXT_WORDS = st.text(
    alphabet=st.characters(exclude_categories=["Cs", "Zs", "Zl", "Zp", "Cc"]), min_size=1, max_size=8
).filter(lambda w: not any(c.isspace() for c in w))


@given(st.lists(st.lists(st.one_of(WORDS, TEXT_WORDS), min_size=0, max_size=40), min_size=1, max_size=5))
def test_batch_signatures_equal_datasketch_minhash(texts):
    normalized = [" ".join(t) for t in texts]
    batch, distinct = SCHEME.signatures(normalized)
    for text, row, count in zip(normalized, batch, distinct, strict=True):
        reference = MinHash(num_perm=128, seed=1, hashfunc=shingle_hash32)
        for shingle in shingles(text, 5):
            reference.update(shingle.encode("utf-8"))
        assert np.array_equal(reference.hashvalues, row)
        assert count == len(set(shingles(text, 5)))


@given(st.lists(WORDS, min_size=1, max_size=60))
def test_signature_round_trips_through_bytes(words):
    signature = SCHEME.signatures([" ".join(words)])[0][0]
    data = SCHEME.to_bytes(signature)
    assert len(data) == SCHEME.byte_size
    assert np.array_equal(SCHEME.from_bytes(data), signature)
    lean = LeanMinHash.deserialize(data, byteorder="<")
    assert lean.seed == 1 and lean.scheme == "affine32"
    assert np.array_equal(lean.hashvalues, signature)


def test_bytes_of_another_scheme_are_refused():
    other = SignatureScheme(num_perm=64, seed=2)
    data = other.to_bytes(other.signatures(["a b c"])[0][0])
    with pytest.raises(ValueError, match="seed and permutation count"):
        SCHEME.from_bytes(data)


@given(st.lists(WORDS, min_size=60, max_size=120), st.integers(0, 40), st.randoms(use_true_random=False))
def test_jaccard_estimate_is_within_tolerance_of_exact(words, edits, rnd):
    base = " ".join(words)
    changed = list(words)
    for _ in range(edits):
        changed[rnd.randrange(len(changed))] = rnd.choice(["omega", "psi", "chi", "phi"])
    other = normalize(" ".join(changed))
    a, b = SCHEME.signatures([base, other])[0]
    exact = jaccard_of_sets(shingle_set(base, 5), shingle_set(other, 5))
    # 128 permutations: standard error sqrt(J(1-J)/128) <= 0.045; five standard errors bound a flaky tail.
    assert abs(estimate_jaccard(a, b) - exact) <= 0.23


def test_mean_estimate_error_is_small_over_many_pairs():
    import random

    rnd = random.Random(7)
    vocabulary = [f"w{i}" for i in range(300)]
    errors = []
    for _ in range(200):
        words = [rnd.choice(vocabulary) for _ in range(rnd.randint(40, 200))]
        changed = [rnd.choice(vocabulary) if rnd.random() < 0.05 else w for w in words]
        a, b = " ".join(words), " ".join(changed)
        sa, sb = SCHEME.signatures([a, b])[0]
        errors.append(abs(estimate_jaccard(sa, sb) - jaccard(a, b, 5)))
    assert sum(errors) / len(errors) < 0.04


def test_band_keys_are_deterministic_and_per_band():
    signature = SCHEME.signatures(["one two three four five six seven"])[0][0]
    keys = SCHEME.band_keys(signature, 21, 6)
    assert keys == SCHEME.band_keys(signature.copy(), 21, 6)
    assert len(set(keys)) == 21 and all(k.startswith(f"{i:03d}") and len(k) == 19 for i, k in enumerate(keys))
    assert SCHEME.band_keys_many(np.empty((0, 128), dtype=np.uint32), 21, 6) == []


_VALUES = st.integers(0, 3).map(lambda v: np.uint32(v * 0x9E3779B1 % 2**32))


@given(st.lists(st.lists(_VALUES, min_size=12, max_size=12), min_size=1, max_size=12))
def test_two_signatures_share_a_band_key_exactly_when_they_agree_on_its_rows(rows_of):
    # 12 values in 4 bands of 3 rows, each value one of four: agreeing bands are common.
    signatures = np.array(rows_of, dtype=np.uint32)
    many = SCHEME.band_keys_many(signatures, 4, 3)
    assert many == [
        SCHEME.band_keys(signature, 4, 3) for signature in signatures
    ]  # all at once, or one by one
    for a, keys_a in zip(signatures, many, strict=True):
        for b, keys_b in zip(signatures, many, strict=True):
            for band in range(4):
                same_rows = bool((a[3 * band : 3 * band + 3] == b[3 * band : 3 * band + 3]).all())
                assert (keys_a[band] == keys_b[band]) == same_rows


def test_band_keys_ignore_values_past_the_last_band():
    signature = SCHEME.signatures(["one two three four five six seven"])[0][0]
    changed = signature.copy()
    changed[126:] += np.uint32(1)  # 21 bands of 6 rows use the first 126 of 128 values
    assert SCHEME.band_keys(changed, 21, 6) == SCHEME.band_keys(signature, 21, 6)


def _kernel_rows(kernel, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    encoded = [text.encode("utf-8") for text in texts]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    data = np.frombuffer(b"".join(encoded), dtype=np.uint8) if offsets[-1] else np.zeros(1, dtype=np.uint8)
    out = np.zeros((len(encoded), SCHEME.num_perm), dtype=np.uint32)
    distinct = np.full(len(encoded), -1, dtype=np.int64)
    kernel(data, offsets, SCHEME.shingle_size, *SCHEME.permutations, out, distinct)
    return out, distinct


# Raw kernel input is any bytes: runs of spaces, leading and trailing ones, words longer than the NumPy kernel
# hashes together (64 bytes), multi-byte characters.
RAW_WORDS = st.one_of(WORDS, TEXT_WORDS, st.text(alphabet="xyé", min_size=60, max_size=140))


@given(
    st.lists(
        st.lists(st.tuples(RAW_WORDS, st.sampled_from([" ", "  ", "   "])), max_size=14).map(
            lambda pairs: "".join(w + gap for w, gap in pairs)
        ),
        max_size=6,
    ),
    st.booleans(),
)
def test_the_numpy_kernel_equals_the_compiled_one(texts, leading_space):
    texts = [" " + t if leading_space else t for t in texts]
    compiled_rows, compiled_distinct = _kernel_rows(_native.signatures, texts)
    numpy_rows, numpy_distinct = _kernel_rows(numpy_kernel, texts)
    assert np.array_equal(compiled_rows, numpy_rows)
    assert np.array_equal(compiled_distinct, numpy_distinct)


@given(
    st.lists(st.lists(st.integers(0, 2**32 - 1), min_size=128, max_size=128), max_size=8),
    st.sampled_from([(21, 6), (4, 3), (1, 128), (32, 4)]),
)
def test_the_compiled_band_hashes_equal_the_numpy_ones(rows_of, shape):
    signatures = np.array(rows_of, dtype=np.uint32).reshape(len(rows_of), 128)
    bands, rows = shape
    assert np.array_equal(
        SCHEME.band_hashes(signatures, bands, rows), band_hashes_numpy(signatures, bands, rows)
    )


@given(st.integers(0, 2**32 - 1), st.integers(1, 700))
def test_the_compiled_permutations_are_the_ones_numpy_draws_for_datasketch(seed, num_perm):
    # 700 permutations take two of the Mersenne Twister's 624-word refills.
    a, b = SignatureScheme(num_perm, seed, 5).permutations
    want_a, want_b = permutations_numpy(seed, num_perm)
    assert np.array_equal(a, want_a) and np.array_equal(b, want_b)


def test_the_permutations_are_datasketchs():
    a, b = SCHEME.permutations
    assert np.array_equal(np.stack([a, b]), MinHash(num_perm=128, seed=1).permutations)


@given(
    st.lists(st.lists(st.one_of(WORDS, TEXT_WORDS), max_size=12).map(" ".join), max_size=6),
    st.sampled_from([(21, 6), (4, 3), (32, 4)]),
    st.integers(0, 6),
)
def test_features_are_the_signatures_band_keys_and_sketches_computed_apart(texts, shape, min_shingles):
    bands, rows = shape
    signatures, distinct = SCHEME.signatures(texts)
    features = SCHEME.features(texts, bands, rows, min_shingles)
    assert [d for d, _, _ in features] == distinct.tolist()
    assert [s for _, _, s in features] == sketches(signatures)
    for (count, keys, _), signature in zip(features, signatures, strict=True):
        assert keys == (SCHEME.band_keys(signature, bands, rows) if count >= min_shingles else None)


def test_the_compiled_kernels_refuse_buffers_of_the_wrong_shape_kind_or_byte_order():
    data, offsets = np.frombuffer(b"a b", dtype=np.uint8), np.array([0, 3], dtype=np.int64)
    a, b = SCHEME.permutations
    out, distinct = np.empty((1, 128), np.uint32), np.empty(1, np.int64)
    with pytest.raises(ValueError, match="offsets must rise"):
        _native.signatures(data, np.array([0, 4], dtype=np.int64), 5, a, b, out, distinct)
    with pytest.raises(ValueError, match="out has 256 slots, not the 128"):
        _native.signatures(data, offsets, 5, a, b, np.empty((2, 128), np.uint32), distinct)
    with pytest.raises(ValueError, match="writable"):
        _native.signatures(data, offsets, 5, a, b, np.frombuffer(bytes(512), dtype=np.uint32), distinct)
    with pytest.raises(BufferError):
        _native.signatures(data, offsets.astype(np.int32), 5, a, b, out, distinct)
    with pytest.raises(ValueError, match="byte order"):
        _native.signatures(data, offsets, 5, a.astype(">u4"), b, out, distinct)
    with pytest.raises(ValueError, match="byte order"):
        _native.band_hashes(out, 128, 21, 6, np.empty((1, 21), ">u8"))
    with pytest.raises(ValueError, match="out has 20 slots, not the 21"):
        _native.band_hashes(out, 128, 21, 6, np.empty((1, 20), np.uint64))
    with pytest.raises(ValueError, match="bands x rows"):
        _native.band_hashes(out, 128, 22, 6, np.empty((1, 22), np.uint64))
    with pytest.raises(ValueError, match="bands x rows"):
        _native.band_hashes(out, 128, 2**33, 2**31, np.empty((1, 1), np.uint64))
    with pytest.raises(ValueError, match="bands x rows"):
        SCHEME.features(["a b"], 2**33, 2**31, 0)
    with pytest.raises(ValueError, match="seed"):
        SignatureScheme(128, 2**32, 5)


def test_the_compiled_kernels_compute_on_copies_so_outputs_may_share_memory_with_inputs():
    data, offsets = np.frombuffer(b"one two three four five six", dtype=np.uint8), np.array([0, 27], np.int64)
    a, b = SCHEME.permutations
    want, _ = SCHEME.signatures(["one two three four five six"])
    shared = a.copy()  # the output is the permutations' own memory
    _native.signatures(data, offsets, 5, shared, b, shared.reshape(1, 128), np.empty(1, np.int64))
    assert np.array_equal(shared, want[0])
    hashes = SCHEME.band_hashes(want, 21, 6)
    both = np.zeros(128, np.uint64)  # signatures in the first half, their band hashes written over them
    both.view(np.uint32)[:128] = want[0]
    _native.band_hashes(both.view(np.uint32)[:128].reshape(1, 128), 128, 21, 6, both[:21].reshape(1, 21))
    assert np.array_equal(both[:21], hashes[0])


def test_band_hashes_take_any_shape_numpy_took():
    signature = SCHEME.signatures(["one two three four five six seven"])[0][0]
    assert SCHEME.band_keys(signature.tolist(), 21, 6) == SCHEME.band_keys(signature, 21, 6)
    assert np.array_equal(
        SCHEME.band_hashes(signature[None, :].astype(np.int64), 21, 6),
        SCHEME.band_hashes(signature[None, :], 21, 6),
    )
    assert SCHEME.band_hashes(signature[None, :], 0, 6).shape == (1, 0)
    assert SCHEME.band_keys_many(np.empty((0, 0), dtype=np.uint32), 21, 6) == []
    assert SCHEME.permutations[0] is SCHEME.permutations[0]
