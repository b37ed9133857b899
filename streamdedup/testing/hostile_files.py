"""Hostile files built in code, which a converter must refuse or survive, for tests and benchmarks.

Every file is made here, from fixed texts and seeds, so two runs write the same bytes. :func:`write_hostile`
writes a truncated PDF (the first half of the policy of :mod:`streamdedup.testing.policy_files`), an encrypted
PDF, DOCX zip bombs (:func:`write_zip_bomb`: one whose headers tell the truth, one whose headers understate the
size), random bytes named ``.pdf``, and a PDF with no text at all, as a scanned page is.

>>> crc32_of_repeats(BOMB_BYTE, 3) == zlib.crc32(BOMB_BYTE * 3)
True
"""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from reportlab.lib.pagesizes import A4
from reportlab.lib.pdfencrypt import StandardEncryption
from reportlab.lib.units import cm
from reportlab.pdfgen.canvas import Canvas

from streamdedup.testing.policy_files import ZIP_TIME, policy_blocks, render_policy_pdf

__all__ = [
    "BOMB_BYTE",
    "Hostile",
    "ZipBomb",
    "crc32_of_repeats",
    "pdf_bomb",
    "write_hostile",
    "write_zip_bomb",
]

# ---------------------------------------------------------------------------------------------------------------
# Zip bombs

#: The byte a zip bomb's document repeats.
BOMB_BYTE = b"A"
_BLOCK = 1 << 20


def _gf2_times(matrix: Sequence[int], vector: int) -> int:
    total, row = 0, 0
    while vector:
        if vector & 1:
            total ^= matrix[row]
        vector >>= 1
        row += 1
    return total


def _gf2_square(matrix: Sequence[int]) -> list[int]:
    return [_gf2_times(matrix, matrix[row]) for row in range(32)]


def _crc32_combine(crc1: int, crc2: int, length2: int) -> int:
    """The CRC-32 of ``a + b`` from ``crc32(a)``, ``crc32(b)`` and ``len(b)`` (zlib's crc32_combine)."""
    if length2 <= 0:
        return crc1
    operator = [0xEDB88320] + [1 << row for row in range(31)]  # appends one zero bit
    for _ in range(3):
        operator = _gf2_square(operator)  # two, four, eight zero bits: one zero byte
    while length2:  # each bit of the length: append 2**k zero bytes
        if length2 & 1:
            crc1 = _gf2_times(operator, crc1)
        length2 >>= 1
        operator = _gf2_square(operator)
    return crc1 ^ crc2


def crc32_of_repeats(data: bytes, times: int) -> int:
    """Return ``zlib.crc32(data * times)`` without making it.

    >>> crc32_of_repeats(b"abc", 1000) == zlib.crc32(b"abc" * 1000)
    True
    """
    crc, power, length = 0, zlib.crc32(data), len(data)
    while times:
        if times & 1:
            crc = _crc32_combine(crc, power, length)
        power = _crc32_combine(power, power, length)
        length *= 2
        times >>= 1
    return crc


@dataclass(frozen=True)
class ZipBomb:
    """A DOCX whose ``member`` inflates to ``true_size`` bytes; its ZIP headers say ``declared_size``.

    ``compressed_size`` is the member's deflated size; ``path.stat().st_size`` is a little more.
    """

    path: Path
    member: str
    true_size: int
    declared_size: int
    compressed_size: int


