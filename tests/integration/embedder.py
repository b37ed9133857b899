"""A deterministic embedder for the index tests: hashed words, and a log of every text it was asked to embed.

``streamdedup index`` loads it with ``STREAMDEDUP_EMBEDDER=callable:tests.integration.embedder:embedder``; each
text it embeds is appended as a JSON line to the file ``STREAMDEDUP_TEST_EMBED_LOG`` names.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence

import numpy as np


class HashedWords:
    model_id = "test/hashed-words"
    dimensions = 64

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with open(os.environ["STREAMDEDUP_TEST_EMBED_LOG"], "a", encoding="utf-8") as log:
            log.writelines(json.dumps(text) + "\n" for text in texts)
        vectors = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                vectors[row, hashlib.sha256(word.encode()).digest()[0] % self.dimensions] += 1.0
        vectors[:, 0] += 1e-3  # no zero vector
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


embedder = HashedWords()
