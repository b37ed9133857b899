"""Stage messages on internal topics: one Kafka message carries a batch for one partition.

Faust's per-message overhead, not Kafka, limits a Python stream processor (design §2, throughput notes), so the
Kafka driver never sends one Kafka message per stage message. Everything one handler call produces for a stage
partition travels as one JSON array, sent to that partition explicitly (the partitioner is Kafka's, see
:mod:`streamdedup.core.partitioning`), split only where a batch would exceed the size limit.

>>> from streamdedup.core.messages import BandJoin
>>> [decode_batch(b) for b in encode_batches([BandJoin("h", 1, ("k",))], max_bytes=1000)]
[[BandJoin(content_hash='h', epoch=1, band_keys=('k',))]]
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import msgspec

from streamdedup.core.messages import Message

__all__ = ["decode_batch", "encode_batches"]

_encoder = msgspec.json.Encoder()
_decoder: msgspec.json.Decoder[list[Message]] = msgspec.json.Decoder(list[Message])


def encode_batches(messages: Sequence[Message], *, max_bytes: int) -> Iterator[bytes]:
    """Encode messages as JSON arrays of at most ``max_bytes`` each (one message may exceed it alone)."""
    whole = _encoder.encode(messages)
    if len(whole) <= max_bytes or len(messages) == 1:  # the common case: one array, encoded in one call
        yield whole
        return
    parts: list[bytes] = []
    size = 2
    for message in messages:
        encoded = _encoder.encode(message)
        if parts and size + len(encoded) + 1 > max_bytes:
            yield b"[" + b",".join(parts) + b"]"
            parts, size = [], 2
        parts.append(encoded)
        size += len(encoded) + 1
    if parts:
        yield b"[" + b",".join(parts) + b"]"


def decode_batch(data: bytes) -> list[Message]:
    """Decode one batch written by :func:`encode_batches`."""
    return _decoder.decode(data)
