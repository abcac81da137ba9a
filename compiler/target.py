"""The Torq target: choose dispatches for the NPU and replace them with calls.

At IREE's dispatch-creation phase every dispatch is a
`flow.dispatch.workgroups` op. For each one, `TorqTarget.run`:
1. extracts its body into a self-contained tensor function
   (`dispatch_extraction`: the flow-level constants it reads and the boxes it
   updates ride on the function as attributes);
2. runs the dispatch pipeline (`pipeline.DISPATCH_PIPELINE`) on it, to a
   serialized executable. Its passes decompose attention, lower float
   requantizations, mark in-place updates and check what the NPU can run
   (torq-check-npu-support); a pass that raises `Unsupported` leaves the
   dispatch on the host with a remark naming the op and why;
3. replaces the dispatch with `hal.tensor.export` of its operands, a call to
   `torq.run_i<N>_o<M>(executable, ...)` (imported from the `torq` VM module)
   and `hal.tensor.import` of its results.
A result that updates a box of a read-write operand is written in place by
the NPU (torq-mark-in-place-updates): that operand is passed
after the inputs and the call's result is the whole updated tensor. Only a
result the host finishes (a dequantize tail) is still inserted by a host copy
dispatch (`box_copy_dispatch`). A dispatch that computes nothing but copies (boxes
of) its inputs, or pads one, runs as a DMA-only NSS program
(`patterns.data_movement_reason`).

Each dispatch's source in the model and op kinds (`source_locations`) ride
on its decision and its remarks; every
public function's dispatches are recorded in its `iree.reflection`
(`attach_dispatch_records`, contract/dispatch_records.py) for the runtime's
per-layer report.
"""

from __future__ import annotations

import hashlib
import sys
import time
from dataclasses import dataclass, field

import numpy as np
from iree.compiler import ir
from iree.compiler.dialects import arith, flow

from torq.contract import dispatch_records
from torq.contract.executable import parse_executable
from torq.contract.measures import program_traffic
from torq.contract.module_abi import MODULE_NAME, export_name

from . import dispatch_check
from .box_reads import dispatch_arguments
from .dequantize_dispatches import move_dequantizes_into_consumers
from .dispatch_cache import Compiled, DispatchCache
from .dispatch_check import export_view, import_view
from .dispatch_compile import DispatchCompiler, Refused, StartedWorkers, WorkerError, compile_in_process
from .dispatch_extraction import ExtractedDispatch, FlowModuleFacts, extract_dispatch_function
from .host_dispatches import (
    box_copy_dispatch,
    hoist_input_pads,
    host_tail_dispatch,
    pad_elementwise_inputs,
    sink_result_pads,
)
from .ir_utils import CompileError, location_str, reshaped, static_shape, walk_ops
from .load_time_views import LoadTimeViews
from .macs import count_macs
from .passes import PassOptions, super_tiling
from .patterns import Unsupported, classify_contraction
from .pipeline import dispatch_pipeline, run_passes
from .quantization_parameters import (
    PER_TOKEN_REASON,
    module_quantizes,
    per_token_parameter_dispatches,
    quantization_parameter_reason,
)
from .source_locations import dispatch_op_kinds, dispatch_source, first_frame_location

# A dispatch IREE hoisted into a util.initializer runs once, when the module loads: a
# constant expression of parameters (a weight's transpose) or a constant mask. Load-time
# work is the host's, as on the device; inference's timeline is the NPU's. (On the NPU, IREE's
# stream pipeline also fails to converge around the calls in an initializer with external
# parameters: "maximum iteration count exceeded in fixed point pipeline".)
LOAD_TIME_REASON = "runs once when the module loads (IREE hoisted it into an initializer): host"


@dataclass
class DispatchDecision:
    name: str
    executor: str  # "torq" | "host"
    reason: str = ""
    tiles: int = 0
    lram_peak: int = 0
    # Multiply-accumulates of the dispatch's linalg ops (compiler/macs.py), torq or
    # host alike; None when a contraction has a dynamic loop range.
    macs: int | None = None
    # Per float requantization compiled to an integer rescale (requant.RequantSummary.as_dict).
    requant: list[dict] = field(default_factory=list)
    # The executable is a compile of an identical dispatch (this compile's or the disk cache's).
    cached: bool = False
    # sha256 of the Torq executable (reproducibility checks compare these, not whole .vmfb
    # files, whose llvm-cpu parts may carry a temporary file's name).
    executable_sha256: str = ""
    # Where it came from in the model (source_locations.dispatch_source: torch file:lines, ONNX
    # node names; "" when unknown) and what it computes (dispatch_op_kinds, e.g. conv2d+elementwise).
    source: str = ""
    ops: str = ""


