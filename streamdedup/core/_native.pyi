# The package's Rust extension (native/src/lib.rs): the compiled kernels of the engine.
from collections.abc import Callable, Mapping, Sequence
from typing import Any

class Scheme:
    def __init__(self, num_perm: int, seed: int, shingle_size: int) -> None: ...
    def permutations(self) -> tuple[list[int], list[int]]: ...
    def features(
        self, texts: list[str], bands: int, rows: int, min_shingles: int
    ) -> list[tuple[int, list[str] | None, bytes]]: ...

def signatures(data: Any, offsets: Any, size: int, a: Any, b: Any, out: Any, distinct: Any) -> None: ...
def band_hashes(signatures: Any, perms: int, bands: int, rows: int, out: Any) -> None: ...
def positive_murmur2(data: bytes) -> int: ...
def apply_bands(
    ops: Sequence[tuple[bool, str, int, Sequence[str]]],
    read: Callable[[list[str]], Sequence[bytes | None]],
    limit: int,
) -> tuple[
    list[tuple[str, bytes | None]], list[tuple[str, int, tuple[str, ...], tuple[tuple[str, int], ...]]]
]: ...
def fill_write_batch(
    put: Callable[..., None],
    delete: Callable[..., None],
    family: object,
    prefix: bytes,
    writes: dict[str, bytes | None],
) -> None: ...

class RecordCache:
    def __init__(self, capacity: int) -> None: ...
    def get_many(
        self,
        ns: bytes,
        skip: int,
        keys: list[str],
        fetch: Callable[..., Any],
        chunk: int,
    ) -> list[bytes | None]: ...
    def update(
        self, ns: bytes, writes: Mapping[str, bytes | None] | Mapping[bytes, bytes | None]
    ) -> None: ...
    @property
    def used(self) -> int: ...
    @property
    def capacity(self) -> int: ...
    @property
    def counts(self) -> tuple[int, int]: ...
    def __len__(self) -> int: ...

def normalize_ascii(text: str) -> str | None: ...
def line_hashes(text: str, max_chars: int) -> list[tuple[str, str]] | None: ...
def line_update(
    text: str, max_chars: int, others: Sequence[tuple[str, str]], old: bytes
) -> tuple[bytes, bytes, list[str], int] | None: ...
def source_mapping(
    source_id: str,
    attrs: Any,
    describe: Callable[[Any], tuple[Sequence[str], str, str | None, str | None]],
    chunks: Sequence[str],
    statuses: bytes,
    version: int,
    before: bytes,
    sent: bool,
) -> tuple[bytes, tuple[bytes, list[tuple[int, str]]] | None] | None: ...
def merge_statuses(chunks: Sequence[str], statuses: bytes, incoming: Sequence[bytes]) -> bytes | None: ...
def plain_chunks(
    text: str, headings: bool, max_chars: int, known: dict[str, str] | None, normalize: Callable[[str], str]
) -> tuple[list[str], list[str], list[str]]: ...
def source_refs(
    plains: Sequence[str], originals: Sequence[str], old: Sequence[str], normalize: Callable[[str], str]
) -> tuple[list[str], bytes]: ...
def split_refs(refs: bytes, partitions: int) -> list[tuple[int, bytes]]: ...
def count_lines(
    updates: Sequence[tuple[str, str, int, bool, bytes, Sequence[str]]],
    read: Callable[[list[str]], Sequence[bytes | None]],
    docs: dict[str, int],
    watch: dict[str, set[str]],
    min_docs: int,
    fraction: float,
) -> tuple[
    list[tuple[str, bytes | None]], list[bool], dict[str, int], dict[str, dict[str, tuple[int, str] | None]]
]: ...

class ContentKernel:
    def __init__(
        self,
        classes: dict[str, type],
        params: dict[str, Any],
        criteria: list[str],
        helpers: dict[str, Callable[..., Any]],
        scheme: Scheme,
    ) -> None: ...
    def apply(
        self,
        messages: list[Any],
        read: Callable[[list[str]], Sequence[bytes | None]],
        scan: Callable[[str], list[tuple[str, bytes]]],
    ) -> tuple[list[tuple[str, bytes | None]], list[Any]]: ...

def content_reencode(kind: str, raw: bytes) -> bytes: ...
def json_from_msgpack(raw: bytes) -> bytes: ...
def record_fields() -> dict[str, list[str]]: ...
