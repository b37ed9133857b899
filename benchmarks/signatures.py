"""Signatures: chunks/s from normalized text to a 128-permutation MinHash, and estimator accuracy.

    python -m benchmarks.signatures

Same Django chunks for every method, full path from normalized text (shingling included):

- the seeds' loop: ``MinHash.update`` once per shingle;
- datasketch ``update_batch`` and ``MinHash.bulk`` (the baseline of the ratios);
- rensa's ``RMinHash`` (Rust), fed the shingle strings;
- streamdedup's ``SignatureScheme.signatures`` (one compiled pass over a batch's UTF-8 bytes).

Accuracy: mean absolute error of the Jaccard estimate against the exact shingle-set Jaccard, on the same pairs
for every method: the paragraphs a Django release edited (same file, same position, different text) and
random pairs of chunks.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
from datasketch import MinHash
from rensa import RMinHash

from benchmarks.common import best_of, django_chunks, django_docs, save
from streamdedup.core.chunking import chunk_document
from streamdedup.core.normalize import normalize
from streamdedup.core.shingles import jaccard_of_sets, shingle_set, shingles
from streamdedup.core.signatures import SignatureScheme, estimate_jaccard

SIZE = 5
PERM = 128


def _seeds_loop(texts: list[str]) -> None:
    for text in texts:
        m = MinHash(num_perm=PERM, seed=1)
        for shingle in shingles(text, SIZE):
            m.update(shingle.encode("utf-8"))


def _update_batch(texts: list[str]) -> None:
    for text in texts:
        m = MinHash(num_perm=PERM, seed=1)
        m.update_batch([s.encode("utf-8") for s in shingles(text, SIZE)])


def _bulk(texts: list[str]) -> None:
    MinHash.bulk([[s.encode("utf-8") for s in shingles(text, SIZE)] for text in texts], num_perm=PERM, seed=1)


def _rensa(texts: list[str]) -> None:
    for text in texts:
        m = RMinHash(num_perm=PERM, seed=1)
        m.update(shingles(text, SIZE))
        m.digest()


def _throughput(texts: list[str]) -> dict[str, float]:
    scheme = SignatureScheme(PERM, 1, SIZE)
    scheme.signatures(texts[:10])  # compile once, outside the timing
    methods: dict[str, tuple[Any, int]] = {
        "seeds' per-shingle loop": (_seeds_loop, 1500),
        "datasketch update_batch": (_update_batch, 5000),
        "datasketch bulk": (_bulk, 10000),
        "rensa RMinHash": (_rensa, 20000),
        "streamdedup": (scheme.signatures, len(texts)),
    }
    rates = {}
    for name, (run, count) in methods.items():
        sample = texts[:count]
        rates[name] = len(sample) / best_of(lambda run=run, sample=sample: run(sample), repeat=3)
        print(f"{name:28s} {rates[name]:12,.0f} chunks/s")
    return rates


def _pairs(rng: random.Random) -> list[tuple[str, str]]:
    """Return pairs of real chunks of Django 4.2 and 5.2 that overlap (0.2 <= J < 1), and some random pairs.

    Pairs are found with an inverted index of exact shingles, so no MinHash method chooses its own test pairs.
    """
    root = django_docs(("4.2.30", "5.2.19"))

    def chunks_of(version: str) -> list[str]:
        out = []
        for path in sorted((root / version).rglob("*.txt")):
            for chunk in chunk_document(path.read_text(encoding="utf-8"), "text/plain", max_chars=2000):
                text = normalize(chunk.plain)
                if len(text.split()) >= 15:
                    out.append(text)
        return sorted(set(out))

    old, new = chunks_of("4.2.30"), chunks_of("5.2.19")
    index: dict[str, list[int]] = {}
    for i, text in enumerate(new):
        for shingle in shingle_set(text, SIZE):
            index.setdefault(shingle, []).append(i)
    near = []
    for text in old:
        sets = shingle_set(text, SIZE)
        candidates = {i for s in sets for i in index.get(s, ())[:50]}
        for i in candidates:
            similarity = jaccard_of_sets(sets, shingle_set(new[i], SIZE))
            if 0.2 <= similarity < 1.0:
                near.append((text, new[i]))
    random_pairs = [(rng.choice(old), rng.choice(new)) for _ in range(500)]
    return rng.sample(near, min(3000, len(near))) + random_pairs


def _accuracy(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    scheme = SignatureScheme(PERM, 1, SIZE)
    exact = np.array([jaccard_of_sets(shingle_set(a, SIZE), shingle_set(b, SIZE)) for a, b in pairs])
    ours, _ = scheme.signatures([t for pair in pairs for t in pair])
    ours_estimates = np.array([estimate_jaccard(ours[2 * i], ours[2 * i + 1]) for i in range(len(pairs))])
    datasketch_estimates = []
    rensa_estimates = []
    for a, b in pairs:
        ma, mb = MinHash(num_perm=PERM, seed=1), MinHash(num_perm=PERM, seed=1)
        ma.update_batch([s.encode("utf-8") for s in shingles(a, SIZE)])
        mb.update_batch([s.encode("utf-8") for s in shingles(b, SIZE)])
        datasketch_estimates.append(ma.jaccard(mb))
        ra, rb = RMinHash(num_perm=PERM, seed=1), RMinHash(num_perm=PERM, seed=1)
        ra.update(shingles(a, SIZE))
        rb.update(shingles(b, SIZE))
        rensa_estimates.append(ra.jaccard(rb))
    result = {
        "pairs": len(pairs),
        "mean exact jaccard": float(exact.mean()),
        "mae": {
            "datasketch MinHash (SHA-1)": float(np.abs(np.array(datasketch_estimates) - exact).mean()),
            "rensa RMinHash": float(np.abs(np.array(rensa_estimates) - exact).mean()),
            "streamdedup": float(np.abs(ours_estimates - exact).mean()),
        },
    }
    for name, mae in result["mae"].items():
        print(f"MAE {name:30s} {mae:.4f}")
    return result


def _windows(chunks: list[str], size: int) -> list[str]:
    words = " ".join(chunks).split()
    return [" ".join(words[i : i + size]) for i in range(0, len(words) - size, size)]


def _measure(label: str, texts: list[str]) -> dict[str, Any]:
    words = np.array([len(t.split()) for t in texts])
    print(f"{label}: {len(texts)} chunks, {words.mean():.0f} words on average")
    rates = _throughput(texts)
    return {
        "chunks": len(texts),
        "mean_words": float(words.mean()),
        "chunks_per_second": rates,
        "ratio_to_datasketch_bulk": {name: rate / rates["datasketch bulk"] for name, rate in rates.items()},
        "ratio_to_rensa": {name: rate / rates["rensa RMinHash"] for name, rate in rates.items()},
    }


def main() -> None:
    rng = random.Random(42)
    chunks = [c for c in django_chunks() if len(c.split()) >= 15]
    rng.shuffle(chunks)
    corpora = {
        "Django chunks as the engine cuts them": _measure("django", chunks[:40000]),
        "180-word windows of the same text": _measure("180 words", _windows(chunks, 180)[:20000]),
    }
    accuracy = _accuracy(_pairs(rng))
    save("signatures", {"corpora": corpora, "accuracy": accuracy})


if __name__ == "__main__":
    main()