@dataclass
class TargetReport:
    dispatches: list[DispatchDecision] = field(default_factory=list)
    # Per NPU dispatch, with --torq-dump-tiling: the super tiling decisions and
    # the predicted traffic of the final program.
    tiling: list[dict] = field(default_factory=list)
    # With a Torq stop phase: the NPU dispatches at that phase, one func each
    # (text: the IR objects die with the compiler session).
    stopped_ir: str = ""
    # Wall seconds of the Torq target (extraction, dispatch compiles, calls): the part of a
    # compile that is Torq's own, beside IREE's front and back end.
    seconds: float = 0.0

    def quant_dump(self) -> dict:
        """--torq-dump-quant: per NPU dispatch, how each float requantization was compiled."""
        return {"dispatches": [{"dispatch": d.name, "requantizations": d.requant}
                               for d in self.dispatches if d.requant]}

    @property
    def total_macs(self) -> int:
        return sum(d.macs or 0 for d in self.dispatches)

    @property
    def torq_macs(self) -> int:
        return sum(d.macs or 0 for d in self.dispatches if d.executor == "torq")

    @property
    def uncounted_host_dispatches(self) -> int:
        """Host dispatches whose MACs are unknown (dynamic shapes): not in `total_macs`."""
        return sum(d.macs is None and d.executor != "torq" for d in self.dispatches)

    @property
    def npu_mac_share(self) -> float:
        """MACs of NPU dispatches / MACs of all dispatches (1.0 when there are none); an upper
        bound when some host dispatches are uncounted (`uncounted_host_dispatches`)."""
        return self.torq_macs / self.total_macs if self.total_macs else 1.0


def _declare(module_op: ir.Operation, n_in: int, n_out: int, declared: set) -> str:
    name = f"{MODULE_NAME}.{export_name(n_in, n_out)}"
    if name not in declared:
        bv = "!hal.buffer_view"
        args = ", ".join(["!util.buffer"] + [bv] * n_in)
        res = ", ".join([bv] * n_out)
        decl = ir.Operation.parse(f"util.func private @{name}({args}) -> ({res})")
        ir.InsertionPoint.at_block_begin(module_op.regions[0].blocks[0]).insert(decl)
        declared.add(name)
    return name


