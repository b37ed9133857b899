"""Sketches of signatures: exact agreement counts, and a dismissal bound that a pair at the threshold keeps."""

import math
import random

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.core.shingles import jaccard
from streamdedup.core.signatures import SignatureScheme
from streamdedup.core.sketches import DISMISS_ERROR, agreements, dismiss_below, estimate, sketches

WORDS = [f"w{i}" for i in range(400)]


def _fields(signature: np.ndarray) -> list[int]:
    return [int(v) for v in (signature.astype(np.uint32) * np.uint32(0x9E3779B1)) >> np.uint32(30)]


@given(st.integers(1, 300), st.integers(0, 2**32 - 1), st.floats(0.0, 1.0))
def test_agreements_count_the_equal_two_bit_fields(width, seed, share):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2**32, width, dtype=np.uint32)
    b = np.where(rng.random(width) < share, a, rng.integers(0, 2**32, width, dtype=np.uint32)).astype(
        np.uint32
    )
    sa, sb = sketches(np.stack([a, b]))
    assert len(sa) == -(-width // 4)
    assert agreements(sa, sb, width) == sum(x == y for x, y in zip(_fields(a), _fields(b), strict=True))
    assert agreements(sa, sa, width) == width


def _binomial_below(count: int, fields: int, q: float) -> float:
    return sum(math.comb(fields, k) * q**k * (1 - q) ** (fields - k) for k in range(count))


def test_the_dismissal_bound_is_the_largest_that_keeps_a_pair_at_the_threshold():
    for threshold in (0.5, 0.7, 0.8, 0.9, 0.95):
        for fields in (32, 128, 256):
            c = dismiss_below(threshold, fields)
            q = threshold + (1 - threshold) / 4
            assert _binomial_below(c, fields, q) <= DISMISS_ERROR < _binomial_below(c + 1, fields, q)
    assert dismiss_below(0.9, 128) > dismiss_below(0.8, 128) > dismiss_below(0.5, 128)
    assert dismiss_below(1.0, 128) == 0


def test_texts_agree_as_the_binomial_model_says_so_far_pairs_are_dismissed_and_near_ones_kept():
    # Pairs at the threshold and above are never dismissed; pairs that share half their words almost always are.
    scheme = SignatureScheme(128, 1, 5)
    rng = random.Random(3)
    needed = dismiss_below(0.8, 128)
    near_agreed, half_dismissed, halves = [], 0, 0
    for _ in range(300):
        base = [rng.choice(WORDS) for _ in range(120)]
        near = list(base)
        near[rng.randrange(len(near))] = "changed"
        half = base[:60] + [rng.choice(WORDS) for _ in range(60)]
        texts = [" ".join(base), " ".join(near), " ".join(half)]
        signatures, _ = scheme.signatures(texts)
        a, b, c = sketches(signatures)
        assert jaccard(texts[0], texts[1], 5) >= 0.9
        near_agreed.append(agreements(a, b, 128))
        assert jaccard(texts[0], texts[2], 5) < 0.4
        halves += 1
        half_dismissed += agreements(a, c, 128) < needed
    assert min(near_agreed) >= needed
    assert half_dismissed / halves > 0.95
    assert abs(estimate(round(sum(near_agreed) / len(near_agreed)), 128) - 0.95) < 0.05


def test_the_estimate_inverts_the_chance_of_agreeing():
    assert estimate(128, 128) == 1.0
    assert estimate(32, 128) == 0.0
    assert estimate(0, 128) == 0.0
    assert abs(estimate(80, 128) - 0.5) < 1e-9
