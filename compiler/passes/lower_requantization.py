"""torq-lower-requantization: float requantizations become the NPU's integer rescale.

Contract: takes Torq dispatch functions after the pre-passes (generic
linalg ops). An f32 contraction of a dequantized int8 tensor and constant
dequantized int8 weights (a grouped convolution the importer left in float)
first becomes an integer contraction whose f32 model the quantize reads
(`requant_float_contraction.integer_contractions`; llvm-cpu's own rounding of
it is measured as the accumulators near a step). Every float requantization
after an integer contraction (ONNX /
torch QDQ: the i32 accumulator scaled, rounded, offset and clamped in f32)
is replaced by an integer rescale (`requant.lower_float_requantization`):
the exact one, or with --torq-requant=nearest the nearest within one output
step, measured (with --torq-requant=one-step a dispatch where a later step
makes a value more than one output step off at the result is refused). An
activation quantized with its contraction (PT2E's conv + hardswish) becomes
table segments of a grid level of the dequantized accumulator, within one
output step, measured (`requant_fused_activation`). A
requantization that also yields its int8 value requantized again (GhostNet's
conv quantized for its concatenation too) is split into one generic per
result first, and the second becomes integer stages of the first
(`requant_elementwise.lower_requantized_results`). A dispatch of int8 arithmetic alone (a residual add, a
pooling) is lowered the same way (`requant_elementwise`); one in a form no
integer rescale reproduces (a softmax, a layer norm: a float island) is left
float with --torq-int8-float-ops=bf16 (summarized as such), else refused. A dequantize the
NPU cannot finish (an f32 result) is cut off: the function returns the
integer tensor and the tail is reported for the host (`HostTail`); those
results are listed in `HOST_TAIL_RESULTS`. A result that only reads such an f32 value
(MobileNetV3's SE input, returned in f32 for the pooling and quantized for the
multiply by its gate) is removed: the host computes it from the value it
finishes (a tail whose `source` is that result; `RequantReport.kept_results`
says which results are left). Likewise an f32 argument only
quantized (the model's input QuantizeLinear fused into its consumer): the
argument becomes the integer tensor and the quantize is reported for the
host (a head, `requant_tail.split_input_quantizes`). Arguments the rewrite
leaves unread are removed.

Inputs read from the function: `CONSTANT_ARG` on an argument is its known
value (dispatch extraction attaches the flow-level constant: weights, biases,
per-channel scales), read only through `constant_args.ConstantArgs`, which
records what the pass asked of it (`RequantReport.constants_read`);
`HOST_FMA` says how llvm-cpu evaluates f32 (whether it fuses mul + add),
which the fit reproduces. Both are consumed.

Raises Unsupported when a requantization cannot be reproduced: the dispatch
stays on host, as IREE formed it (the function, whose input quantizes may
already be cut, is dropped). Returns {function name: RequantReport with the
summaries, host tails and heads, and the original indices of the kept
arguments}.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from iree.compiler import ir

from ..constant_args import ConstantArgs
from ..f32_chain import HostFloat
from ..ir_utils import functions, sync_function_type, walk_ops
from ..patterns import Unsupported
from ..requant import lower_float_requantization, unused_arguments
from ..requant_channels import Known
from ..requant_elementwise import FloatIsland, is_int8_arithmetic, lower_int8_arithmetic, lower_requantized_results
from ..requant_float_contraction import integer_contractions
from ..requant_summary import RequantSummary
from ..requant_tail import HostTail, split_input_quantizes
from ..rescale_fit import NotExact
from . import PassOptions, RequantMode
from .check_npu_support import float_conversion_reason
from .mark_in_place_updates import HOST_TAIL_RESULTS, drop_result_updates
from .split_elementwise_results import split_requantization_results

NAME = "torq-lower-requantization"
# The arguments that are a dispatch's scalar operand read as a 0-d tensor (dispatch_extraction):
# only a host tail may read one, so the pass erases them once it took their readers, and
# refuses the dispatch when the NPU part still reads one.
SCALAR_ARGUMENTS = "torq.scalar_arguments"
# Function attribute (input): whether the host's llvm-cpu fuses f32 mul + add (absent: unknown).
HOST_FMA = "torq.host_fma"


@dataclass
class RequantReport:
    """What the pass did to one function."""
    kept_arguments: list[int]  # original index of each argument left
    rescaled: list[RequantSummary] = field(default_factory=list)
    host_tails: dict[int, HostTail] = field(default_factory=dict)  # original result index -> tail
    host_heads: dict[int, HostTail] = field(default_factory=dict)  # original argument index -> its quantize
    # Original index of each result left (a result the host computes from another, a tail
    # with `source` >= 0, is removed).
    kept_results: list[int] | None = None
    # What the pass read of the constant arguments (`ConstantArgs.observed`): the compile is the
    # same for any function of this text whose constants answer these the same.
    constants_read: list[tuple[int, str]] = field(default_factory=list)


def _host_float(func: ir.Operation) -> HostFloat | None:
    if HOST_FMA not in func.attributes:
        return None
    return HostFloat(fma=ir.BoolAttr(func.attributes[HOST_FMA]).value)


def _float_conversions(func: ir.Operation) -> str:
    """What a function left float converts between integers and floats in its linalg bodies
    ("" if nothing): the dequantize into, or the quantize out of, float compute."""
    names = {o.name for o in walk_ops(func) if o.parent is not None and o.parent.name.startswith("linalg.")}
    into, out = "arith.sitofp" in names, "arith.fptosi" in names
    return {(True, True): "int8 to float to int8", (True, False): "int8 to float",
            (False, True): "float to int8"}.get((into, out), "")


def lower_function(func: ir.Operation, mode: RequantMode = RequantMode.NEAREST,
                   bf16_islands: bool = False) -> RequantReport:
    """Lowers the requantizations of `func` (see the module docstring); with `bf16_islands`
    (and `mode` not EXACT) a float island between int8 tensors is left float, for bf16; in
    ONE_STEP `mode`, a dispatch whose result may be more than one output step off anywhere
    (requant_summary.Composition) is refused."""
    block = func.regions[0].blocks[0]
    n_args = len(block.arguments)
    n_results = len(ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value).results)
    had_users = set(range(n_args)) - set(unused_arguments(func))
    constants, host = ConstantArgs(func), _host_float(func)
    for name in ("arg_attrs", HOST_FMA):  # consumed: later passes see a plain function
        if name in func.attributes:
            del func.attributes[name]
    heads = split_input_quantizes(func, Known(constants))
    integer_contractions(func, Known(constants), host)
    split_requantization_results(func)
    try:
        done = lower_float_requantization(func, constants, host, mode)
        # A second result's table is not priced against the first's levels one off: with
        # --torq-requant=one-step only after exact rescales.
        if done.rescaled and (mode is not RequantMode.ONE_STEP or not any(s.approximate for s in done.rescaled)):
            done.rescaled += lower_requantized_results(func, Known(constants), host, mode)
        if not done.rescaled and is_int8_arithmetic(func, Known(constants)):
            try:
                done.rescaled = lower_int8_arithmetic(func, Known(constants), host, mode)
            except FloatIsland as island:
                if mode is RequantMode.EXACT or not bf16_islands:
                    raise NotExact(f"{island}: on host in f32 (--torq-int8-float-ops=bf16 runs it on "
                                   f"the NPU in bf16)") from None
                # The dispatch stays float: convert-dtypes makes it bf16, its dequantize and
                # quantize are epilogue casts and a round step (patterns/elementwise.py).
                done.rescaled = [RequantSummary.float_island(f"int8 {island.forms}")]
    except NotExact as e:
        raise Unsupported(str(e)) from None
    if mode is RequantMode.ONE_STEP:
        _refuse_composed(done.rescaled)
    if bf16_islands and mode is not RequantMode.EXACT and not done.rescaled:
        kind = _float_conversions(func)
        if kind:
            done.rescaled = [RequantSummary.float_island(kind)]
    report = RequantReport(list(range(n_args)), done.rescaled, dict(done.host_tails), heads,
                           [k for k in range(n_results) if k not in done.derived], constants.observed)
    if not done.rescaled and not done.host_tails and not heads:
        return report
    drop_result_updates(func, report.kept_results)
    if done.host_tails:
        func.attributes[HOST_TAIL_RESULTS] = ir.DenseI64ArrayAttr.get(
            [report.kept_results.index(k) for k in sorted(done.host_tails) if k not in done.derived])
    dropped = sorted((k for k in unused_arguments(func) if k in had_users), reverse=True)
    for k in dropped:
        block.erase_argument(k)
        del report.kept_arguments[k]
    sync_function_type(func)
    return report


def _refuse_composed(summaries: list[RequantSummary]) -> None:
    """Unsupported when one of `summaries` leaves values more than one output step off at the
    result (--torq-requant=one-step)."""
    for s in summaries:
        c = s.all_composition
        if c.off:
            raise Unsupported(f"{s.kind}: {c.off} accumulator values or input pairs would be up to {c.steps} output "
                              f"steps off at the result (a rescale's level one off where a later step spans several "
                              f"output steps per level, and no rescale holds those transitions): on host with "
                              f"--torq-requant=one-step")


def run(module: ir.Module, options: PassOptions) -> dict[str, RequantReport]:
    reports = {}
    for func in functions(module):
        scalars = _take_scalar_arguments(func)
        report = lower_function(func, RequantMode(options.requant), bf16_islands=options.int8_float_ops == "bf16")
        _drop_scalar_arguments(func, report, scalars, options)
        reports[ir.StringAttr(func.attributes["sym_name"]).value] = report
    return reports


def _take_scalar_arguments(func: ir.Operation) -> set[int]:
    """The arguments `SCALAR_ARGUMENTS` names (the attribute is consumed)."""
    if SCALAR_ARGUMENTS not in func.attributes:
        return set()
    scalars = set(ir.DenseI64ArrayAttr(func.attributes[SCALAR_ARGUMENTS]))
    del func.attributes[SCALAR_ARGUMENTS]
    return scalars


def _drop_scalar_arguments(func: ir.Operation, report: RequantReport, scalars: set[int],
                           options: PassOptions) -> None:
    """Erases the scalar arguments nothing reads any more (a host tail took their readers);
    Unsupported when the NPU part still reads one: the call passes tensors only. The reason
    is check_npu_support's when it has one (a quantize in f32 that reads a run-time zero
    point says so), which later passes would not reach with the scalar argument."""
    block = func.regions[0].blocks[0]
    for k in reversed(range(len(report.kept_arguments))):
        if report.kept_arguments[k] not in scalars:
            continue
        arg = block.arguments[k]
        if list(arg.uses):
            raise Unsupported(float_conversion_reason(func, options) or
                              f"dispatch takes a non-tensor operand ({ir.ShapedType(arg.type).element_type}) "
                              f"that its NPU part reads: a run-time quantization's zero point or scale, which only "
                              f"the host reads (a quantize with it, or a contraction subtracting it from its input with "
                              f"weights that are no constant, runs on the host)")
        block.erase_argument(k)
        del report.kept_arguments[k]
    sync_function_type(func)