def _replace_with_call(dispatch: ir.Operation, ex: ExtractedDispatch, compiled: Compiled, callee: str,
                       load_time: LoadTimeViews, check: bool = False) -> None:
    """`dispatch` replaced by the call of its executable; with `check`, each result the call
    returns whole is compared at run time with that of a host copy of `dispatch`
    (compiler/dispatch_check.py), both updating a read-write operand from the same contents
    (`_define_updated_operands`)."""
    bv = ir.Type.parse("!hal.buffer_view")
    with ir.InsertionPoint(dispatch), dispatch.location:
        if check:
            _define_updated_operands(dispatch, ex)
        copy = dispatch.clone() if check else None  # the original, left for the host
        exe = ir.Operation.create(
            "util.buffer.constant", results=[ir.Type.parse("!util.buffer")],
            attributes={"value": ir.DenseElementsAttr.get(
                np.frombuffer(compiled.blob, np.int8), type=ir.IntegerType.get_signless(8)),
                "alignment": ir.IntegerAttr.get(ir.IndexType.get(), 64)})
        # The inputs, then the read-write operands of the results updated in place.
        passed = ex.input_operands + [ex.result_updates[k][0] for k in ex.in_place]
        arguments = dispatch_arguments(dispatch)
        read = set(ex.input_operands) | {i for t in ex.host_tails.values() for i in t.tensor_operands}
        arguments += [arith.ConstantOp(a.type, a).result if len(arguments) + j in read else None
                      for j, a in enumerate(ex.hoisted_constants)]  # (epilogue_scalars.py)
        operands = [arguments[i] for i in ex.input_operands]
        for j, head in ex.host_heads.items():  # the model input's quantize runs on the host
            operands[j] = host_tail_dispatch(operands[j], head, ir.Type.parse(head.result_type))
        views = [_input_view(v, shape, i in ex.index_operands, load_time)
                 for v, shape, i in zip(operands, compiled.arg_shapes, ex.input_operands)]
        views += [export_view(arguments[i]) for i in passed[len(ex.input_operands):]]
        returned = ex.function_results if ex.function_results is not None else range(len(dispatch.results))
        call = ir.Operation.create("util.call", results=[bv] * len(returned),
                                   operands=[exe.result] + views,
                                   attributes={"callee": ir.FlatSymbolRefAttr.get(callee)})
        finished = {}  # dispatch result -> its value before a box copy
        for k, v, t in zip(returned, call.results, compiled.host_result_types):
            r = dispatch.results[k]
            # An in-place result is the whole updated operand, of the dispatch result's type.
            t = r.type if k in ex.in_place else ir.Type.parse(t)
            # The function may have dropped unit dims (torq-fold-unit-dims) or expanded a dim. A box
            # the host copies into its operand (after a host tail) is the box's shape, not the operand's.
            box = ex.result_updates[k][0] >= 0 and k not in ex.in_place
            finished[k] = reshaped(import_view(v, t), ex.result_update_sizes[k] if box else static_shape(r.type))
        for k in [*returned, *sorted(set(range(len(dispatch.results))) - set(returned))]:
            r, value = dispatch.results[k], finished.get(k)
            if k in ex.host_tails:  # the dequantize after an int8 NPU result runs on the host
                tail = ex.host_tails[k]
                value = host_tail_dispatch(value if tail.source < 0 else finished[tail.source], tail,
                                           ir.RankedTensorType(r.type).element_type,
                                           [arguments[i] for i in tail.tensor_operands])
                finished[k] = value
            tied, offsets = ex.result_updates[k]
            if tied >= 0 and k not in ex.in_place:  # the host writes the finished box into the operand
                value = box_copy_dispatch(value, arguments[tied], offsets,
                                          dest_sizes=ex.result_update_sizes[k])
            if copy is not None:  # a box or in-place result: the whole updated operand on both sides
                value = dispatch_check.checked(exe.result, k, value, copy.results[k])
            r.replace_all_uses_with(value)
    dispatch.erase()
    if copy is not None:
        _hoist_pads_for_host(copy)


# What an undefined read-write operand holds on both sides of a check: not zero for integers, so
# an NPU dispatch that zeroes elements outside its box is caught; zero for floats, so the
# relative L2 error of the written box is not diluted by the fill.
CHECK_FILL_INT = 0x55


def _define_updated_operands(dispatch: ir.Operation, ex: ExtractedDispatch) -> None:
    """With --torq-check-dispatches: each read-write operand of `dispatch` (one it updates a box
    of, in place or by a host copy) that is a `tensor.empty` becomes, for this dispatch only, a
    splat of a fixed value (`CHECK_FILL_INT` or 0.0), at the insertion point.

    Why: the check compares the whole updated operand (compiler/dispatch_check.py), which the
    NPU call and the host copy each receive as an export of the same SSA value. An empty's
    contents are undefined, so IREE may give each of those uses its own allocation (it does
    for the first piece of a concatenation written into a fresh result), one of them holding
    a dead intermediate's values: the elements the dispatch does not write then differ
    between the two. A splat makes both start from the same contents, so elements outside
    the box must come out equal and stay checked. Without the check nothing changes (the
    empty costs no fill); the fill is undefined data the later pieces overwrite."""
    arguments = dispatch_arguments(dispatch)
    first = ir.DenseI32ArrayAttr(dispatch.attributes["operandSegmentSizes"])[0]  # the workload
    for i in sorted({tied for tied, _ in ex.result_updates if tied >= 0}):
        empty = arguments[i].owner
        if isinstance(empty, ir.Block) or empty.name not in ("tensor.empty", "flow.tensor.empty"):
            continue  # defined contents: both sides read the same value already
        t = ir.RankedTensorType(arguments[i].type)
        attr = _check_fill_attr(t.element_type)
        if attr is not None:
            fill = arith.ConstantOp(t.element_type, attr).result
            dispatch.operands[first + i] = flow.TensorSplatOp(t, fill, list(empty.operands)).result


def _check_fill_attr(element: ir.Type) -> ir.Attribute | None:
    """The `CHECK_FILL_INT` (an integer or i1: 1) or 0.0 (a float) constant of `element` type;
    None for another type (the operand is left an empty)."""
    if isinstance(element, ir.IntegerType):
        width = ir.IntegerType(element).width
        return ir.IntegerAttr.get(element, 1 if width == 1 else CHECK_FILL_INT)
    if isinstance(element, ir.FloatType):
        return ir.FloatAttr.get(element, 0.0)
    return None


