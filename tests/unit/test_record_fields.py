"""The compiled kernels encode each record with the fields of its msgspec struct, in the same order.

``_native.record_fields()`` lists, for every record struct the Rust side decodes or encodes, the names its fields
are encoded under in the order the Rust side writes them; a field added to a struct on one side only fails here by
name.
"""

from __future__ import annotations

import msgspec
import pytest

from streamdedup.core import _native, messages, model, state

# Where each struct the kernels model lives in the package.
STRUCTS: dict[str, type[msgspec.Struct]] = {
    "SourceAttrs": model.SourceAttrs,
    "Rank": model.Rank,
    "Info": messages.Info,
    "PairMark": messages.PairMark,
    "SourceRef": messages.SourceRef,
    "MemberReport": messages.MemberReport,
    "TopRef": state.TopRef,
    "RefEntry": state.RefEntry,
    "NeighborEntry": state.NeighborEntry,
    "Conflict": state.Conflict,
    "ChunkStatus": state.ChunkStatus,
    "ContentIds": state.ContentIds,
    "ContentRecord": state.ContentRecord,
    "StatusEntry": state.StatusEntry,
    "LineRecord": state.LineRecord,
    "CollectionMember": state.CollectionMember,
}


def test_every_modelled_struct_is_compared() -> None:
    assert set(_native.record_fields()) == set(STRUCTS)


@pytest.mark.parametrize("name", sorted(STRUCTS))
def test_fields_match_in_name_and_order(name: str) -> None:
    struct = STRUCTS[name]
    # The names fields are encoded under (``rename``, ``name=``), in declaration order.
    python = list(struct.__struct_encode_fields__)
    rust = _native.record_fields()[name]
    missing_in_rust = [f for f in python if f not in rust]
    missing_in_python = [f for f in rust if f not in python]
    assert not missing_in_rust, f"{name}: fields only the Python struct has: {missing_in_rust}"
    assert not missing_in_python, f"{name}: fields only the Rust struct has: {missing_in_python}"
    assert rust == python, f"{name}: fields in another order"
