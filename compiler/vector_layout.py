"""The padded LRAM layout of narrow dimensions: which dim a slice vectorises, and by how much it is padded.

Slices work on vectors of `TorqHw.lanes(dtype)` elements (64 bytes: 64 i8, 32
i16/bf16 lanes). A tensor in LRAM is stored with its *vector dim* padded so
that every vector is whole; DDR tensors and DMA byte counts stay unpadded
(users see unpadded tensors), the DMA-in writes the unpadded box into the
padded LRAM layout (padding lanes zero) and the DMA-out reads the unpadded
part back.

Rule (`padded`), with w the vector width of the dtype:
  n            if n is a multiple of w (nothing to pad),
  next_pow2(n) if n < w (a *narrow* dim: 3 -> 4, 17 -> 32 with w = 32),
  ceil(n / w) * w otherwise (40 -> 64 with w = 32).
The narrow case follows IREE's data-tiling design (iree-org/iree, "Data tiling
encodings: simplify round_dims_to and implement narrower padding for narrow
dimensions"): a narrow dim is rounded only to the next power of two, whose
tiles include every smaller power of two, so a 3-channel tensor costs 4/3 of
its bytes, not 32/3.

Vector dim per TorqHL op kind and operand role (`vector_dim`, from the op table's
`OpDef.vector`, contract/ops.py):
- conv2d: input C (the reduction channels; G for a one-channel-per-group
  grouped conv), weight C (else O), result O (else G);
- depthwise_conv2d, maxpool2d, avg_pool2d: C of each operand's dims string,
  the innermost dim when there is no C;
- matmul: lhs K, rhs N, result N;
- reduce, elementwise and every epilogue operand (bias, scale, residual):
  the innermost dim.
Source (facts, not code) -- the reference compiler synaptics-torq/torq-compiler:
its TorqHW HwInfo has an ALU group width (`max_input`) of 64 bytes, which is
`TorqHw.lanes_* x dtype bytes` here (so no new TorqHw field: the vector width
*is* the lane count); its encoding requirements align the channel stride of
4-D conv/elementwise tensors to 64 bytes, a matmul's K to the 32-element WRAM
width and its N to the 64-byte ALU group, and the table/activation outputs to
64 bytes; its convolution kernels process output channels in vector groups
(`OCVectorItems`) and reduce input channels per vector. The reference keeps
NCHW and pads the spatial plane; this project's model pads the channel dim
(issue 5: "channel counts that are not multiples of the vector width must be
padded"), with the same 64-byte vector.

Where it is used: `padded_value_nbytes` sizes every LRAM buffer of the tile
schedule (so the allocator, the fit check of super tiling and
torq-assign-lram-addresses all see padded bytes); `torq-build-nss-program`
records each buffer's logical and padded shape (`layout`) and each compute's
`padded_work`; the simulator stores buffers in that layout and the timing
model counts padded work (`contract/timing.py`), while `macs` (useful work:
roofline, efficiency, NPU MAC share) stays unpadded. Numerics do not change:
padding lanes are zero and the simulator's kernels compute on the unpadded
view of each buffer; the padded storage, occupancy and cycles are modelled.
A buffer shared by ops that vectorise different dims keeps the layout of its
first access (the relayout a real slice would need is not modelled).
"""

from __future__ import annotations

import math

from torq.contract.hw import TorqHw
from torq.contract.ops import OPS, RESULT
from torq.contract.program import nbytes