def _input_view(operand: ir.Value, shape: tuple[int, ...], is_index: bool, load_time: LoadTimeViews) -> ir.Value:
    """The buffer view a call passes for an input operand, of the function's argument `shape`:
    a constant's exported once at load (compiler/load_time_views.py; reshaped there when the
    function expanded or dropped dims), an index operand's as a tensor<1xi32>, else exported here."""
    if is_index:
        return export_view(_index_tensor(operand))
    return load_time.view(operand, shape) or export_view(reshaped(operand, shape))


def _index_tensor(index: ir.Value) -> ir.Value:
    """An index operand of a dispatch (a runtime offset) as the tensor<1xi32> the call passes
    (dispatch_extraction): a one-element fill, which IREE runs as a transfer, no dispatch."""
    i32 = ir.IntegerType.get_signless(32)
    value = arith.IndexCastOp(i32, index).result
    return flow.TensorSplatOp(ir.RankedTensorType.get([1], i32), value, []).result


def _tiling_record(name: str, blob: bytes, options: PassOptions, roots: list[dict]) -> dict:
    program = parse_executable(blob, options.hw)
    t = program_traffic(program)
    return {"dispatch": name, "strategy": options.super_tiling_strategy, "roots": roots,
            "tiles": program.tiles, "lram_peak_bytes": program.lram_peak,
            "budget_bytes": options.hw.available_lram_bytes,
            "predicted_dma_bytes_in": t.dma_bytes_in, "predicted_dma_bytes_out": t.dma_bytes_out,
            "compulsory_bytes": t.compulsory_bytes, "traffic_ratio": round(t.ratio, 4)}


def _keeps_fused_pad(user: ir.Operation) -> bool:
    """Whether llvm-cpu compiles `user` with a `tensor.pad` fused into its input: a 2-D conv
    that is not depthwise, or a pooling (as a named op or a conv2d-shaped generic)."""
    if user.name.startswith("linalg.pooling_"):
        return True
    if user.name.startswith("linalg.conv_2d"):
        return True
    c = classify_contraction(user) if user.name == "linalg.generic" else None
    return c is not None and c.kind == "conv2d" and "H" in c.attrs["input_dims"]  # not a 1-D conv


def _needs_hoisting(pad: ir.Operation) -> bool:
    """Whether an op llvm-cpu cannot compile with the fused pad reads the result of `pad`."""
    return any(not isinstance(use.owner, ir.Block) and not _keeps_fused_pad(use.owner)
               for use in pad.results[0].uses)


def _hoist_pads_for_host(dispatch: ir.Operation) -> None:
    """A dispatch left on the host keeps the `tensor.pad` dispatch creation fused into
    it for the NPU (driver.DISPATCH_FLAGS). llvm-cpu cannot compile such a pad
    feeding a depthwise conv or a 1-D conv (as is, nor decomposed into fill +
    insert_slice: the fill of the padded tensor is never tiled), so that padding is
    built before the dispatch as IREE builds it without the fusion flag
    (`hoist_input_pads`: a splat of the pad value and a host copy dispatch of the
    input into it) and the dispatch reads the padded tensor. 2-D convs and pools
    compile with the fused pad, so they keep it (no extra copy). A pad of an elementwise value
    the dispatch computes becomes a pad of that value's inputs (`pad_elementwise_inputs`), and
    a result stored as a pad of a computed value is stored unpadded and padded after it
    (`sink_result_pads`)."""
    pad_elementwise_inputs(dispatch)
    hoist_input_pads(dispatch, _needs_hoisting)
    sink_result_pads(dispatch)


