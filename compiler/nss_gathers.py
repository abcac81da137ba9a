"""Row gathers (`patterns.row_gather`: an embedding lookup) written by
torq-build-nss-program with DMAs alone, in chunks that fit LRAM: per chunk, a DmaIn
of a box of the indices, a gather DmaIn of the rows they name (contract/program.py),
and a DmaOut of those rows into the result. Two alternating buffer pairs, so the
next chunk's DMA-ins overlap the previous chunk's DMA-out, as the copies' chunks do
(nss_copies). A row too large for a buffer is moved in parts of its dims.

An operand that is a box of a gathered view (`patterns.GATHER_VIEW`: a lookup fused
into the op that reads it) is loaded by `gather_operand`: its ids, then the rows they
name, into the operand's buffer, which torq-assign-lram-addresses sized for both
(vector_layout.padded_value_nbytes: the rows, then the ids)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from iree.compiler import ir

from torq.contract.program import DTYPE_BYTES, INDEX_DTYPES, DmaIn, DmaOut

from .ir_utils import CompileError, static_shape
from .lram_allocator import align
from .nss_copies import COPY_BODY, chunk_boxes, expand_box
from .patterns import RowGather

if TYPE_CHECKING:
    from .passes.build_nss_program import NssBuilder


def write_gather(b: "NssBuilder", g: RowGather, out: int) -> None:
    """Writes the result of row gather `g` into output tensor `out` (module docstring)."""
    itensor, ioff, isizes = b.ddr(g.indices)
    ttensor, toff, tsizes = _table_box(b, g.table)
    index_dtype, dtype = b.tensors[itensor].dtype, b.tensors[out].dtype
    if index_dtype not in INDEX_DTYPES:
        raise CompileError(f"result {g.result.get_name()}: gather indices of {index_dtype}")
    isize, esize = DTYPE_BYTES[index_dtype], DTYPE_BYTES[dtype]
    idx_shape = static_shape(g.indices.type)
    row_shape = tuple(tsizes[1:])
    start, budget = b.copy_room()
    a = b.options.hw.lram_alignment
    n, row = math.prod(idx_shape), math.prod(row_shape)
    whole = align(n * isize, a) + n * row * esize <= budget
    pair = budget if whole else budget // 2 // a * a  # bytes of one (indices, rows) buffer pair
    rows_per_chunk = n if whole else max(1, (pair - a) // (isize + row * esize))
    row_part = max(1, (pair - align(rows_per_chunk * isize, a)) // (rows_per_chunk * esize))
    row_chunks = chunk_boxes(row_shape, row_part) if row_shape else [((), ())]
    squeezed = tuple(d for d in idx_shape if d != 1)
    k = 0
    for chunk in chunk_boxes(squeezed, rows_per_chunk):
        src_off, src_sizes = expand_box(chunk, tuple(isizes))
        dst_off, dst_sizes = expand_box(chunk, idx_shape)
        count = math.prod(src_sizes)
        for r_off, r_sizes in row_chunks:
            base = start + (k % 2) * pair
            ibuf = b.copy_buffer(base, count * isize)
            b.start_tile(COPY_BODY)
            rbuf = _gather_dmas(b, (itensor, tuple(o + c for o, c in zip(ioff, src_off)), src_sizes, index_dtype),
                                ibuf, (ttensor, toff, tsizes), r_off, r_sizes,
                                (base + align(count * isize, a), count * math.prod(r_sizes) * esize))
            b.use(rbuf)
            b.commands.append(DmaOut(rbuf, out, (*dst_off, *r_off), (*dst_sizes, *r_sizes)))
            k += 1


def gather_operand(b: "NssBuilder", view: ir.Operation, offsets: tuple, sizes: tuple, buf: int) -> None:
    """DMA-ins of the box (`offsets`, `sizes`) of gathered view `view` into operand buffer
    `buf`: the box's ids into the end of the buffer's bytes (the buffer keeps the rest),
    then the rows they name into its start."""
    table, ids = view.operands
    itensor, ioff, isizes = b.ddr(ids)
    ttensor, toff, tsizes = _table_box(b, table)
    q = len(static_shape(ids.type))
    if len(isizes) != q:
        raise CompileError(f"{view.name}: ids read through a rank-reducing box")
    index_dtype = b.tensors[itensor].dtype
    count = math.prod(sizes[:q])
    rows = b.buffers[buf]  # the ids go into the end of the bytes planned for this operand
    rows.size -= count * DTYPE_BYTES[index_dtype]
    ibuf = b.copy_buffer(rows.offset + rows.size, count * DTYPE_BYTES[index_dtype])
    _gather_dmas(b, (itensor, tuple(i + o for i, o in zip(ioff, offsets[:q])), tuple(sizes[:q]), index_dtype), ibuf,
                 (ttensor, toff, tsizes), offsets[q:], sizes[q:], buf)


def _gather_dmas(b: "NssBuilder", ids: tuple, ibuf: int, table: tuple, row_off: tuple, row_sizes: tuple,
                 buf: int | tuple[int, int]) -> int:
    """A DmaIn of the ids box `ids` (tensor, offsets, sizes, dtype) into `ibuf`, then the gather
    DmaIn of the rows they name (the box `row_off`, `row_sizes` of each) of `table` (tensor,
    offsets, sizes of its DDR box) into buffer `buf`, or into a copy buffer (offset, size)
    live from the gather on; returns that buffer."""
    itensor, ioff, isizes, index_dtype = ids
    ttensor, toff, tsizes = table
    b.commands.append(DmaIn(itensor, ioff, tuple(isizes), ibuf))
    if isinstance(buf, tuple):
        buf = b.copy_buffer(*buf)
    b.use(ibuf)
    b.commands.append(DmaIn(ttensor, (toff[0], *(t + o for t, o in zip(toff[1:], row_off))),
                            (math.prod(isizes), *row_sizes), buf, ibuf, index_dtype, tsizes[0]))
    return buf


def _table_box(b: "NssBuilder", table: ir.Value) -> tuple[int, tuple, tuple]:
    """The DDR box of a gathered table, in the table's own rank (its dim 0 the rows)."""
    tensor, off, sizes = b.ddr(table)
    if len(sizes) != len(static_shape(table.type)):
        raise CompileError(f"gather of rows of a rank-reducing box ({tuple(sizes)} read as "
                           f"{static_shape(table.type)}): no gather DMA form")
    return tensor, off, sizes
