"""Results that are copies of inputs (an argument, or a box or padded view of one),
written by torq-build-nss-program with DMAs alone: the border of a padded view from
a buffer filled with the pad value, then the source box in chunks that fit LRAM
through two alternating buffers."""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

from iree.compiler import ir

from torq.contract.program import DTYPE_BYTES, Compute, DmaIn, DmaOut, Epilogue, EpilogueStep, Operand, Ref

from .ir_utils import CompileError, static_shape
from .lram_allocator import align
from .patterns import PAD_VIEW, row_gather

if TYPE_CHECKING:
    from .passes.build_nss_program import NssBuilder

# The tile body of the copies' chunks (no block: they run after every tile body).
COPY_BODY = object()


def is_copy(v: ir.Value) -> bool:
    """A result no compute makes: an argument, a box or padded view (of a box) of one, a
    constant (a tensor of the executable), or a row gather (nss_gathers writes it)."""
    return isinstance(v.owner, ir.Block) or v.owner.name in ("tensor.extract_slice", PAD_VIEW, "arith.constant") \
        or row_gather(v.owner) is not None


def write_copy(b: "NssBuilder", v: ir.Value, out: int, at: tuple[int, ...] | None = None) -> None:
    """Writes `v` (a copy: `is_copy`) into output tensor `out` with DMAs, at offsets `at` of
    it (a part of an assembled result) or as the whole of it: the border of a padded view
    first, from a buffer filled with the pad value, then the source box in chunks through
    two alternating buffers."""
    shape = static_shape(v.type)
    dtype = b.tensors[out].dtype
    esize = DTYPE_BYTES[dtype]
    tensor, off, sizes = b.ddr(v)
    fill, place = None, at or (0,) * len(shape)
    if v in b.valid:  # a padded view: its source box lands at `low` in the result
        base, sizes, fill = b.valid[v]
        if len(base) != len(shape) or v.owner.name != PAD_VIEW or at is not None:
            raise CompileError(f"result {v.get_name()}: a box of a padded view, or padding of a rank-reducing "
                               "box, has no DMA copy")
        place, off = tuple(b - o for b, o in zip(base, off)), base
    interior = tuple(sizes) if fill is not None else shape
    if [d for d in sizes if d != 1] != [d for d in interior if d != 1]:
        raise CompileError(f"result {v.get_name()}: copies a box of {tuple(sizes)} into {interior}")
    base, budget = b.copy_room()
    a = b.options.hw.lram_alignment
    fill_bytes = 0
    border = _border(shape, place, interior) if fill is not None else []
    if border:
        need = max(math.prod(s) for _, s in border) * esize
        fill_bytes = align(min(need, budget // 4), a)
        n_fill = min(need, budget // 4) // esize
        buf = b.copy_buffer(base, n_fill * esize)
        tile = b.start_tile(COPY_BODY)
        steps = [EpilogueStep("add", [Ref("const", const=float(fill)), Ref("const", const=0.0)])]
        b.commands.append(Compute("elementwise", [], Operand(buf, (n_fill,), dtype), {}, Epilogue(steps),
                                     tile=tile))
        for b_off, b_sizes in border:
            for c_off, c_sizes in chunk_boxes(b_sizes, n_fill):
                b.use(buf)
                b.commands.append(DmaOut(buf, out, tuple(o + c for o, c in zip(b_off, c_off)), c_sizes))
    total = math.prod(interior)
    room = budget - fill_bytes
    per_buffer = room if total * esize <= room else (room // 2) // a * a
    squeezed = tuple(d for d in interior if d != 1)
    for k, chunk in enumerate(chunk_boxes(squeezed, max(1, per_buffer // esize))):
        src_off, src_sizes = expand_box(chunk, tuple(sizes))
        dst_off, dst_sizes = expand_box(chunk, interior)
        buf = b.copy_buffer(base + fill_bytes + (k % 2) * per_buffer, math.prod(src_sizes) * esize)
        b.start_tile(COPY_BODY)
        b.commands.append(DmaIn(tensor, tuple(o + c for o, c in zip(off, src_off)), src_sizes, buf))
        b.use(buf)
        b.commands.append(DmaOut(buf, out, tuple(p + c for p, c in zip(place, dst_off)), dst_sizes))



def chunk_boxes(sizes: tuple[int, ...], max_elems: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Row-major sub-boxes (offsets relative to the box, sizes) of a box of `sizes`, each
    at most `max_elems` elements: the innermost dims whole, the next one cut."""
    n = len(sizes)
    k = n
    while k > 0 and math.prod(sizes[k - 1:]) <= max_elems:
        k -= 1
    if k == 0:
        return [((0,) * n, tuple(sizes))]
    inner = math.prod(sizes[k:])
    step = max(1, max_elems // inner)
    d = k - 1
    out = []
    for outer in itertools.product(*(range(s) for s in sizes[:d])):
        for start in range(0, sizes[d], step):
            size = min(step, sizes[d] - start)
            out.append((tuple(outer) + (start,) + (0,) * (n - k), (1,) * d + (size,) + tuple(sizes[k:])))
    return out


def expand_box(box: tuple[tuple[int, ...], tuple[int, ...]], sizes: tuple[int, ...]) -> tuple[tuple, tuple]:
    """A chunk of the squeezed box (its non-unit dims) as a chunk of the box of `sizes`."""
    it = iter(zip(*box))
    pairs = [(0, 1) if s == 1 else next(it) for s in sizes]
    return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)


def _border(shape: tuple[int, ...], offsets: tuple[int, ...], sizes: tuple[int, ...]) -> list[tuple[tuple, tuple]]:
    """Disjoint boxes covering `shape` outside the box (`offsets`, `sizes`): for each dim,
    the slabs before and after the box along it, within the box on the dims before it."""
    out = []
    for d in range(len(shape)):
        lead_off, lead_size = tuple(offsets[:d]), tuple(sizes[:d])
        for start, size in ((0, offsets[d]), (offsets[d] + sizes[d], shape[d] - offsets[d] - sizes[d])):
            if size > 0 and all(lead_size):
                out.append((lead_off + (start,) + (0,) * (len(shape) - d - 1),
                            lead_size + (size,) + tuple(shape[d + 1:])))
    return out
