"""torq-build-nss-program: unroll tile loops into DMA + slice commands.

Contract: takes a function after torq-assign-lram-addresses. Executes its
control structure at compile time (tile loops have static bounds; index
arithmetic is evaluated), and emits, per tile, the commands of
`tile_schedule.body_events`: DMA-in of each operand box from its DDR tensor
(function argument, constant, or scratch; a box a strided `tensor.extract_slice`
reads is a strided DMA-in, `DmaIn.strides`), the compute on LRAM at the
assigned offsets, DMA-out of results into their DDR tensor box. The
function body is replaced by one `torq_nss.*` op per tensor, buffer and
command (see `nss_ir`), with the program-level facts on the function
(`torq.program`).

Slices: a tile body planned with several buffer sets (`torq.lram_sets` >= 2)
has its iterations distributed over `TorqHw.slices` with
`PassOptions.slice_distribution` (see `slice_distribution`: cyclic by
default, block, block-cyclic:B; when a body has at most as many tiles as
slices, tile k runs on slice k whatever the strategy); every compute of an
iteration runs on that iteration's slice. A body with one buffer set (its
tiles reuse the same LRAM bytes, so they would run one after the other
whatever slice they are on; also the function body) instead
splits each compute over all the slices (`Compute.split` = slices, from
slice 0): each slice computes a disjoint part of the result, cut along the
result's outermost dim whose extent is a multiple of the slice count (equal
parts, so the timing model's ceil(work / split) per slice is exact), from
the shared operand buffers: no extra DMA byte, no extra LRAM. A compute
whose result has no such dim runs on slice 0 alone. The function gets
`torq.distribution`, a dictionary: {"strategy", "slices", "bodies": [{"tiles", "form",
"slices_used"}]} with form "exact", "oversubscribed", "general" or "split"
(then also "split_computes": how many were split). Buffers keep the offsets
`torq-assign-lram-addresses` gave them, so tiles on different slices that
reuse the same bytes are ordered by the simulator's dependency rules (see
contract/timing.py).

Padding (`torq.pad`, see torq-fold-padding): a box of a padded view is a box
of the source tensor that may reach past its edges. The DMA-in moves only
the part inside the source; the operand's shape is that part, and the
consuming op gets the rest as its `pad` attr [top, bottom, left, right] (on
the dims its input_dims name H and W) and the view's value as `pad_value`,
so padding moves no bytes.

Reduction loops (`tile_schedule.is_reduction_loop`, a tiled reduction dim):
their steps run in the tile of the body around them; each step DMAs its
operand slices in again (same offsets, or on odd steps the second placement
`torq.lram_step_operands` gives them: double-buffered steps), and the accumulate-form op writes its
result in place into the accumulator's buffer (zeroed by the elementwise op
before the loop), which is never DMA-ed out; the epilogue op after the loop
reads it once the last step is done.

Copies (`patterns.data_movement_reason`): a result that is a function
argument, a box of one (`tensor.extract_slice`) or a padded view of either
(`torq.pad`) is written by DMAs alone, after the computes: its source box
goes DDR -> LRAM -> DDR in chunks that fit LRAM (`nss_copies`, two buffers
alternating so the DMA-in of one chunk overlaps the DMA-out of the
previous one), each chunk one tile; a padding's border boxes are written
from one LRAM buffer that an operand-less `elementwise` compute fills with
the pad value (exact: a constant of the result dtype). These buffers are
placed here (all compute buffers are dead by then) within
`TorqHw.available_lram_bytes`. A constant result is copied from the executable the
same way; a row gather's result is written by gather DMAs (`nss_gathers`); a result
assembled from boxes (`patterns.assembled_boxes`) gets each computed part's DMA-outs
in its box, and each part that is a copy written there.

In-place results (`mark_in_place_updates.IN_PLACE_RESULTS`): the output
tensor has the shape of the read-write operand the result is a box of, and
is an alias (`TensorDesc.aliases`) of an extra input holding that operand
(passed after the function's arguments, in the attribute's order); every
DMA box of the output is moved to the result's box in it, so the program
writes the box and leaves the rest as the operand was.

Vector padding (`vector_layout`): every buffer is sized as
torq-assign-lram-addresses sized it (its padded bytes) and records the
padded layout of its first access (`LramBuffer.shape` / `padded_shape`;
dense when a DMA box is not its data shape up to unit dims); each compute
records its `padded_work` (0 when no dim is padded). DMA boxes stay unpadded.
"""

