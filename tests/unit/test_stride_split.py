"""box_reads.stride_split on hand-checked boxes: the reshape that makes strided loads
unit-stride boxes, and the loads it cannot serve."""

from __future__ import annotations

import pytest
from iree.compiler import ir

from torq.compiler.box_reads import Box, stride_split


@pytest.fixture
def ctx():
    with ir.Context(), ir.Location.unknown():
        yield


def _t(shape):
    return ir.RankedTensorType.get(list(shape), ir.F32Type.get())


def test_even_and_odd_columns_are_boxes_of_pairs(ctx):
    # x[..., 0:8:2] and x[..., 1:8:2] of 16 columns (GPT-J's rotate_every_two on 8 of them).
    even = Box([0, 0, 0, 0], [1, 8, 4, 4], [1, 1, 1, 2])
    odd = Box([0, 0, 0, 1], [1, 8, 4, 4], [1, 1, 1, 2])
    split = stride_split(_t([1, 8, 4, 16]), [(even, _t([8, 4, 4])), (odd, _t([8, 4, 4]))])
    assert split is not None
    assert split.shape((1, 8, 4, 16)) == [1, 8, 4, 8, 2]
    assert split.box(even) == Box([0, 0, 0, 0, 0], [1, 8, 4, 4, 1], [1] * 5)
    assert split.box(odd) == Box([0, 0, 0, 0, 1], [1, 8, 4, 4, 1], [1] * 5)


def test_two_strided_dims_and_an_offset_row(ctx):
    # x[:, 2::2, 1::2] of 8x6: rows 2, 4, 6 and columns 1, 3, 5 -> pairs (1..3, 1) x (0..2, 1).
    box = Box([0, 2, 1], [4, 3, 3], [1, 2, 2])
    split = stride_split(_t([4, 8, 6]), [(box, _t([4, 3, 3]))])
    assert split.shape((4, 8, 6)) == [4, 4, 2, 3, 2]
    assert split.box(box) == Box([0, 1, 0, 0, 1], [4, 3, 1, 3, 1], [1] * 5)


@pytest.mark.parametrize("rows, loads, why", [
    # 7 rows read every 2nd from 0: rows 0, 2, 4, 6 need 4 pairs of a 7 that has no pairs (LeViT).
    (7, [(Box([0, 0], [4, 8], [2, 1]), [4, 8])], "stride does not divide the dim"),
    (8, [(Box([0, 0], [4, 8], [2, 1]), [4, 8]), (Box([0, 0], [2, 8], [4, 1]), [2, 8])], "two strides"),
    (8, [(Box([0, 0], [4, 8], [2, 1]), [4, 8]), (Box([0, 0], [8, 8], [1, 1]), [8, 8])], "a contiguous read too"),
    (8, [(Box([0, 0], [4, 8], [1, 1]), [4, 8])], "no stride"),
])
def test_loads_no_reshape_serves(ctx, rows, loads, why):
    assert stride_split(_t([rows, 8]), [(b, _t(r)) for b, r in loads]) is None, why