def attach_dispatch_records(module_op: ir.Operation, report: TargetReport) -> None:
    """Each public function's dispatches (NPU and host, in program order) into its
    `iree.reflection`, where the runtime's reports read them (contract/dispatch_records.py)."""
    for op in (o.operation for o in module_op.regions[0].blocks[0].operations):
        if op.name != "util.func" or "sym_name" not in op.attributes:
            continue
        if "sym_visibility" in op.attributes and ir.StringAttr(op.attributes["sym_visibility"]).value != "public":
            continue
        function = ir.StringAttr(op.attributes["sym_name"]).value.replace("$async", "")
        mine = [d for d in report.dispatches if d.name.rsplit("_dispatch_", 1)[0] == function]
        if not mine:
            continue
        records = [{"name": d.name, "executor": d.executor, "ops": d.ops, "macs": d.macs, "source": d.source,
                    "reason": d.reason} for d in mine]
        entries = {}
        if "iree.reflection" in op.attributes:
            old = ir.DictAttr(op.attributes["iree.reflection"])
            entries = {old[i].name: old[i].attr for i in range(len(old))}
        entries[dispatch_records.KEY] = ir.StringAttr.get(dispatch_records.encode(records))
        op.attributes["iree.reflection"] = ir.DictAttr.get(entries)


def _enclosing_function_name(dispatch: ir.Operation) -> str:
    """The util.func holding `dispatch` ("$async" dropped), or "initializer" for a
    dispatch IREE hoisted into a util.initializer (e.g. a constant causal mask)."""
    parent = dispatch.parent
    while parent is not None and parent.name not in ("util.func", "util.initializer"):
        parent = parent.parent
    if parent is None or "sym_name" not in parent.attributes:
        return "initializer"
    return ir.StringAttr(parent.attributes["sym_name"]).value.replace("$async", "")