from __future__ import annotations

import math

from iree.compiler import ir

from torq.contract.measures import measure_lram_peak
from torq.contract.ops import OPS, RESULT
from torq.contract.program import (
    DTYPE_BYTES,
    Compute,
    DmaIn,
    DmaOut,
    LramBuffer,
    Operand,
    Program,
    TensorDesc,
)

from ..ir_utils import CompileError, element_type, int_array, mlir_dtype, record_attr, static_shape
from ..lram_allocator import align
from ..nss_compute_facts import ComputeFacts
from ..nss_copies import COPY_BODY, is_copy, write_copy
from ..nss_dma_limit import DmaTally
from ..nss_gathers import gather_operand, write_gather
from ..nss_index import index_value
from ..nss_ir import program_to_function
from ..nss_views import DdrViews, SliceFacts
from ..patterns import GATHER_VIEW, PAD_VIEW, assembled_boxes, row_gather
from ..slice_distribution import distribute, parse_distribution
from ..tile_schedule import enclosing_loops, is_reduction_loop, is_torq_hl
from ..vector_layout import padded_value_nbytes, padded_work, role_layout, string_attrs
from . import PassOptions
from .mark_in_place_updates import IN_PLACE_RESULTS, INDEX_DIM, INDEX_INPUT

NAME = "torq-build-nss-program"

