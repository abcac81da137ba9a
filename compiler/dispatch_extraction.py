"""Turn a `flow.dispatch.workgroups` body into a standalone tensor function.

The Torq dispatch pipeline works on plain `func.func` ops over tensors: one
argument per dispatch input (full `dispatch.tensor.load`), one result per
dispatch output (full `dispatch.tensor.store`). A dispatch that writes a
box of a read-write operand (IREE writes a producer into its consumer's
padded buffer, and each part of a concatenation into the result, this way)
returns the box, listed in the function's `RESULT_UPDATES`;
torq-mark-in-place-updates then decides that the NPU writes it in place into
the read-write operand, which the call passes as an extra input
(torq-build-nss-program makes the output an alias of it). A result whose box
the host must still insert (one with a host tail) keeps `result_updates` for
the target's host copy. A copy of an input into a box of a read-write operand
at one runtime offset (compiler/torch_index_put.py's slice update: IREE passes
the offset as an index operand) is such a result too: the index operand becomes
a `tensor<1xi32>` argument (`ExtractedDispatch.index_operands`; the call passes
the offset in one) named in the result's update entry, whose DMA-out scatters
the box at that offset (torq-build-nss-program). A scalar operand (a push
constant: a dynamic quantization's run-time zero point) read only as a generic's
broadcast input becomes a 0-d tensor argument named in `SCALAR_ARGUMENTS`: only a
host tail may read it (torq-lower-requantization hands the epilogue that reads it
to the host and erases the argument, or refuses the dispatch). A load of a static
box of an input that is only stored becomes a `tensor.extract_slice` (a DMA box:
the dispatch is a copy). Any other load of a static box of an input (IREE
slices the query, key and value of an attention out of one tensor this way)
becomes a *box read* of the whole argument: a copy `linalg.generic` whose input
map reads the box at constant offsets (`box_reads.box_read_generic`, lowered to
a DMA box by torq-lower-to-torq-hl).
A load of a static *strided* box (`x[:, :, ::2, ::2]`: IREE slices the input
of a 1x1 stride-2 convolution this way) is folded into the `linalg.generic`
ops that read it: each reads the whole argument through its indexing map
composed with the box map (`stride * d + offset`), so a 1x1 convolution
reading every 2nd pixel becomes a 1x1 convolution with stride 2
(`box_reads.fold_strided_box_read`). A strided box read by anything else (a store,
an elementwise generic: GPT-J's interleaved rotary reads x[..., 1::2]) is a
unit-stride box of the argument reshaped, each strided dim of extent n split into
(n / stride, stride) (`box_reads.StrideSplit`): the function takes the reshaped type
and the call passes the operand reshaped (`flow.tensor.reshape`, no data moves).
Dynamic boxes, strided boxes no reshape makes unit-stride, reads of a read-write
operand and dynamic shapes are `Unsupported`: host. An `iree_linalg_ext.attention` (torch's
scaled_dot_product_attention) is decomposed by the pipeline
(torq-decompose-attention); one it cannot decompose is `Unsupported` here,
before the body is taken apart.

Operands that are constants at the flow level (`arith.constant`, or
`util.global.load` of an immutable global with a constant initial value that
nothing stores) stay function arguments; in a function that converts an
integer to float they carry their value as the argument attribute
`CONSTANT_ARG` (`FlowModuleFacts.constant_attr`: the same attribute, not a
copy), with the host's f32 semantics as `HOST_FMA`, so
torq-lower-requantization can read weights, biases and per-channel scales:
it replaces a float requantization after an integer contraction with an
integer rescale, drops the arguments this leaves unread, and reports a
dequantize tail for the host (`host_dispatches.host_tail_dispatch` builds
it; `ExtractedDispatch.apply_reports` takes the reports over). In a dispatch
that reads a run-time quantization's scalar, the f32 scalar constants IREE
cloned into its dequantize epilogue become such arguments too
(epilogue_scalars.py: the layers' functions are then one text for the dispatch
cache), and so do the weight sums a run-time zero point is moved out of a
contraction with (runtime_zero_point.py: onnxruntime's ConvInteger), which the
call makes (`ExtractedDispatch.hoisted_constants`).

For a dispatch left on the host, `host_dispatches.hoist_input_pads` edits the flow-level
dispatch itself: a padding of a loaded input is built before the dispatch
(a splat and a host copy dispatch, `box_copy_dispatch`, as IREE does for a
padding it does not fuse) and the dispatch reads the padded tensor.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property

from iree.compiler import ir

from .box_reads import (
    Box,
    StrideSplit,
    binding_tensor,
    box_map,
    box_read_generic,
    check_strided_readers,
    dispatch_arguments,
    fold_strided_box_read,
    folds_into_readers,
    generic_can_read,
    is_whole,
    static_box,
    stride_split,
)
from .constant_args import set_constant_attrs
from .epilogue_scalars import hoist_epilogue_scalars
from .f32_chain import host_float_semantics
from .ir_utils import (
    CompileError,
    block_ops,
    generic_with_inputs,
    indexing_maps,
    int_array,
    iterator_types,
    n_inputs,
    static_shape,
    static_slice,
    through_reshapes,
    walk_ops,
)
from .passes import decompose_attention, lower_requantization, mark_in_place_updates
from .passes.lower_requantization import HOST_FMA, SCALAR_ARGUMENTS
from .passes.mark_in_place_updates import RESULT_UPDATES
from .patterns import Unsupported
from .requant_summary import RequantSummary
from .requant_tail import HostTail
from .runtime_zero_point import reads_runtime_zero_point, split_runtime_zero_points


@dataclass
class ExtractedDispatch:
    """A dispatch body as a function, and what the target needs to call it.

    `input_operands` and `in_place` / `host_tails` are as extraction made them until the
    pipeline ran; `apply_reports` then sets them from what its passes reported (the
    arguments torq-lower-requantization kept, the results torq-mark-in-place-updates
    marked, the dequantize tails left to the host)."""
    func: ir.Operation
    name: str
    # Dispatch operand index of each function argument; index len(operands) + j is
    # `hoisted_constants[j]`, a constant the call makes (compiler/runtime_zero_point.py's weight
    # sums, then compiler/epilogue_scalars.py's scales).
    input_operands: list[int]
    # For each dispatch result: (tied operand index, store offsets) when the
    # dispatch writes a box of a read-write operand, else (-1, None).
    result_updates: list[tuple[int, list[int] | None]]
    # Per dispatch result: the sizes of that box in the operand's rank (the stored value may
    # drop unit dims of it), else None.
    result_update_sizes: list[list[int] | None] = field(default_factory=list)
    # Per dispatch result: elementwise ops the host applies to the NPU result (to another
    # result's finished value when `HostTail.source` >= 0: the function does not return it).
    host_tails: dict[int, HostTail] = field(default_factory=dict)
    # The dispatch result of each function result (None: the same index).
    function_results: list[int] | None = None
    # Per function argument: the quantize the host applies to its operand before the call.
    host_heads: dict[int, HostTail] = field(default_factory=dict)
    # Dispatch results the NPU writes in place into their read-write operand,
    # in the order the call passes those operands.
    in_place: list[int] = field(default_factory=list)
    # One summary per float requantization compiled to an integer rescale.
    requant: list[RequantSummary] = field(default_factory=list)
    # Dispatch operands that are an index (the runtime offset of an updated box): the call
    # passes each as a tensor<1xi32>.
    index_operands: list[int] = field(default_factory=list)
    hoisted_constants: list[ir.Attribute] = field(default_factory=list)

    def apply_reports(self, reports: dict) -> None:
        """Take over what the dispatch pipeline's passes reported (`pipeline.run_passes`).
        A pass reports by function name, and the module holds one function: its entry is
        this dispatch's, also when the compile was another dispatch's with the same body
        (a cache hit keeps the name of the dispatch that filled it)."""
        lowering = _the_function_entry(reports.get(lower_requantization.NAME))
        if lowering is not None:
            inputs = self.input_operands  # per original function argument
            self.input_operands = [inputs[k] for k in lowering.kept_arguments]
            self.host_tails = {k: dataclasses.replace(t, tensor_operands=[inputs[a] for a, _, _ in t.tensors])
                               for k, t in lowering.host_tails.items()}
            self.host_heads = {j: lowering.host_heads[k] for j, k in enumerate(lowering.kept_arguments)
                               if k in lowering.host_heads}
            self.requant = list(lowering.rescaled)
            self.function_results = lowering.kept_results
        results = self.function_results
        self.in_place = [results[k] if results is not None else k
                         for k in _the_function_entry(reports.get(mark_in_place_updates.NAME)) or []]


def _the_function_entry(report: dict | None):
    """The entry of a per-function report of a one-function module, or None."""
    if not report:
        return None
    if len(report) != 1:
        raise CompileError(f"a dispatch module reported for {len(report)} functions: {sorted(report)}")
    return next(iter(report.values()))


def _tied_operands(dispatch: ir.Operation) -> list[int]:
    if "tied_operands" not in dispatch.attributes:
        return [-1] * len(dispatch.results)
    return [ir.IntegerAttr(a).value for a in ir.ArrayAttr(dispatch.attributes["tied_operands"])]


def extract_dispatch_function(dispatch: ir.Operation, name: str, module: ir.Module,
                              facts: "FlowModuleFacts | None" = None) -> ExtractedDispatch:
    """Build `func.func @name` in `module` from a clone of `dispatch`'s body.

    The function carries what the dispatch pipeline needs to know of the flow level
    (so that it is self-contained, and torq-opt runs the same passes on it):
    `CONSTANT_ARG` on each argument whose flow-level operand is a known constant
    (`facts`), `HOST_FMA` when the host's f32 semantics are known, and
    `RESULT_UPDATES` for the results that update a box of a read-write operand.
    """
    block = dispatch.regions[0].blocks[0]
    arguments = dispatch_arguments(dispatch)
    kinds = _binding_kinds(block)
    result_args = _result_arguments(len(arguments), _tied_operands(dispatch))
    input_args = [i for i in range(len(arguments)) if kinds[i][0] in ("readonly", "index", "scalar")]
    out_types = _result_types(dispatch, kinds, result_args)
    in_pos = {a: n for n, a in enumerate(input_args)}
    out_pos = {a: n for n, a in enumerate(result_args)}
    splits = _stride_splits(block, kinds)
    updates, update_sizes, runtime_offsets = _check_loads_and_stores(block, kinds, in_pos, out_pos, splits)
    for pos, split in splits.items():  # the function takes these inputs reshaped (the call reshapes them)
        kinds[pos] = (kinds[pos][0], split.tensor_type(kinds[pos][1]))
    _check_attention(block)
    # Everything that can refuse the dispatch has run on the original body.
    # Only now is a clone taken apart: erasing IR whose nested ops still have
    # Python handles (a half-moved clone on an error path) corrupts the heap.
    func = _new_function(module, name, dispatch.location, [kinds[i][1] for i in input_args], out_types)
    _move_body(dispatch, func.regions[0].blocks[0], in_pos, out_pos, splits)
    scalars = [n for n, i in enumerate(input_args) if kinds[i][0] == "scalar"]
    if scalars:
        func.attributes[SCALAR_ARGUMENTS] = ir.DenseI64ArrayAttr.get(scalars)
    _record_result_updates(func, updates, [kinds[t][1] if t >= 0 else None for t, _ in updates], update_sizes,
                           runtime_offsets)
    hoisted = []
    if facts is not None:  # a reshaped input's constant value would not have its type
        _record_flow_facts(func, [arguments[i] if i not in splits and kinds[i][0] != "scalar" else None
                                 for i in input_args], facts, reads_runtime_zero_point(func, scalars))
        if scalars and HOST_FMA in func.attributes:  # (a run-time quantization's epilogue)
            hoisted = split_runtime_zero_points(func) + hoist_epilogue_scalars(func)
    return ExtractedDispatch(func, name, input_args + list(range(len(arguments), len(arguments) + len(hoisted))),
                             updates, update_sizes, index_operands=[i for i in input_args if kinds[i][0] == "index"],
                             hoisted_constants=hoisted)


def _binding_kinds(block: ir.Block) -> list[tuple[str, ir.Type]]:
    """(access, tensor type) of each block argument of a dispatch body; an index (a runtime
    offset) is ("index", tensor<1xi32>), the tensor the call passes for it."""
    kinds = []
    for arg in block.arguments:
        if str(arg.type) == "index":
            kinds.append(("index", ir.RankedTensorType.get([1], ir.IntegerType.get_signless(32))))
            continue
        if _is_scalar(arg.type):
            _check_scalar_readers(arg)
            kinds.append(("scalar", ir.RankedTensorType.get([], arg.type)))
            continue
        if not str(arg.type).startswith("!iree_tensor_ext.dispatch.tensor"):
            raise Unsupported(f"dispatch takes a non-tensor operand ({arg.type})")
        access, t = binding_tensor(arg.type)
        if static_shape(t) is None:
            raise Unsupported("dispatch has dynamic shapes")
        kinds.append((access, t))
    return kinds


def _is_scalar(t: ir.Type) -> bool:
    return isinstance(t, (ir.IntegerType, ir.F32Type))


def _check_scalar_readers(arg: ir.Value) -> None:
    """A scalar operand (a push constant: a dynamic quantization's zero point) may only be read
    as a generic's input broadcast to every element, or in a generic's body (IREE's
    `acc - W * z` epilogue of a ConvInteger reads the zero point it captured): the function
    reads it as a 0-d tensor argument instead, a captured one as a broadcast input
    (`_move_body`)."""
    for use in arg.uses:
        g = _capturing_generic(use)
        if not _is_broadcast_input(use) and (g is None or len(g.results) != 1):
            raise Unsupported(f"dispatch takes a non-tensor operand ({arg.type}) that it reads other than as "
                              f"a generic's broadcast input or in a single-result generic's body")


def _capturing_generic(use) -> ir.Operation | None:
    """The linalg.generic an op directly in whose body reads `use`'s value (a value defined
    outside the generic: captured), or None."""
    parent = use.owner.parent if not isinstance(use.owner, ir.Block) else None
    return parent.operation if parent is not None and parent.name == "linalg.generic" else None


def _is_broadcast_input(use) -> bool:
    """Whether `use` is a linalg.generic's input read through a map of no results (one value
    broadcast to every element)."""
    g = use.owner
    return not isinstance(g, ir.Block) and g.name == "linalg.generic" and use.operand_number < n_inputs(g) \
        and len(indexing_maps(g)[use.operand_number].results) == 0


def _result_arguments(n_operands: int, tied: list[int]) -> list[int]:
    """The block argument of each dispatch result: its tied operand's, or the next one after
    the operands."""
    result_args, k = [], n_operands
    for t in tied:
        if t >= 0:
            result_args.append(t)
        else:
            result_args.append(k)
            k += 1
    return result_args


def _result_types(dispatch: ir.Operation, kinds, result_args: list[int]) -> list[ir.Type]:
    """Each function result's type: the binding's, or for a read-write operand the box its
    one store writes (refused when the body also reads it)."""
    block = dispatch.regions[0].blocks[0]
    out_types = []
    for a in result_args:
        if kinds[a][0] == "readwrite":
            uses = [u.owner for u in block.arguments[a].uses]
            if len(uses) != 1 or uses[0].name != STORE:
                raise Unsupported("dispatch reads a tensor it updates in place")
            out_types.append(uses[0].operands[0].type)
        else:
            out_types.append(kinds[a][1])
    return out_types


def _check_attention(block: ir.Block) -> None:
    for op in block_ops(block):
        if op.name == decompose_attention.ATTENTION:
            reason = decompose_attention.unsupported_reason(op)
            if reason:
                raise Unsupported(reason)


def _new_function(module: ir.Module, name: str, loc: ir.Location, inputs: list[ir.Type],
                  outputs: list[ir.Type]) -> ir.Operation:
    """An empty `func.func @name` (entry block with its arguments) at the end of `module`."""
    with ir.InsertionPoint(module.body):
        func = ir.Operation.create(
            "func.func", regions=1,
            attributes={"sym_name": ir.StringAttr.get(name),
                        "function_type": ir.TypeAttr.get(ir.FunctionType.get(inputs, outputs)),
                        "torq.dispatch": ir.UnitAttr.get()},
            loc=loc)
    func.regions[0].blocks.append(*inputs)
    return func


def _move_body(dispatch: ir.Operation, fblock: ir.Block, in_pos: dict, out_pos: dict,
               splits: dict[int, StrideSplit]) -> None:
    """A clone of `dispatch`'s body into `fblock`: each load becomes its argument or a read
    of a box of it (`_read_load`), the stores' values the function's results."""
    clone = dispatch.clone()
    for pos, arg in enumerate(clone.regions[0].blocks[0].arguments):
        if _is_scalar(arg.type) and pos in in_pos:  # read as its 0-d tensor (`_check_scalar_readers`)
            tensor = fblock.arguments[in_pos[pos]]
            capturing: list[ir.Operation] = []
            for use in arg.uses:
                g = _capturing_generic(use)
                if g is not None and g not in capturing:
                    capturing.append(g)
            for g in capturing:
                generic_with_inputs(g, [tensor], [ir.AffineMap.get(len(iterator_types(g)), 0, [])], [arg])
            for use in list(arg.uses):
                use.owner.operands[use.operand_number] = tensor
    results: list[ir.Value | None] = [None] * len(out_pos)
    ordinals = []  # their only users, the stores, go first
    for op in block_ops(clone.regions[0].blocks[0]):
        if op.name == ORDINAL:
            ordinals.append(op)
            continue
        if op.name == LOAD:
            pos = op.operands[0].arg_number
            _read_load(op, fblock.arguments[in_pos[pos]], splits.get(pos), fblock)
            op.erase()
        elif op.name == STORE:
            results[out_pos[op.operands[1].arg_number]] = op.operands[0]
            op.erase()
        elif op.name == "flow.return":
            op.erase()
        else:
            _append(op, fblock)
    with ir.InsertionPoint(fblock), dispatch.location:
        ir.Operation.create("func.return", operands=results)
    for op in ordinals:
        op.erase()
    clone.erase()
    _broadcast_0d_reads(fblock)


def _broadcast_0d_reads(fblock: ir.Block) -> None:
    """A generic's broadcast input that is the one value of a 0-d tensor (`tensor.extract %t[]`:
    torch's dynamic quantization scale, which the epilogue reads as a scalar) reads `%t`
    itself, through the same map: the form the requantization passes read (a 0-d
    argument read along none of the result's dims). The same value, so exact."""
    for op in block_ops(fblock):
        if op.name != "tensor.extract" or len(op.operands) != 1:
            continue
        for use in list(op.results[0].uses):
            if _is_broadcast_input(use):
                use.owner.operands[use.operand_number] = op.operands[0]
        if not list(op.results[0].uses):
            op.erase()


def _read_load(load: ir.Operation, arg: ir.Value, split: StrideSplit | None, fblock: ir.Block) -> None:
    """The users of `load` read function argument `arg`: itself (a full load), a strided box
    folded into their maps, or a unit-stride box (of `arg` reshaped by `split`; or all of
    `arg` with its unit dims dropped, CoaT's residual: a box read of another rank)."""
    box = static_box(load)
    if split is not None:
        _replace_box_load(load, arg, split.box(box), fblock)
    elif is_whole(load, static_shape(arg.type)) and load.results[0].type == arg.type:
        load.results[0].replace_all_uses_with(arg)
    elif box.strided:
        fold_strided_box_read(load.results[0], arg, box_map(arg.type, box, load.results[0].type))
    else:
        _replace_box_load(load, arg, box, fblock)


def _record_result_updates(func: ir.Operation, updates, dest_types, sizes, runtime_offsets) -> None:
    entries = [_update_entry(k, dest, offsets, size, runtime_offsets[k])
               for k, ((tied, offsets), dest, size) in enumerate(zip(updates, dest_types, sizes)) if tied >= 0]
    if entries:
        func.attributes[RESULT_UPDATES] = ir.ArrayAttr.get(entries)


def _update_entry(k: int, dest: ir.Type, offsets: list[int], sizes: list[int],
                  runtime_offset: tuple[int, int] | None) -> ir.Attribute:
    i64 = ir.IntegerType.get_signless(64)
    entry = {"result": ir.IntegerAttr.get(i64, k),
             "shape": ir.DenseI64ArrayAttr.get(list(static_shape(dest))),
             "offsets": ir.DenseI64ArrayAttr.get(list(offsets)),
             "sizes": ir.DenseI64ArrayAttr.get(list(sizes))}
    if runtime_offset is not None:
        dim, arg = runtime_offset
        entry |= {mark_in_place_updates.INDEX_DIM: ir.IntegerAttr.get(i64, dim),
                  mark_in_place_updates.INDEX_INPUT: ir.IntegerAttr.get(i64, arg)}
    return ir.DictAttr.get(entry)


def _record_flow_facts(func: ir.Operation, operands: list[ir.Value], facts: "FlowModuleFacts",
                       reads_zero_point: bool = False) -> None:
    """Only a function that converts an integer to float has them: every float requantization
    and every int8 arithmetic in f32 does, and nothing else reads them; and one whose
    contraction reads a run-time scalar (`reads_zero_point`: a ConvInteger whose accumulator
    another dispatch dequantizes), whose weights runtime_zero_point sums. A bf16 dispatch's
    compile never depends on its weights' values, so identical layers with different
    weights stay identical functions (dispatch_compile compiles them once)."""
    if not reads_zero_point and not any(op.name == "arith.sitofp" for op in walk_ops(func)):
        return
    attrs = [facts.constant_attr(v) if v is not None else None for v in operands]
    if any(a is not None for a in attrs):
        set_constant_attrs(func, attrs)
    if facts.host_float is not None:
        func.attributes[HOST_FMA] = ir.BoolAttr.get(facts.host_float.fma)


STORE = "iree_tensor_ext.dispatch.tensor.store"
LOAD = "iree_tensor_ext.dispatch.tensor.load"
ORDINAL = "iree_tensor_ext.dispatch.workload.ordinal"


def _replace_box_load(load: ir.Operation, arg: ir.Value, box: "Box", block: ir.Block) -> None:
    """Replace a load of unit-stride `box` of `arg`: stores read it as a
    `tensor.extract_slice` (a DMA box copied to the output), other users as a
    box read generic (`box_read_generic`)."""
    uses = [(u.owner, u.operand_number) for u in load.results[0].uses]
    stores = [(o, k) for o, k in uses if not isinstance(o, ir.Block) and o.name == STORE]
    if not generic_can_read(arg.type, box, load.results[0].type):  # x[:, :16]: only a slice expresses it
        stores = uses
    with ir.InsertionPoint(block), load.location:
        if stores:
            view = static_slice(arg, box.offsets, box.sizes, load.results[0].type)
            for owner, k in stores:
                owner.operands[k] = view
        if len(stores) < len(uses):
            load.results[0].replace_all_uses_with(box_read_generic(arg, box, load.results[0].type))


class FlowModuleFacts:
    """Read-only facts of the flow-level module the Torq target runs on, each worked out
    once, on first use (the target only replaces dispatches: it adds no global and no
    store, so they hold for the whole run)."""

    def __init__(self, module_op: ir.Operation):
        self.module_op = module_op

    @cached_property
    def constant_globals(self) -> dict[str, ir.Attribute]:
        """Immutable globals with a constant initial value that no op stores (an immutable
        global may still be set once by an initializer): name -> initial value."""
        stored = {ir.FlatSymbolRefAttr(o.attributes["global"]).value
                  for o in walk_ops(self.module_op) if o.name == "util.global.store"}
        out = {}
        for op in self.module_op.regions[0].blocks[0].operations:
            op = op.operation
            if op.name != "util.global" or "is_mutable" in op.attributes or "initial_value" not in op.attributes:
                continue
            name = ir.StringAttr(op.attributes["sym_name"]).value
            init = op.attributes["initial_value"]
            if name not in stored and isinstance(init, (ir.DenseElementsAttr, ir.DenseResourceElementsAttr)):
                out[name] = init
        return out

    @cached_property
    def host_float(self):
        """The module's llvm-cpu float semantics (`requant.host_float_semantics`)."""
        return host_float_semantics(self.module_op)

    def constant_attr(self, v: ir.Value) -> ir.Attribute | None:
        """The value of flow-level `v` as an attribute if it is an `arith.constant` or a
        `util.global.load` of one of `constant_globals`, seen through `flow.tensor.reshape`s
        (a grouped convolution's per-channel bias, read as groups x channels: the attribute
        keeps the source's shape, torq-lower-requantization reads it in the argument's);
        else None."""
        op = through_reshapes(v).owner
        if isinstance(op, ir.Block):
            return None
        if op.name == "arith.constant":
            return op.attributes["value"]
        if op.name != "util.global.load" or "is_immutable" not in op.attributes:
            return None
        return self.constant_globals.get(ir.FlatSymbolRefAttr(op.attributes["global"]).value)


def _stride_splits(block: ir.Block, kinds) -> dict[int, StrideSplit]:
    """Per dispatch operand read with a stride its readers cannot fold (`folds_into_readers`:
    a store, an elementwise generic), the reshape making each of its loads a unit-stride
    box (`box_reads.stride_split`), when there is one."""
    loads: dict[int, list[ir.Operation]] = {}
    for op in block_ops(block):
        if op.name == LOAD and isinstance(op.operands[0].owner, ir.Block):
            loads.setdefault(op.operands[0].arg_number, []).append(op)
    splits = {}
    for pos, ops in loads.items():
        boxes = [static_box(o) for o in ops]
        if kinds[pos][0] != "readonly" or any(b is None for b in boxes) or \
                all(folds_into_readers(o.results[0]) for o, b in zip(ops, boxes) if b.strided):
            continue  # no strided box, or all fold as they did before the split existed
        split = stride_split(kinds[pos][1], [(b, o.results[0].type) for o, b in zip(ops, boxes)])
        if split is not None:
            splits[pos] = split
    return splits


def _check_loads_and_stores(block: ir.Block, kinds, in_pos: dict, out_pos: dict,
                            splits: dict[int, StrideSplit]) -> list:
    """Refuses (Unsupported) bodies the extraction cannot turn into a tensor function
    (an input of `splits` is read as unit-stride boxes of it reshaped).

    Returns, per result, (tied operand, box offsets) for read-write stores, else (-1, None),
    and per result the box sizes of such a store (else None).
    """
    updates: list[tuple[int, list[int] | None]] = [(-1, None)] * len(out_pos)
    sizes: list[list[int] | None] = [None] * len(out_pos)
    runtime_offsets: list[tuple[int, int] | None] = [None] * len(out_pos)
    stored = set()
    for op in block_ops(block):
        if op.name == "iree_tensor_ext.dispatch.tensor.load":
            src = op.operands[0]
            pos = src.arg_number if isinstance(src.owner, ir.Block) else None
            if pos not in in_pos:
                raise Unsupported("dispatch loads a tensor it does not take as input")
            if pos in splits or is_whole(op, static_shape(kinds[pos][1])):
                continue
            box = static_box(op)
            if box is None or box_map(kinds[pos][1], box, op.results[0].type) is None:
                raise Unsupported("dispatch loads a dynamic part of an input, or a part it cannot read as a box")
            stores_only = all(not isinstance(u.owner, ir.Block) and u.owner.name == STORE for u in op.results[0].uses)
            if not stores_only and box.strided and not generic_can_read(kinds[pos][1], box, op.results[0].type):
                raise Unsupported("dispatch computes on a strided box of an input that starts at 0 and stops short "
                                  "of the input's end: no box read expresses it yet")
            if box.strided:
                check_strided_readers(op.results[0])
        elif op.name == "iree_tensor_ext.dispatch.tensor.store":
            dst = op.operands[1]
            pos = dst.arg_number if isinstance(dst.owner, ir.Block) else None
            if pos not in out_pos or pos in stored:
                raise Unsupported("dispatch stores an output twice")
            stored.add(pos)
            if kinds[pos][0] == "readwrite":
                box = static_box(op)
                if box is None:
                    box, runtime_offsets[out_pos[pos]] = _runtime_offset_box(op, in_pos)
                if box.strided:
                    raise Unsupported("dispatch updates a strided box")
                updates[out_pos[pos]] = (pos, box.offsets)
                sizes[out_pos[pos]] = box.sizes
            elif not is_whole(op, static_shape(op.operands[0].type)):
                raise Unsupported("dispatch stores part of an output")
    if len(stored) != len(out_pos):
        raise Unsupported("dispatch output never stored")
    _check_index_operands(block, kinds)
    return updates, sizes, runtime_offsets


def _runtime_offset_box(store: ir.Operation, in_pos: dict) -> tuple[Box, tuple[int, int]]:
    """A store of a box at one runtime offset (compiler/torch_index_put.py's slice update):
    the box with 0 at that offset, and (its dim, the function argument of the index operand
    that gives it). Refuses (Unsupported) any other dynamic store."""
    why = "dispatch updates a box at runtime offsets other than one position of a copied input"
    try:
        offsets, sizes, strides = (int_array(store.attributes[k])
                                   for k in ("static_offsets", "static_sizes", "static_strides"))
    except KeyError:
        raise Unsupported(why) from None
    dynamic = [d for d, o in enumerate(offsets) if o < 0]
    value = store.operands[0]
    copies_an_input = not isinstance(value.owner, ir.Block) and value.owner.name == LOAD
    if len(dynamic) != 1 or len(store.operands) != 3 or any(s < 0 for s in sizes + strides) \
            or sizes[dynamic[0]] != 1 or not copies_an_input:
        raise Unsupported(why)
    offset = store.operands[2]
    if isinstance(offset.owner, ir.Block) or offset.owner.name != ORDINAL:
        raise Unsupported(why)
    arg = offset.owner.operands[0]
    dim = dynamic[0]
    offsets[dim] = 0
    return Box(offsets, sizes, strides), (dim, in_pos[arg.arg_number])


def _check_index_operands(block: ir.Block, kinds) -> None:
    """An index operand may only give the runtime offset of a stored box (through a workload
    ordinal): the NPU program has no other use for a scalar."""
    for arg, (kind, _) in zip(block.arguments, kinds):
        if kind != "index":
            continue
        for use in arg.uses:
            ordinal = use.owner
            if isinstance(ordinal, ir.Block) or ordinal.name != ORDINAL \
                    or any(isinstance(u.owner, ir.Block) or u.owner.name != STORE or u.operand_number < 2
                           for u in ordinal.results[0].uses):
                raise Unsupported("dispatch computes with an index operand (only the runtime offset of an "
                                  "updated box can be one)")


def _append(op: ir.Operation, block: ir.Block) -> None:
    op.detach_from_parent()
    ir.InsertionPoint(block).insert(op)