_CONTENT_TYPES = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    b'<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    b'<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    b'<Default Extension="xml" ContentType="application/xml"/>'
    b'<Override PartName="/word/document.xml" '
    b'ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/>'
    b"</Types>"
)
_RELS = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    b'<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    b'<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
    b'officeDocument" Target="word/document.xml"/></Relationships>'
)
_SMALL_PARTS = (("[Content_Types].xml", _CONTENT_TYPES), ("_rels/.rels", _RELS))
_BOMB_HEAD = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
    b"<w:body><w:p><w:r><w:t>"
)
_BOMB_TAIL = b"</w:t></w:r></w:p></w:body></w:document>"
_DOS_TIME = (ZIP_TIME[3] << 11) | (ZIP_TIME[4] << 5) | (ZIP_TIME[5] // 2)
_DOS_DATE = ((ZIP_TIME[0] - 1980) << 9) | (ZIP_TIME[1] << 5) | ZIP_TIME[2]


def _write_zip(path: Path, members: Iterable[tuple[str, Iterable[bytes], int, int, int]]) -> None:
    """Write a ZIP archive of deflated members by hand, streaming.

    A member is (name, its raw deflate stream in pieces, its CRC-32, the uncompressed size the headers declare,
    the compressed size): the headers say what they are told, true or not.
    """
    central = bytearray()
    count = 0
    with path.open("wb") as out:
        for name, stream, crc, size, compressed in members:
            encoded = name.encode("ascii")
            offset = out.tell()
            # version needed, flags, method (deflate), time, date, CRC-32, sizes, name length
            common = (20, 0, 8, _DOS_TIME, _DOS_DATE, crc, compressed, size, len(encoded))
            out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, *common, 0) + encoded)
            written = sum(out.write(piece) for piece in stream)
            assert written == compressed, (name, written, compressed)
            # made by, the common fields, extra and comment lengths, disk, attributes, the local header's offset
            central += struct.pack(
                "<IHHHHHHIIIHHHHHII", 0x02014B50, 20, *common, 0, 0, 0, 0, 0o644 << 16, offset
            )
            central += encoded
            count += 1
        start = out.tell()
        out.write(central)
        out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, len(central), start, 0))


def _deflated(data: bytes) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    return compressor.compress(data) + compressor.flush()


def write_zip_bomb(path: Path, *, mebibytes: int = 2048, declared_size: int | None = None) -> ZipBomb:
    """Write a DOCX whose ``word/document.xml`` is one text run of ``mebibytes`` MiB of :data:`BOMB_BYTE`.

    The member inflates to its true size (a little over ``mebibytes`` MiB, at most 4 GiB: no ZIP64), though the
    file is about a thousandth of that: its deflate stream is one deflated MiB repeated (each block ends in a full
    flush, so every copy of it is the same bytes), and its CRC-32 is combined, not computed over the bytes, so the
    bomb is written in milliseconds with a MiB of memory. ``declared_size``: the size its headers state, if not the
    true one (the CRC-32 is always that of the true bytes).
    """
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = compressor.compress(_BOMB_HEAD) + compressor.flush(zlib.Z_FULL_FLUSH)
    block = compressor.compress(BOMB_BYTE * _BLOCK) + compressor.flush(zlib.Z_FULL_FLUSH)
    tail = compressor.compress(_BOMB_TAIL) + compressor.flush(zlib.Z_FINISH)
    true_size = len(_BOMB_HEAD) + mebibytes * _BLOCK + len(_BOMB_TAIL)
    if true_size >= 1 << 32 or (declared_size is not None and not 0 <= declared_size < 1 << 32):
        raise ValueError("a zip bomb here stays under 4 GiB (no ZIP64)")
    crc = zlib.crc32(_BOMB_HEAD)
    crc = _crc32_combine(crc, crc32_of_repeats(BOMB_BYTE * _BLOCK, mebibytes), mebibytes * _BLOCK)
    crc = zlib.crc32(_BOMB_TAIL, crc)
    compressed = len(head) + mebibytes * len(block) + len(tail)

    def document() -> Iterable[bytes]:
        yield head
        for _ in range(mebibytes):
            yield block
        yield tail

    members: list[tuple[str, Iterable[bytes], int, int, int]] = []
    for name, data in _SMALL_PARTS:
        packed = _deflated(data)
        members.append((name, (packed,), zlib.crc32(data), len(data), len(packed)))
    member = "word/document.xml"
    declared = true_size if declared_size is None else declared_size
    members.append((member, document(), crc, declared, compressed))
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_zip(path, members)
    return ZipBomb(path, member, true_size, declared, compressed)