class NssBuilder(DdrViews):
    def __init__(self, func: ir.Operation, options: PassOptions):
        self.func = func
        self.options = options
        self.tensors: list[TensorDesc] = []
        self.tensor_of: dict = {}
        self.buffers: list[LramBuffer] = []
        self.commands: list = []
        self.env: dict = {}  # index values
        self.views: dict = {}  # extract_slice results -> (tensor, offsets, sizes)
        self.view_dims: dict = {}  # a rank-reducing slice's result -> the tensor dim of each of its dims
        self.view_strides: dict = {}  # a strided slice's result -> its step along each tensor dim
        # Views of a padded tensor -> (offsets, sizes) of the real data in the view's tensor, pad value.
        self.valid: dict = {}
        # Gathered views and boxes of them (patterns.GATHER_VIEW) -> (view op, offsets, sizes)
        self.gather_boxes: dict = {}
        self.buffer_view: dict[int, tuple] = {}  # DMA-ed buffer -> (operand shape, (pad, value) or None)
        self.tiles = 0
        self.bodies: list[ir.Block] = []  # distinct tile bodies, in order of first execution
        self.tile_bodies: list[int] = []  # tile index -> index in `bodies` of the body it iterates
        self.iterations: dict[int, int] = {}  # body index -> iterations emitted so far
        self.tile_iteration: list[int] = []  # tile index -> its iteration index within its body
        self.resident: dict[tuple, int] = {}  # (body, value, outer loop indices) -> buffer (_resident_key)
        self.loop_ivs: dict[int, list] = {}  # body -> induction variables of its loops, innermost first
        self.body_sets: dict[int, int] = {}  # body -> LRAM buffer sets its tiles cycle through (1 if absent)
        self.buffer_layouts: dict[tuple, tuple] = {}  # _buffer's (size, layout) per value, op, role, shape
        self.reduction_steps = 0  # reduction steps emitted so far
        # IR facts read once, not per tile: per torq_hl op (`_facts`), per block (`_block_ops`,
        # `_defined_in`), per slice op (`_slice_facts`).
        self.op_facts: dict[ir.Operation, ComputeFacts] = {}
        self.block_ops: dict[ir.Block, list[tuple[str, ir.Operation]]] = {}
        self.defined: dict[ir.Block, tuple[list[ir.Value], list[ir.Value]]] = {}
        self.slice_attrs: dict[ir.Operation, SliceFacts] = {}
        self.padded_works: dict[tuple, int] = {}  # `_padded_work` per op and operand shapes
        # (value, output tensor, offsets in it or None for all of it) written by DMAs alone
        self.copies: list[tuple[ir.Value, int, tuple | None]] = []
        # In-place results: output k aliases an extra input (the read-write operand); its
        # DMA boxes are placed into that operand's box (`place_in_place_boxes`).
        self.placement: dict[int, tuple[list[int], list[int], tuple[int, ...]]] = {}
        # In-place outputs whose box is at a runtime offset: (dim, the input holding it).
        self.scattered: dict[int, tuple[int, int]] = {}
        ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
        host_args = self._host_types("torq.host_arg_types", list(ftype.inputs))
        block = func.regions[0].blocks[0]
        for i, arg in enumerate(block.arguments):
            self.tensor_of[arg] = self._new_tensor("input", arg.type, host_args[i], i)
        ret = [o.operation for o in block.operations][-1]
        outputs = self._output_tensors(ret, self._host_types("torq.host_result_types", list(ftype.results)))
        if IN_PLACE_RESULTS in func.attributes:
            self._in_place_inputs(block, ret, outputs)
        self.copy_base = 0  # LRAM bytes before the copies' buffers (`copy_room`)

    def _output_tensors(self, ret: ir.Operation, host_res: list) -> list[int]:
        """The output tensor of each returned value: written by DMAs alone (a copy), or
        computed (its assembled parts and in-place destinations bound to it)."""
        outputs = []
        for i, v in enumerate(ret.operands):
            if v in self.tensor_of and not is_copy(v):
                raise CompileError(f"{self.func.attributes['sym_name']}: result {i} is not computed on the NPU")
            outputs.append(self._new_tensor("output", v.type, host_res[i], i))
            if is_copy(v):
                self.copies.append((v, outputs[-1], None))
            else:
                self._assembled_parts(v, outputs[-1])
                self.tensor_of[v] = outputs[-1]
                for dest in _destinations(v):
                    self.tensor_of[dest] = outputs[-1]
        return outputs

    def _in_place_inputs(self, block: ir.Block, ret: ir.Operation, outputs: list[int]) -> None:
        """An extra input per in-place result (IN_PLACE_RESULTS), which the output aliases, with
        the result's box in it (`placement`) and, at a runtime offset, its index (`scattered`)."""
        name = self.func.attributes["sym_name"]
        for j, entry in enumerate(ir.ArrayAttr(self.func.attributes[IN_PLACE_RESULTS])):
            entry = ir.DictAttr(entry)
            k = ir.IntegerAttr(entry["result"]).value
            out = self.tensors[outputs[k]]
            shape = tuple(int_array(entry["shape"]))
            dest = TensorDesc(len(self.tensors), "input", shape, out.dtype, out.host_dtype,
                              len(block.arguments) + j)
            self.tensors.append(dest)
            out.shape, out.aliases = shape, dest.arg_index
            self.placement[out.index] = (int_array(entry["offsets"]), int_array(entry["sizes"]),
                                         static_shape(ret.operands[k].type))
            if INDEX_DIM in entry:
                if not is_copy(ret.operands[k]):
                    raise CompileError(f"{name}: result {k} is written at a runtime offset but is no copy "
                                       "of an input")
                arg = block.arguments[ir.IntegerAttr(entry[INDEX_INPUT]).value]
                self.scattered[out.index] = (ir.IntegerAttr(entry[INDEX_DIM]).value, self.tensor_of[arg])

    def _assembled_parts(self, v: ir.Value, out: int) -> None:
        """The parts of an assembled result (`patterns.assembled_parts`) that are copies are
        written by DMAs alone; a tiled part's tiles (its loop, a peeled remainder) go into
        its box of `out` (an untiled compute's DMA-out goes through its insert_slice)."""
        for part, at in zip(*assembled_boxes(v)):
            if is_copy(part):
                self.copies.append((part, out, at))
                continue
            for w in [part, *_destinations(part)]:
                self.views[w] = (out, at, static_shape(part.type))
                self.tensor_of[w] = out

    def _host_types(self, name, default):
        if name in self.func.attributes:
            return [ir.TypeAttr(a).value for a in ir.ArrayAttr(self.func.attributes[name])]
        return default

    def index(self, v: ir.Value) -> int:
        return index_value(v, self.env)

    def run_block(self, block: ir.Block, local: dict | None = None, tile: int | None = None) -> None:
        """Executes one iteration of `block`; its computes form one tile, numbered
        when the first of them is emitted (so a compute before a tile loop and
        the loop's first tile get different ids). A reduction loop's body runs
        with the buffers (`local`) and the tile of the body around it."""
        local_buffers: dict = {} if local is None else local
        for name, op in self._block_ops(block):
            if name in ("arith.constant", "tensor.empty", "affine.apply", "affine.min", "affine.max",
                        "arith.addi", "arith.subi", "arith.muli", "func.return", "scf.yield"):
                continue
            if name == "tensor.extract_slice" and (facts := self._slice_facts(op, 1)).operands[0] in self.gather_boxes:
                view, base, _ = self.gather_boxes[facts.operands[0]]  # a box of a gathered view
                offsets, sizes = self._slice_params(facts)
                self.gather_boxes[facts.result] = (view, tuple(b + o for b, o in zip(base, offsets)), tuple(sizes))
            elif name == GATHER_VIEW:
                shape = static_shape(op.results[0].type)
                self.gather_boxes[op.results[0]] = (op, (0,) * len(shape), shape)
            elif name == "tensor.extract_slice":
                self._slice_view(op)
            elif name == PAD_VIEW:
                self._pad_view(op)
            elif name == "tensor.insert_slice":
                continue  # its DMA-out is emitted right after the compute (see _dma_out)
            elif name == "scf.for" and is_reduction_loop(op):
                if tile is None:
                    tile = self.start_tile(block)
                self.run_reduction_loop(op, local_buffers, tile)
            elif name == "scf.for":
                first = len(self.buffers)
                self.run_for(op)
                self._reload_overwritten(local_buffers, first)
            elif is_torq_hl(op):
                if tile is None:
                    tile = self.start_tile(block)
                self.compute(op, local_buffers, tile)
            elif row_gather(op) is not None:
                continue  # a result the gather DMAs write after the computes (nss_gathers)
            else:
                raise CompileError(f"unexpected op {name} in a Torq tile")

    def _reload_overwritten(self, local: dict, first: int) -> None:
        """A tile loop's body is planned on its own, from LRAM offset 0: a DDR value the
        computes around it loaded (`local`, or kept resident) where the loop's buffers (from
        `first` on) went is loaded again when read after it. A computed value read after it
        has no DDR copy to reload: the loop's plan went above it (tile_schedule.kept_across)."""
        written = [(b.offset, b.offset + b.size) for b in self.buffers[first:]]

        def overwritten(buf: int) -> bool:
            b = self.buffers[buf]
            return any(lo < b.offset + b.size and b.offset < hi for lo, hi in written)

        for v, buf in list(local.items()):
            computed = not isinstance(v.owner, ir.Block) and (is_torq_hl(v.owner) or v.owner.name == "scf.for")
            if not computed and overwritten(buf):
                del local[v]
        self.resident = {key: buf for key, buf in self.resident.items() if not overwritten(buf)}

    def _block_ops(self, block: ir.Block) -> list[tuple[str, ir.Operation]]:
        """(name, op) of the block's ops, read from the IR once per block."""
        if block not in self.block_ops:
            self.block_ops[block] = [(o.operation.name, o.operation) for o in block.operations]
        return self.block_ops[block]

    def start_tile(self, block: ir.Block) -> int:
        body = self._body_index(block)
        self.tile_iteration.append(self.iterations.get(body, 0))
        self.iterations[body] = self.tile_iteration[-1] + 1
        self.tile_bodies.append(body)
        self.tiles += 1
        return self.tiles - 1

    def _body_index(self, block: ir.Block) -> int:
        for i, b in enumerate(self.bodies):
            if b == block:
                return i
        self.bodies.append(block)
        return len(self.bodies) - 1

    def run_for(self, op: ir.Operation):
        lb, ub, step = (self.index(v) for v in op.operands[:3])
        inits = op.operands[3:]
        body = op.regions[0].blocks[0]
        iv, iter_args = body.arguments[0], list(body.arguments)[1:]
        for res, init, arg in zip(op.results, inits, iter_args):
            if res in self.views:  # a part of an assembled result: its tiles go into its box
                self.views[init] = self.views[arg] = self.views[res]
            # The loop result lives in the DDR tensor of whoever consumes it.
            if res not in self.tensor_of:
                if init in self.tensor_of:
                    self.tensor_of[res] = self.tensor_of[init]
                else:
                    _ = self.ddr(res)
            self.tensor_of[init] = self.tensor_of[res]
            self.tensor_of[arg] = self.tensor_of[res]
        for i in range(lb, ub, step):
            self.env[iv] = i
            self._clear_body_env(body)
            self.run_block(body)

    def run_reduction_loop(self, op: ir.Operation, local: dict, tile: int) -> None:
        """Steps of a tiled reduction dim (`tile_schedule.is_reduction_loop`), in the tile
        of the body around it: each step loads its operand slices again into the same
        buffers; the accumulator (the loop's init, its iter_arg, the value the body
        yields and the loop result) is one LRAM buffer that never leaves LRAM."""
        lb, ub, step = (self.index(v) for v in op.operands[:3])
        body = op.regions[0].blocks[0]
        iv, acc = body.arguments[0], body.arguments[1]
        acc_buffer = local[op.operands[3]]
        for i in range(lb, ub, step):
            self.env[iv] = i
            self._clear_body_env(body, local)  # the previous step's values and buffers
            local[acc] = acc_buffer
            self.run_block(body, local, tile)
            self.reduction_steps += 1  # its parity picks the step operands' placement
        local[op.results[0]] = acc_buffer

    def _clear_body_env(self, body: ir.Block, local: dict | None = None):
        """Forgets what the previous iteration of `body` bound to the values it defines
        (and, with `local`, their buffers and those of nested block arguments)."""
        results, nested_args = self._defined_in(body)
        for r in results:
            self.env.pop(r, None)
            self.views.pop(r, None)
            self.valid.pop(r, None)
            if local is not None:
                local.pop(r, None)
        if local is not None:
            for a in nested_args:
                local.pop(a, None)

    def _defined_in(self, body: ir.Block) -> tuple[list[ir.Value], list[ir.Value]]:
        """The results of the ops in `body` and its nested blocks, and those blocks' arguments."""
        if body not in self.defined:
            results, nested_args = [], []
            for _, o in self._block_ops(body):
                results += list(o.results)
                for region in o.regions:
                    for b in region.blocks:
                        nested_args += list(b.arguments)
                        inner_results, inner_args = self._defined_in(b)
                        results += inner_results
                        nested_args += inner_args
            self.defined[body] = (results, nested_args)
        return self.defined[body]

    def _buffer(self, offset: int, v: ir.Value, op: ir.Operation, role: int, shape: tuple) -> int:
        """A buffer for value `v` sized like torq-assign-lram-addresses sized it (padded,
        `vector_layout`), laid out for its first access: `shape` as `role` of `op`."""
        idx = len(self.buffers)
        n = len(self.commands)
        key = (v, op, role, tuple(shape))
        if key not in self.buffer_layouts:  # the same for every iteration of a tile body
            hw = self.options.hw
            padded = role_layout(op.name.split(".", 1)[1], string_attrs(op), role, tuple(shape),
                                 mlir_dtype(element_type(v.type)), hw)
            self.buffer_layouts[key] = (padded_value_nbytes(v, hw),
                                        (tuple(shape), padded) if padded != tuple(shape) else ((), ()))
        size, layout = self.buffer_layouts[key]
        self.buffers.append(LramBuffer(idx, offset, size, n, n, *layout))
        return idx

    def _keep_layout(self, buf: int, sizes: tuple) -> None:
        """A DMA box that is not the buffer's data shape up to unit dims makes the buffer dense."""
        b = self.buffers[buf]
        if b.padded_shape and [d for d in sizes if d != 1] != [d for d in b.shape if d != 1]:
            b.shape, b.padded_shape = (), ()

    def use(self, buf: int):
        self.buffers[buf].live_end = len(self.commands)

    def _resident_key(self, body: int, v: ir.Value, invariant_loops: int) -> tuple:
        """A resident operand stays loaded while the `invariant_loops` innermost loops
        around its body iterate; the indices of the loops outside them say when it
        must be loaded again (see tile_schedule.invariant_loops)."""
        if body not in self.loop_ivs:
            self.loop_ivs[body] = [loop.regions[0].blocks[0].arguments[0]
                                   for loop in enclosing_loops(self.bodies[body])]
        return (body, v, tuple(self.env[iv] for iv in self.loop_ivs[body][invariant_loops:]))

    def compute(self, op: ir.Operation, local: dict, tile: int):
        """Emits the DMA-ins, the compute and the DMA-outs of one `torq_hl` op of the
        current tile. Per-tile buffers go to the tile's buffer set (iteration mod
        `torq.lram_sets`); a resident operand is loaded once per iteration of the loops
        it is not invariant to (`torq.lram_resident`: how many innermost loops it is)."""
        f = self._facts(op)
        offsets = f.offsets
        if self.reduction_steps % 2 and f.step_offsets is not None:  # an odd step
            offsets = [s if s >= 0 else o for o, s in zip(offsets, f.step_offsets)]
        body = self.tile_bodies[tile]
        self.body_sets[body] = max(f.sets, self.body_sets.get(body, 1))
        shift = (self.tile_iteration[tile] % f.sets) * f.set_stride
        operands = []
        pad = None
        for k, (v, off, keep) in enumerate(zip(f.operands, offsets, f.resident)):
            if v not in local:
                key = self._resident_key(body, v, keep) if keep else None
                if keep and key in self.resident:
                    local[v] = self.resident[key]
                elif v in self.gather_boxes:
                    buf = self._buffer(off if keep else off + shift, v, op, k, f.operand_shapes[k])
                    gather_operand(self, *self.gather_boxes[v], buf)
                    self.buffer_view[buf] = (f.operand_shapes[k], None)
                    local[v] = buf
                    if keep:
                        self.resident[key] = buf
                else:
                    tensor, box_off, box_sizes, box_pad, clipped = self._clipped(v, op, k)
                    shape = clipped or f.operand_shapes[k]  # the part inside a padded view, if clipped
                    buf = self._buffer(off if keep else off + shift, v, op, k, shape)
                    self._keep_layout(buf, tuple(box_sizes))
                    self.commands.append(DmaIn(tensor, tuple(box_off), tuple(box_sizes), buf,
                                               strides=self.view_strides.get(v, ())))
                    self.buffer_view[buf] = (shape, box_pad)
                    local[v] = buf
                    if keep:
                        self.resident[key] = buf
            shape, box_pad = self.buffer_view.get(local[v], (f.operand_shapes[k], None))
            if box_pad is not None:
                if k != 0:
                    raise CompileError(f"{op.name}: operand {k} reads padding the op cannot apply")
                pad = box_pad
            operands.append(Operand(local[v], shape, f.operand_dtypes[k]))
        res = f.result
        if f.result_offset is None:  # accumulate form: in place, in the accumulator's buffer
            rbuf = local[f.operands[OPS[f.kind].accumulator_operand]]
        else:
            rbuf = self._buffer(f.result_offset + shift, res, op, RESULT, f.result_shape)
        for o in operands:
            self.use(o.buffer)
        attrs = dict(f.attrs)
        if pad is not None:
            attrs["pad"], attrs["pad_value"] = pad
        result = Operand(rbuf, f.result_shape, f.result_dtype)
        self.commands.append(Compute(f.kind, operands, result, attrs, f.epilogue,
                                     slice=0,  # set by slice_distribution.distribute
                                     macs=f.macs, tile=tile, padded_work=self._padded_work(f, attrs, operands)))
        local[res] = rbuf
        self._dma_out(op, res, rbuf)

    def _padded_work(self, f: ComputeFacts, attrs: dict, operands: list[Operand]) -> int:
        """`Compute.padded_work` (0 when no dim is padded); the same for every tile of
        the same operand shapes."""
        key = (f, tuple(o.shape for o in operands))
        if key not in self.padded_works:
            work = padded_work(f.kind, attrs, [(o.shape, o.dtype) for o in operands],
                               (f.result_shape, f.result_dtype), f.macs, self.options.hw)
            dense = f.macs if OPS[f.kind].inputs > 0 and f.macs > 0 else math.prod(f.result_shape)
            self.padded_works[key] = work if work != dense else 0
        return self.padded_works[key]

    def _facts(self, op: ir.Operation) -> ComputeFacts:
        if op not in self.op_facts:
            self.op_facts[op] = ComputeFacts.of(op)
        return self.op_facts[op]

    # -- copies and in-place results ------------------------------------------------
    def copy_buffer(self, offset: int, size: int) -> int:
        """A dense LRAM buffer for a copy, live from the next command."""
        idx = len(self.buffers)
        n = len(self.commands)
        self.buffers.append(LramBuffer(idx, offset, size, n, n))
        return idx

    def copy_room(self) -> tuple[int, int]:
        """(first byte, bytes) of LRAM the copies' buffers may take: what scatter indices leave."""
        return self.copy_base, self.options.hw.available_lram_bytes - self.copy_base

    def load_scatter_indices(self) -> dict[int, int]:
        """DMA-ins of the runtime offset of each in-place output at one (`scattered`) into the
        start of the copies' LRAM, before them (as part of their first tile); returns
        {output: its index buffer}."""
        loaded = {}
        for out, (_, itensor) in self.scattered.items():
            dtype = self.tensors[itensor].dtype
            buf = self.copy_buffer(self.copy_base, DTYPE_BYTES[dtype])
            self.copy_base += align(DTYPE_BYTES[dtype], self.options.hw.lram_alignment)
            self.commands.append(DmaIn(itensor, (0,), (1,), buf))
            loaded[out] = buf
        return loaded

    def scatter_in_place_boxes(self, index_buffers: dict[int, int]) -> None:
        """Each DMA-out of an in-place output at a runtime offset (placed, `place_in_place_boxes`)
        becomes a scatter of its box at that offset, reading the offset from its index buffer."""
        for i, c in enumerate(self.commands):
            if isinstance(c, Compute) or c.tensor not in self.scattered:
                continue
            if isinstance(c, DmaIn):
                raise CompileError("an output written at a runtime offset is read back")
            dim, itensor = self.scattered[c.tensor]
            offsets, sizes, _ = self.placement[c.tensor]
            c.index_buffer, c.index_dtype, c.index_dim = index_buffers[c.tensor], self.tensors[itensor].dtype, dim
            c.index_bound = self.tensors[c.tensor].shape[dim] - offsets[dim]
            buf = self.buffers[c.index_buffer]
            buf.live_end = max(buf.live_end, i)

    def place_in_place_boxes(self) -> None:
        """Moves every DMA box of an in-place output into the result's box of the operand
        (result dims -> operand dims: the dims the result drops are unit dims of the box)."""
        for c in self.commands:
            if not isinstance(c, (DmaIn, DmaOut)) or c.tensor not in self.placement:
                continue
            offsets, sizes, result_shape = self.placement[c.tensor]
            new_off, new_sizes, j = [], [], 0
            for o, s in zip(offsets, sizes):
                if j < len(result_shape) and s == result_shape[j]:
                    new_off.append(o + c.offsets[j])
                    new_sizes.append(c.sizes[j])
                    j += 1
                else:
                    new_off.append(o)
                    new_sizes.append(1)
            c.offsets, c.sizes = tuple(new_off), tuple(new_sizes)

    def split_bodies(self) -> list[bool]:
        """Per body: whether its computes split over all slices (one buffer set, not copies)."""
        slices = self.options.hw.slices
        return [slices > 1 and self.body_sets.get(body, 1) == 1 and self.bodies[body] is not COPY_BODY
                for body in range(len(self.bodies))]

    def _dma_out(self, op, res, rbuf):
        for user in self._facts(op).out_users:
            if user.name == "tensor.insert_slice":
                facts = self._slice_facts(user, 2)
                dest = self.ddr(facts.operands[1])
                tensor, base, _ = dest
                offsets, sizes = self._slice_params(facts)
                self.use(rbuf)
                self._keep_layout(rbuf, tuple(sizes))
                self.commands.append(DmaOut(rbuf, tensor, tuple(b + o for b, o in zip(base, offsets)),
                                            tuple(sizes)))
                self.views.setdefault(facts.result, dest)
                self.tensor_of.setdefault(facts.result, tensor)
            else:
                tensor, base, sizes = self.ddr(res)
                self.use(rbuf)
                self._keep_layout(rbuf, tuple(sizes))
                self.commands.append(DmaOut(rbuf, tensor, base, sizes))
                return


