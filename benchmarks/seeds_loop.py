"""The seed articles' deduplication loop over a folder of text files, as their reader writes it with datasketch.

    python benchmarks/seeds_loop.py FOLDER

Each file is cut into paragraphs at blank lines; each paragraph is normalized as the articles normalize (NFKC,
lower case, whitespace collapsed, stripped) and hashed with SHA-256; texts seen before are skipped; the distinct
ones get ``MinHash.bulk`` signatures of their word 5-gram shingles (128 permutations), and each queries a
``MinHashLSH`` (threshold 0.8) and is inserted. It keeps no mapping, ACL, version or output. It imports
datasketch and the standard library only, so that its start is what a user's script pays. Prints the chunk
positions, the distinct texts and the texts that had a near candidate.
"""

from __future__ import annotations

import hashlib
import re
import sys
import unicodedata
from pathlib import Path

from datasketch import MinHash, MinHashLSH

NUM_PERM = 128


def normalize(text: str) -> str:
    """Normalize as the articles do: NFKC, lower case, whitespace collapsed, stripped."""
    text = unicodedata.normalize("NFKC", text)
    text = text.lower()
    text = re.sub(r"\s+", " ", text)
    return text.strip()


def shingles(text: str, n: int = 5) -> set[str]:
    """Return the word ``n``-grams of a normalized text (the text itself when it has fewer words)."""
    words = text.split()
    if len(words) < n:
        return {" ".join(words)}
    return {" ".join(words[i : i + n]) for i in range(len(words) - n + 1)}


def main(folder: Path) -> tuple[int, int, int]:
    """Deduplicate the paragraphs of ``folder``'s files; return positions, distinct texts and near candidates."""
    seen: set[str] = set()
    distinct: list[tuple[str, str]] = []
    positions = 0
    for path in sorted(folder.rglob("*.txt")):
        for paragraph in re.split(r"\n\s*\n", path.read_text(encoding="utf-8")):
            if not paragraph.strip():
                continue
            positions += 1
            text = normalize(paragraph)
            key = hashlib.sha256(text.encode("utf-8")).hexdigest()
            if key in seen:
                continue
            seen.add(key)
            distinct.append((key, text))
    signatures = MinHash.bulk(
        [[s.encode("utf-8") for s in shingles(text)] for _, text in distinct], num_perm=NUM_PERM
    )
    lsh = MinHashLSH(threshold=0.8, num_perm=NUM_PERM)
    near = 0
    for (key, _), signature in zip(distinct, signatures, strict=True):
        if lsh.query(signature):
            near += 1
        lsh.insert(key, signature)
    return positions, len(distinct), near


if __name__ == "__main__":
    print(*main(Path(sys.argv[1])))