def padded(n: int, width: int) -> int:
    """n rounded up to whole vectors of `width`; a narrow n (< width) only to the next power of two."""
    if n <= 0 or width <= 1 or n % width == 0:
        return n
    if n < width:
        return 1 << (n - 1).bit_length()
    return -(-n // width) * width


def vector_width(hw: TorqHw, dtype: str) -> int:
    """Elements per slice vector of `dtype`: the lane count (64 bytes per vector on SL2610)."""
    return hw.lanes(dtype)


def vector_dim(op: str, attrs: dict, role: int, rank: int) -> int | None:
    """The dim of operand `role` (RESULT for the result) that `op` vectorises; None for a scalar.

    `attrs` maps attribute names to values (dims strings as str)."""
    if rank == 0:
        return None
    key, letters = OPS[op].vector_letters(role) if op in OPS else ("", "")
    dims = attrs.get(key) if key else None
    if isinstance(dims, str) and len(dims) == rank:
        for letter in letters:
            if letter in dims:
                return dims.index(letter)
    return rank - 1


def padded_shape(shape: tuple[int, ...], dim: int | None, width: int) -> tuple[int, ...]:
    if dim is None:
        return tuple(shape)
    return tuple(padded(d, width) if i == dim else d for i, d in enumerate(shape))


def role_layout(op: str, attrs: dict, role: int, shape: tuple[int, ...], dtype: str,
                hw: TorqHw) -> tuple[int, ...]:
    """The padded LRAM shape of `shape` used as operand `role` of `op`."""
    return padded_shape(tuple(shape), vector_dim(op, attrs, role, len(shape)), vector_width(hw, dtype))


def padded_work(op: str, attrs: dict, operands: list[tuple[tuple[int, ...], str]],
                result: tuple[tuple[int, ...], str], macs: int, hw: TorqHw) -> int:
    """The work the timing model counts with vector dims padded (see contract/timing.py):
    MACs for conv2d / matmul, window reads for depthwise conv / pooling / reduce (each
    `macs` scaled by padded / real size of the vectorised dims), and result elements for
    elementwise ops (the result's padded element count)."""
    def dim_size(role: int) -> tuple[int, int]:
        shape, dtype = result if role == RESULT else operands[role]
        d = vector_dim(op, attrs, role, len(shape))
        if d is None:
            return 1, 1
        return shape[d], padded(shape[d], vector_width(hw, dtype))

    if OPS[op].inputs == 0 or macs <= 0:
        shape, dtype = result
        return math.prod(role_layout(op, attrs, RESULT, shape, dtype, hw))
    real, pad = 1, 1
    for r in OPS[op].work_roles:
        n, p = dim_size(r)
        real, pad = real * n, pad * p
    if real == 0 or macs % real:
        return macs
    return macs // real * pad


# -- IR values ---------------------------------------------------------------------------

def string_attrs(op) -> dict:
    """String attrs of a torq_hl op (the dims strings `vector_dim` reads)."""
    from iree.compiler import ir

    out = {}
    for a in op.attributes:
        name = a if isinstance(a, str) else a.name
        attr = op.attributes[name]
        if isinstance(attr, ir.StringAttr):
            out[name] = attr.value
    return out


def value_roles(v) -> list[tuple[str, dict, int]]:
    """(op kind, attrs, role) of every torq_hl op producing or reading IR value `v`, producer first."""
    from iree.compiler import ir

    roles = []
    owner = v.owner
    if not isinstance(owner, ir.Block) and owner.name.startswith("torq_hl."):
        roles.append((owner.name.split(".", 1)[1], string_attrs(owner), RESULT))
    for use in v.uses:
        user = use.owner
        if user.name.startswith("torq_hl."):
            roles.append((user.name.split(".", 1)[1], string_attrs(user), use.operand_number))
    return roles


def roles_nbytes(shape: tuple[int, ...], dtype: str, roles: list[tuple[str, dict, int]], hw: TorqHw) -> int:
    """Bytes of a `shape` tensor padded for each of its `roles` (`value_roles`), the largest."""
    sizes = [nbytes(role_layout(op, attrs, role, shape, dtype, hw), dtype) for op, attrs, role in roles]
    return max(sizes, default=nbytes(shape, dtype))


def padded_value_nbytes(v, hw: TorqHw) -> int:
    """LRAM bytes of IR value `v`: its static shape padded for every torq_hl op that reads or
    writes it (the largest, so any role's layout fits the buffer); a box of a gathered view
    also holds its ids, after the rows."""
    from .ir_utils import element_type, mlir_dtype, static_shape
    from .lram_allocator import align
    from .patterns.row_gather import gather_index_bytes

    dtype = mlir_dtype(element_type(v.type))
    data = roles_nbytes(static_shape(v.type), dtype, value_roles(v), hw)
    ids = gather_index_bytes(v)  # a box of a gathered view: its ids after its rows (nss_gathers)
    return align(data, hw.lram_alignment) + ids if ids else data