def _destinations(v: ir.Value) -> list[ir.Value]:
    """The values whose DDR tensor `v` writes into: a peeled tiling's remainder tile
    (an insert_slice, or a loop whose init is) completes the main loop's result."""
    chain = []
    while isinstance(v, ir.OpResult):
        owner = v.owner
        if owner.name == "tensor.insert_slice":
            v = owner.operands[1]
        elif owner.name == "scf.for":
            v = owner.operands[3 + v.result_number]
        else:
            break
        chain.append(v)
    return chain


def build_program(func: ir.Operation, options: PassOptions, dma_limit: int | None = None) -> tuple[Program, dict]:
    """The NSS program of `func` and its slice distribution summary (see module docstring).
    With `dma_limit`, raises DmaLimitExceeded as soon as its DMAs move more bytes than that:
    super tiling's search prices a candidate only against the best so far."""
    b = NssBuilder(func, options)
    if dma_limit is not None:
        b.commands = DmaTally(b.tensors, dma_limit)
    b.run_block(func.regions[0].blocks[0])
    first_copy_buffer = len(b.buffers)
    index_buffers = b.load_scatter_indices()
    for v, out, at in b.copies:
        gather = row_gather(v.owner) if not isinstance(v.owner, ir.Block) else None
        if gather is not None:
            if at is not None:
                raise CompileError("a row gather as a part of an assembled result has no DMA form")
            write_gather(b, gather, out)
        else:
            write_copy(b, v, out, at)
    b.place_in_place_boxes()
    b.scatter_in_place_boxes(index_buffers)
    try:
        dist = parse_distribution(options.slice_distribution)
    except ValueError as e:
        raise CompileError(str(e)) from None
    summary = distribute(b.commands, b.tile_bodies, b.split_bodies(), options.hw.slices, dist)
    name = ir.StringAttr(func.attributes["sym_name"]).value
    peak = ir.IntegerAttr(func.attributes["torq.lram_peak"]).value if "torq.lram_peak" in func.attributes else 0
    # The copies' buffers live after every compute buffer: their peak is separate.
    peak = max(peak, measure_lram_peak(b.buffers[first_copy_buffer:], len(b.commands)))
    return Program(name, options.hw.to_dict(), b.tensors, b.buffers, b.commands, b.tiles, peak), summary


def run(module: ir.Module, options: PassOptions) -> None:
    for op in list(module.body.operations):
        if op.operation.name == "func.func" and "torq.program" not in op.operation.attributes:
            func = op.operation
            program, summary = build_program(func, options)
            program_to_function(program, func)
            func.attributes["torq.distribution"] = record_attr(summary)