# ---------------------------------------------------------------------------------------------------------------
# Hostile files


def pdf_bomb(mebibytes: int) -> bytes:
    """A one-page PDF whose content stream inflates to ``mebibytes`` MiB of zeros (about a thousandth of that)."""
    deflate = zlib.compressobj(9)
    zeros = bytes(1 << 20)
    stream = b"".join(deflate.compress(zeros) for _ in range(mebibytes)) + deflate.flush()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 5\n0000000000 65535 f \n" + b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size 5 /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


@dataclass(frozen=True)
class Hostile:
    """Files a converter must refuse or survive, and what they are.

    ``truncated_pdf``: the first half of ``policy-v2.pdf`` (``truncated_from`` bytes long whole);
    ``encrypted_pdf``: a one-page PDF holding ``encrypted_text`` that opens only with ``password``;
    ``bomb``: a DOCX zip bomb whose headers tell the truth; ``lying_bomb``: one whose headers understate the size;
    ``random_pdf``: ``random.Random(7).randbytes(50_000)`` named ``.pdf``; ``image_only_pdf``: a page of drawn
    shapes and no text, as a scan is.
    """

    truncated_pdf: Path
    truncated_from: int
    encrypted_pdf: Path
    password: str
    encrypted_text: str
    bomb: ZipBomb
    lying_bomb: ZipBomb
    random_pdf: Path
    image_only_pdf: Path


_SECRET = "Salary bands for 2025 are confidential and shared with managers only."


def _encrypted_pdf(path: Path, password: str) -> None:
    canvas = Canvas(
        str(path),
        pagesize=A4,
        invariant=1,
        encrypt=StandardEncryption(password, ownerPassword="owner-" + password, strength=128),
    )
    canvas.setFont("Helvetica", 12)
    canvas.drawString(2.5 * cm, A4[1] - 3 * cm, _SECRET)
    canvas.showPage()
    canvas.save()


def _image_only_pdf(path: Path) -> None:
    canvas = Canvas(str(path), pagesize=A4, invariant=1)
    width, height = A4
    canvas.setFillGray(0.93)
    canvas.rect(1 * cm, 1 * cm, width - 2 * cm, height - 2 * cm, stroke=0, fill=1)
    canvas.setFillGray(0.2)
    rng = random.Random(3)
    y = height - 3 * cm
    while y > 3 * cm:  # bars where a scan would have lines of text
        canvas.rect(2.5 * cm, y, rng.uniform(10, 16) * cm, 0.3 * cm, stroke=0, fill=1)
        y -= 0.7 * cm if rng.random() < 0.85 else 1.4 * cm
    canvas.showPage()
    canvas.save()


def write_hostile(folder: Path, *, bomb_mebibytes: int = 2048, password: str = "open-sesame") -> Hostile:
    """Write the hostile files into ``folder``; ``bomb_mebibytes`` sizes both zip bombs (see :func:`write_zip_bomb`).

    The lying bomb's headers declare 4096 bytes for its document.
    """
    folder.mkdir(parents=True, exist_ok=True)
    blocks = policy_blocks("policy-v2")
    _, pages, _ = render_policy_pdf(blocks, split_paragraphs=False, pages=0)
    whole, _, _ = render_policy_pdf(blocks, split_paragraphs=False, pages=pages)
    truncated = folder / "truncated.pdf"
    truncated.write_bytes(whole[: len(whole) // 2])
    encrypted = folder / "encrypted.pdf"
    _encrypted_pdf(encrypted, password)
    bomb = write_zip_bomb(folder / "bomb.docx", mebibytes=bomb_mebibytes)
    lying = write_zip_bomb(folder / "lying-bomb.docx", mebibytes=bomb_mebibytes, declared_size=4096)
    noise = folder / "random.pdf"
    noise.write_bytes(random.Random(7).randbytes(50_000))
    scan = folder / "scanned.pdf"
    _image_only_pdf(scan)
    return Hostile(truncated, len(whole), encrypted, password, _SECRET, bomb, lying, noise, scan)