class TorqTarget:
    """Runs on a flow-level module in place.

    With `stop_after_phase` (a key of `pipeline.TORQ_PHASES`), NPU dispatches
    are compiled only to that phase, printed into `report.stopped_ir`, and
    the flow module is left unchanged but for the dequantize dispatches moved
    into their readers first (`dequantize_dispatches`: what the compile does).
    """

    def __init__(self, options: PassOptions, remarks=sys.stderr, print_after_all=None,
                 stop_after_phase: str = "", jobs: int = 1, cache: DispatchCache | None = None,
                 check_dispatches: bool = False, started: StartedWorkers | None = None,
                 run_time_quantization: bool = False):
        self.options = options
        # The model quantizes when it runs (the driver's dynamic-quantization marks): what its
        # quantizes read per token stays on the host (quantization_parameters.py).
        self.run_time_quantization = run_time_quantization
        self.check_dispatches = check_dispatches
        self.remarks = remarks
        self.print_after_all = print_after_all
        self.stop_after_phase = stop_after_phase
        self.jobs, self.cache = jobs, cache
        self.started = started  # dispatch compile workers the driver started ahead

    def remark(self, job: _Job, text: str) -> None:
        """A remark on `job`'s dispatch, at its location, naming where it came from in the model."""
        if self.remarks is None:
            return
        where = location_str(job.dispatch)
        if where.startswith("callsite(") and first_frame_location(job.source):
            where = first_frame_location(job.source)  # the model's line, not the export's call stack
        tail = f" [source: {job.source}]" if job.source else ""
        print(f"{where}: remark: {text}{tail}", file=self.remarks)

    def run(self, module_op: ir.Operation) -> TargetReport:
        start = time.perf_counter()
        report = self._run(module_op)
        report.seconds = time.perf_counter() - start
        return report

    def _run(self, module_op: ir.Operation) -> TargetReport:
        report = TargetReport()
        pipeline = dispatch_pipeline(self.stop_after_phase)
        declared: set = set()
        load_time = LoadTimeViews(module_op)
        move_dequantizes_into_consumers(module_op)
        jobs = self._extract_all(module_op, report)
        if self.stop_after_phase:
            report.stopped_ir = self._stop(jobs, pipeline, report)
            return report
        if self.print_after_all is not None:  # watched: in this process, in order
            outcomes = [compile_in_process(job.scratch, pipeline, self.options, self.print_after_all)
                        for job in jobs]
        else:
            compiler = DispatchCompiler(self.options, pipeline, self.jobs, self.cache, self.started)
            outcomes = compiler.compile_all([(job.name, job.scratch) for job in jobs])
        for job, outcome in zip(jobs, outcomes):
            if isinstance(outcome, Refused):
                self._refused(job, outcome, report)
                continue
            job.ex.apply_reports(outcome.reports)
            if self.options.record_tiling:
                records = outcome.reports.get(super_tiling.NAME, [])
                report.tiling.append(_tiling_record(job.name, outcome.blob, self.options, records))
            for summary in job.ex.requant:
                if summary.approximate:
                    self.remark(job, f"dispatch {job.name}: {summary.line()}")
            for j, head in sorted(job.ex.host_heads.items()):
                self.remark(job, f"dispatch {job.name}: the quantize of its f32 input {j} to {head.result_type} (the "
                                 f"model input's QuantizeLinear, fused into it) runs on the host before it")
            callee = _declare(module_op, len(job.ex.input_operands) + len(job.ex.in_place),
                              len(outcome.host_result_types), declared)
            if self.check_dispatches:
                dispatch_check.declare_check(module_op, declared)
            _replace_with_call(job.dispatch, job.ex, outcome, callee, load_time, self.check_dispatches)
            report.dispatches.append(DispatchDecision(job.name, "torq", "", outcome.tiles, outcome.lram_peak,
                                                      job.macs, [s.as_dict() for s in job.ex.requant],
                                                      outcome.cached, hashlib.sha256(outcome.blob).hexdigest(),
                                                      job.source, job.ops))
        attach_dispatch_records(module_op, report)
        return report

    def _extract_all(self, module_op: ir.Operation, report: TargetReport) -> list[_Job]:
        """Every dispatch as a self-contained function; one extraction refuses goes to the host."""
        jobs = []
        facts = FlowModuleFacts(module_op)
        dispatches = [op for op in walk_ops(module_op) if op.name == "flow.dispatch.workgroups"]
        quantizes = None  # whether the module quantizes: read only for a dispatch that computes single values
        per_token = per_token_parameter_dispatches(dispatches) if self.run_time_quantization else set()
        for i, dispatch in enumerate(dispatches):
            name = f"{_enclosing_function_name(dispatch)}_dispatch_{i}"
            # MACs, source and op kinds before the dispatch is replaced
            job = _Job(dispatch, name, count_macs(dispatch), ir.Module.create(), dispatch_source(dispatch),
                       dispatch_op_kinds(dispatch))
            if name.startswith("initializer_"):
                self._refused(job, Refused(LOAD_TIME_REASON, unsupported=True), report)
                continue
            reason = quantization_parameter_reason(dispatch) or (PER_TOKEN_REASON if dispatch in per_token else "")
            if reason and quantizes is None:
                quantizes = module_quantizes(dispatches)
            if reason and quantizes:
                self._refused(job, Refused(reason, unsupported=True), report)
                continue
            try:
                job.ex = extract_dispatch_function(dispatch, name, job.scratch, facts)
            except Unsupported as e:
                self._refused(job, Refused(str(e), unsupported=True), report)
                continue
            jobs.append(job)
        return jobs

    def _refused(self, job: _Job, refusal: Refused, report: TargetReport) -> None:
        """Unsupported: no Torq form, host by design; a failed Torq compile is a user error
        unless --torq-host-fallback-on-error; a compiler bug in a worker is raised as one."""
        if refusal.internal:
            raise WorkerError(f"dispatch {job.name}: {refusal.message}", refusal.internal)
        if not refusal.unsupported and not self.options.host_fallback_on_error:
            raise CompileError(f"{location_str(job.dispatch)}: dispatch {job.name}: {refusal.message}")
        reason = refusal.message if refusal.unsupported else f"Torq compile failed: {refusal.message}"
        self.remark(job, f"dispatch {job.name} stays on host: {reason}")
        report.dispatches.append(DispatchDecision(job.name, "host", reason, macs=job.macs, source=job.source,
                                                  ops=job.ops))
        _hoist_pads_for_host(job.dispatch)

    def _stop(self, jobs: list[_Job], pipeline: list[str], report: TargetReport) -> str:
        """--compile-to a Torq phase: the NPU dispatches at that phase, the flow module unchanged."""
        stopped = ir.Module.create()
        for job in jobs:
            try:
                run_passes(job.scratch, pipeline, self.options, self.print_after_all)
            except (Unsupported, CompileError) as e:
                self._refused(job, Refused(str(e), isinstance(e, Unsupported)), report)
                continue
            func = job.scratch.body.operations[0].operation
            func.detach_from_parent()
            stopped.body.append(func)
            report.dispatches.append(DispatchDecision(job.name, "torq", macs=job.macs, source=job.source,
                                                      ops=job.ops))
        return str(stopped)


@dataclass
class _Job:
    """One dispatch on its way through the target."""
    dispatch: ir.Operation
    name: str
    macs: int | None
    scratch: ir.Module
    source: str = ""
    ops: str = ""
    ex: ExtractedDispatch | None = None
