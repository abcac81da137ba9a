"""The compile driver: IREE in process, with the Torq target in the middle.

input MLIR --(IREE: input ... dispatch-creation)--> flow module
  --(TorqTarget: NPU dispatches become calls into the `torq` VM module)-->
  --(IREE: dispatch-creation ... vm, host code + llvm-cpu fallbacks)--> .vmfb

Phase control uses the C API's `ireeCompilerInvocationSetCompileToPhase` /
`...SetCompileFromPhase`, which the Python wrapper does not expose.
"""

from __future__ import annotations

import ctypes
import gc
import os
import traceback
from dataclasses import dataclass, field

from iree.compiler import ir
from iree.compiler.api import Output, Session, Source, ctypes_dl

from torq.contract.hw import HwSpecError, TorqHw, describe_presets, parse_hw_spec

from .dispatch_cache import DispatchCache, bytecode
from .dispatch_compile import QDQ_PRELOAD, StartedWorkers, WorkerError, default_jobs
from .dispatch_compile import preload as preload_modules
from .files import write_atomically  # noqa: F401 (the CLI tools and the API import it from here)
from .frontend_cache import FrontendCache, frontend_key
from .ir_utils import CompileError
from .passes import PassOptions, RequantMode
from .pipeline import TORQ_PHASES
from .target import TargetReport, TorqTarget
from .torch_dynamic_quant import rewrite_dynamic_quantization
from .torch_index_put import rewrite_indexed_rows
from .torch_linear import may_rewrite, rewrite_batched_linears, rewrite_quantized_linears
from .torch_qdq import rewrite_uint8_activations
from .torchao_quant import rewrite_torchao_quantization

PHASES = ["input", "abi", "preprocessing", "global-optimization", "dispatch-creation", "flow",
          "stream", "executable-sources", "executable-configurations", "executable-targets",
          "hal", "vm", "end"]


class UsageError(Exception):
    """A bad command line: unknown flag, bad value, missing file."""


@dataclass
class CompileOptions:
    hw: TorqHw = field(default_factory=TorqHw)
    torq: bool = True  # False: behave exactly as stock iree-compile
    iree_flags: list[str] = field(default_factory=list)
    keep_f32: bool = False
    strategy: str = "default"
    traffic_slack: float = 0.0
    slice_distribution: str = "cyclic"
    compile_to: str = ""
    print_ir_after_all: bool = False
    dump_tiling: str = ""  # path of the JSON written by --torq-dump-tiling
    host_fallback_on_error: bool = False
    requant: str = "nearest"  # --torq-requant
    int8_float_ops: str = "host"  # --torq-int8-float-ops
    dump_quant: str = ""  # path of the JSON written by --torq-dump-quant
    jobs: int = 0  # --torq-jobs / -j: worker processes for distinct dispatches (0: one per core)
    cache_dir: str | None = None  # --torq-cache-dir (None: $TORQ_CACHE_DIR, else the user cache directory)
    no_cache: bool = False  # --torq-no-cache: compile every dispatch afresh
    check_dispatches: bool = False  # --torq-check-dispatches (compiler/dispatch_check.py)

    def dispatch_cache(self) -> DispatchCache | None:
        """The cache of compiled dispatches: in memory, and on disk unless the directory is 'none'."""
        if self.no_cache:
            return None
        directory = self.cache_dir if self.cache_dir is not None else os.environ.get("TORQ_CACHE_DIR")
        if directory is None:
            base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
            directory = os.path.join(base, "torq", "dispatches")
        return DispatchCache(None if directory in ("", "none") else directory)

    def frontend_cache(self) -> FrontendCache | None:
        """The on-disk cache of IREE's front end (compiler/frontend_cache.py), beside the dispatches'."""
        cache = self.dispatch_cache()
        return FrontendCache(cache.directory) if cache is not None and cache.directory else None

    def pass_options(self) -> PassOptions:
        return PassOptions(hw=self.hw, keep_f32=self.keep_f32, super_tiling_strategy=self.strategy,
                           tiling_traffic_slack=self.traffic_slack,
                           slice_distribution=self.slice_distribution,
                           record_tiling=bool(self.dump_tiling),
                           host_fallback_on_error=self.host_fallback_on_error, requant=self.requant,
                           int8_float_ops=self.int8_float_ops)


REQUANT_MODES = tuple(m.value for m in RequantMode)
INT8_FLOAT_OPS = ("host", "bf16")
# Every Torq flag with its value form and what it does: the one list `parse_torq_flags`
# accepts and `--help` prints.
TORQ_FLAG_HELP = {
    "--torq-hw": ("NAME[:key=value,...]", "hardware model to compile for (default SL2610); 'list' lists them"),
    "--torq-requant": ("nearest|exact|one-step", "int8 float requantizations: the nearest integer rescale (default, "
                       "one output step off its own chain, measured and reported, as are the values a later step "
                       "makes more than one step off at the result), only exact ones (the rest on host), or the "
                       "nearest where no value can be more than one output step off at the result (the rest on host)"),
    "--torq-int8-float-ops": ("host|bf16", "float compute between int8 tensors that no integer rescale "
                              "reproduces (a quantized softmax or layer norm): on host in f32 (default) or on "
                              "the NPU in bf16 (its int8 results may then differ by more than one output step)"),
    "--torq-dump-quant": ("FILE.json", "write each dispatch's requantization summary"),
    "--torq-dump-tiling": ("FILE.json", "write each dispatch's super-tiling decision"),
    "--torq-super-tiling-strategy": ("default|traffic|seed", "super-tiling search strategy"),
    "--torq-tiling-traffic-slack": ("FRACTION", "DDR bytes the tiler may add to save cycles (e.g. 0.05)"),
    "--torq-slice-distribution": ("cyclic|block|block-cyclic[:B]", "how a tile's work is split over the "
                                  "slices"),
    "--torq-keep-f32": ("", "keep f32 dispatches f32 (no bf16 conversion): they stay on host"),
    "--torq-host-fallback-on-error": ("", "a dispatch the Torq pipeline fails on runs on host instead of failing"),
    "--torq-print-ir-after-all": ("", "print each NPU dispatch's IR after every Torq pass"),
    "--torq-quiet": ("", "no remarks on stderr"),
    "--torq-jobs": ("N", "compile distinct dispatches in N processes (also -j N; default: one per core)"),
    "--torq-cache-dir": ("DIR|none", "where compiled dispatches and IREE's front-end results are kept "
                         "across compiles (default $TORQ_CACHE_DIR or ~/.cache/torq/dispatches; none: "
                         "dispatches in memory only)"),
    "--torq-no-cache": ("", "compile every dispatch and IREE's front end afresh (no cache in memory or "
                        "on disk)"),
    "--torq-check-dispatches": ("", "keep a host (llvm-cpu) copy of every NPU dispatch and compare each NPU "
                                "result with it at run time, on the same inputs (torq-run-module "
                                "--print-stats; LoadedModule.last_checks)"),
}
TORQ_FLAGS = set(TORQ_FLAG_HELP)


def parse_torq_flags(argv: list[str]) -> tuple[CompileOptions, list[str], bool]:
    """Split argv into Torq options and the rest (IREE flags, inputs, -o); the bool is --torq-quiet."""
    opts = CompileOptions()
    rest = []
    quiet = False
    for a in _joined_short_jobs(argv):
        key, _, value = a.partition("=")
        if key.startswith("--torq-"):
            if key not in TORQ_FLAGS:
                raise UsageError(f"unknown flag '{key}' (Torq flags: {', '.join(sorted(TORQ_FLAGS))})")
            if key == "--torq-quiet":
                quiet = True
            else:
                _FLAG_SETTERS[key](opts, value)
        elif key == "--compile-to":
            if value not in PHASES and value not in TORQ_PHASES:
                raise UsageError(f"unknown --compile-to phase '{value}' "
                                 f"(one of {', '.join(PHASES + list(TORQ_PHASES))})")
            opts.compile_to = value
        else:
            rest.append(a)
    return opts, rest, quiet


def _set_hw(opts: CompileOptions, value: str) -> None:
    if value == "list":
        raise _ListHw()
    try:
        opts.hw = parse_hw_spec(value)
    except HwSpecError as e:
        raise UsageError(str(e)) from None


def _set_traffic_slack(opts: CompileOptions, value: str) -> None:
    try:
        opts.traffic_slack = float(value)
    except ValueError:
        opts.traffic_slack = -1.0
    if not 0.0 <= opts.traffic_slack <= 10.0:
        raise UsageError(f"bad --torq-tiling-traffic-slack '{value}' (a fraction from 0 to 10, "
                         "e.g. 0.05 for 5% more DDR bytes)")


def _set_slice_distribution(opts: CompileOptions, value: str) -> None:
    from .slice_distribution import DistributionError, parse_distribution

    try:
        opts.slice_distribution = parse_distribution(value).spec
    except DistributionError as e:
        raise UsageError(str(e)) from None


def _set_jobs(opts: CompileOptions, value: str) -> None:
    if not value.isdigit() or int(value) < 1:
        raise UsageError(f"bad --torq-jobs '{value}' (a number of processes, 1 or more)")
    opts.jobs = int(value)


def _one_of(flag: str, choices, field: str):
    """A setter of an option that takes one of `choices` (a sequence, or a function giving it)."""
    def setter(opts: CompileOptions, value: str) -> None:
        allowed = choices() if callable(choices) else choices
        if value not in allowed:
            raise UsageError(f"unknown {flag} '{value}' ({', '.join(allowed)})")
        setattr(opts, field, value)
    return setter


def _tiling_strategies():
    from .passes.super_tiling import STRATEGIES

    return STRATEGIES


def _needs_value(flag: str, example: str, field: str):
    """A setter of a string option that must not be empty."""
    def setter(opts: CompileOptions, value: str) -> None:
        if not value:
            raise UsageError(f"{flag} needs {example}")
        setattr(opts, field, value)
    return setter


def _switch(field: str):
    """A setter of a boolean option (bare, or =true / =1)."""
    def setter(opts: CompileOptions, value: str) -> None:
        setattr(opts, field, value in ("", "true", "1"))
    return setter


# How each Torq flag (but --torq-quiet) sets its option; the flags themselves are TORQ_FLAG_HELP's.
_FLAG_SETTERS = {
    "--torq-hw": _set_hw,
    "--torq-requant": _one_of("--torq-requant", REQUANT_MODES, "requant"),
    "--torq-int8-float-ops": _one_of("--torq-int8-float-ops", INT8_FLOAT_OPS, "int8_float_ops"),
    "--torq-dump-quant": _needs_value("--torq-dump-quant", "a path: --torq-dump-quant=quant.json", "dump_quant"),
    "--torq-dump-tiling": _needs_value("--torq-dump-tiling", "a path: --torq-dump-tiling=tiling.json",
                                       "dump_tiling"),
    "--torq-super-tiling-strategy": _one_of("--torq-super-tiling-strategy", _tiling_strategies, "strategy"),
    "--torq-tiling-traffic-slack": _set_traffic_slack,
    "--torq-slice-distribution": _set_slice_distribution,
    "--torq-keep-f32": _switch("keep_f32"),
    "--torq-host-fallback-on-error": _switch("host_fallback_on_error"),
    "--torq-print-ir-after-all": lambda opts, value: setattr(opts, "print_ir_after_all", True),
    "--torq-jobs": _set_jobs,
    "--torq-cache-dir": _needs_value("--torq-cache-dir", "a directory (or 'none'): --torq-cache-dir=DIR",
                                     "cache_dir"),
    "--torq-no-cache": lambda opts, value: setattr(opts, "no_cache", True),
    "--torq-check-dispatches": _switch("check_dispatches"),
}
assert set(_FLAG_SETTERS) | {"--torq-quiet"} == TORQ_FLAGS


def _joined_short_jobs(argv: list[str]) -> list[str]:
    """argv with `-j N` / `-jN` spelled `--torq-jobs=N` (make's spelling of the same flag)."""
    out, i = [], 0
    while i < len(argv):
        a = argv[i]
        if a == "-j":
            if i + 1 >= len(argv):
                raise UsageError("-j needs a number of processes: -j 4")
            out.append(f"--torq-jobs={argv[i + 1]}")
            i += 2
            continue
        out.append(f"--torq-jobs={a[2:]}" if a.startswith("-j") and a[2:].isdigit() else a)
        i += 1
    return out


class _ListHw(Exception):
    pass


def hw_list_text() -> str:
    return describe_presets()


def _phase_fns():
    ctypes_dl._init_dylib()
    lib = ctypes_dl._dylib
    for n in ("ireeCompilerInvocationSetCompileToPhase", "ireeCompilerInvocationSetCompileFromPhase"):
        fn = getattr(lib, n)
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    return lib.ireeCompilerInvocationSetCompileToPhase, lib.ireeCompilerInvocationSetCompileFromPhase


# Host code and host-fallback dispatches run on this machine's CPU.
HOST_FLAGS = ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
              "--iree-llvmcpu-target-cpu=host"]
# Dispatch formation for the NPU: a conv's or pool's zero / -inf padding is
# fused into the consumer's dispatch as a `tensor.pad` (torq-fold-padding
# folds it into the op's own padding), instead of IREE's default of a producer
# writing into a padded buffer (a box store the host would have to insert, and
# a separate copy dispatch when the producer is the input or has other users).
# User flags come later on the command line and override these.
DISPATCH_FLAGS = ["--iree-dispatch-creation-enable-fuse-padding-into-linalg-consumer-ops"]
# A float-quantized (QDQ) model: a dequantized int8 value with two users in one chain
# (hardswish is x * hardsigmoid(x)) stays its own f32 dispatch under IREE's default
# fusion, and the chain after it lands in f32 dispatches no integer form reproduces (the
# hardswish before MobileNetV3's mean, left float by ONNX Runtime). IREE's aggressive
# fusion makes the chain one int8 dispatch, compiled to integers by
# compiler/requant_pooling.py; a model input's quantize it fuses into a consumer is
# then split off for the host (requant_tail.split_input_quantizes). Not for float
# models: it moves MobileNetV3's activations out of its depthwise convolutions (+5%
# bf16 cycles). A user's =false after it turns it off.
QDQ_DISPATCH_FLAGS = ["--iree-dispatch-creation-enable-aggressive-fusion"]
# Neither, nor the padding fusion, for a model quantized when it runs (onnxruntime's
# quantize_dynamic, torch's PT2E dynamic configs, torchao's quantize_): no chain of it
# becomes an int8 dispatch, and IREE's own llvm-cpu cannot compile what the fusions make of
# it (GPT-2: a LayerNorm fused with the next min reduction passed the stack limit; a
# ConvInteger's pad of the run-time zero point: "failed to run translation").
_DYNAMIC_QUANTIZATION_MARKS = (b"DynamicQuantizeLinear", b"quantized_decomposed.choose_qparams",
                               b"torchao.choose_qparams_affine")
# What marks such an input: ONNX's QuantizeLinear / DequantizeLinear, torch's
# quantize_per_tensor / _per_channel (PT2E) and their dequantizes, torchao's quantize_affine.
_QDQ_MARKS = (b"QuantizeLinear", b"quantize_per_", b"torchao.quantize_affine")


@dataclass
class CompileResult:
    vmfb: bytes | None
    ir_text: str | None
    report: TargetReport


def compile_source(source: str | bytes, options: CompileOptions, source_name: str = "<input>",
                   remarks=None) -> CompileResult:
    """Compile MLIR text (or bytecode) to a .vmfb (or IR text with --compile-to).

    Errors are re-raised only after the compiler session is closed, as fresh
    exceptions without the failing frames: those frames hold IR objects that
    must be destroyed before the session's MLIR context is, or the process
    crashes later when they are collected.
    """
    session = Session()
    error: Exception | None = None
    try:
        result = _compile_in_session(session, source, options, source_name, remarks)
        if options.dump_tiling:
            _write_json_dump(options.dump_tiling, "--torq-dump-tiling", {"dispatches": result.report.tiling})
        if options.dump_quant:
            _write_json_dump(options.dump_quant, "--torq-dump-quant", result.report.quant_dump())
        return result
    except IreeError as e:
        error = IreeError(str(e), e.diagnostics)
    except (CompileError, UsageError) as e:
        error = type(e)(str(e))
    except WorkerError as e:  # a bug met in a worker process: its traceback is the detail
        error = InternalCompilerError(f"internal compiler error: {e}", e.details)
    except Exception as e:  # a bug in the compiler: one line, details on request
        error = InternalCompilerError(f"internal compiler error: {type(e).__name__}: {e}",
                                      traceback.format_exc())
    finally:
        if error is not None:
            gc.collect()  # the failing frames and their IR, while the context lives
        session.close()
    raise error


def _rewrite_torch_input(session: Session, inv, text: bytes):
    """A fresh invocation holding the input after the exact torch-level rewrites that apply:
    compiler/torch_dynamic_quant.py's (PT2E's dynamic quantization in ops IREE imports),
    compiler/torchao_quant.py's (torchao quantize_'s int8 dynamic quantization, likewise),
    compiler/torch_qdq.py's (PT2E's uint8 activations as int8), compiler/torch_index_put.py's
    (a row written at a runtime position as a slice update) and compiler/torch_linear.py's (a
    Linear on rank >= 3 activations on their 2-D view; a quantized one of rank >= 4 on its
    3-D view); `inv` itself when none does.
    `text`: the input's `ops_text`. Exporting the module takes it from `inv`."""
    qdq, index_put = b"quantized_decomposed" in text, b"index_put" in text
    torchao = b"torch.torchao." in text
    linear = not qdq and may_rewrite(text)
    if not (qdq or index_put or linear or torchao):  # no other input pays for an export
        return inv
    module_op = inv.export_module()
    with module_op.context, ir.Location.unknown():
        if torchao:
            rewrite_torchao_quantization(module_op)
        if qdq:
            rewrite_dynamic_quantization(module_op)
            rewrite_uint8_activations(module_op)
            rewrite_quantized_linears(module_op)
        if index_put:
            rewrite_indexed_rows(module_op)
        if linear:
            rewrite_batched_linears(module_op)
    inv = _invocation(session)
    inv.import_module(module_op)
    return inv


def _write_json_dump(path: str, flag: str, data: dict) -> None:
    import json

    try:
        write_atomically(path, (json.dumps(data, indent=1) + "\n").encode())
    except OSError as e:
        raise UsageError(f"cannot write {flag} file '{path}': {e.strerror}") from None


class InternalCompilerError(CompileError):
    """An unexpected exception inside the compiler; `details` is its traceback."""

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.details = details


# IREE's embedding API: void (*)(severity, const char *message, size_t size, void *user_data).
_DIAGNOSTIC_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
_SEVERITY_ERROR = 2  # iree_compiler_diagnostic_severity_t: note 0, warning 1, error 2, remark 3


def _invocation(session: Session):
    """A new invocation of `session` whose diagnostics come to Python (they replace IREE's
    console diagnostics, which go to the process's stderr, where a notebook shows nothing):
    errors are collected in `inv.torq_errors` (with their source locations) for the exception,
    warnings and remarks are printed to sys.stderr as they come."""
    import sys

    from iree.compiler.api import ctypes_dl

    inv = session.invocation()
    errors: list[str] = []

    def on_diagnostic(severity, message, size, _user_data):
        text = ctypes.string_at(message, size).decode("utf-8", "replace")
        if severity == _SEVERITY_ERROR:
            errors.append(text)
        else:
            print(text, file=sys.stderr)

    callback = _DIAGNOSTIC_CALLBACK(on_diagnostic)
    enable = ctypes_dl._dylib.ireeCompilerInvocationEnableCallbackDiagnostics
    enable.argtypes, enable.restype = [ctypes.c_void_p, ctypes.c_int, _DIAGNOSTIC_CALLBACK, ctypes.c_void_p], None
    enable(inv._inv_p, 0, callback, None)
    inv._torq_diagnostic_callback = callback  # must live as long as the invocation
    inv.torq_errors = errors
    return inv


class IreeError(CompileError):
    """IREE itself rejected the model: the message names the step and IREE's first error (its
    first line, with the source location); `diagnostics` holds every error IREE reported."""

    def __init__(self, message: str, diagnostics: list[str]):
        super().__init__(message)
        self.diagnostics = diagnostics


def _iree_failure(source_name: str, what: str, inv) -> IreeError:
    """The error for a failed IREE step of invocation `inv`, with IREE's first error diagnostic."""
    errors = inv.torq_errors
    first = errors[0].strip().splitlines()[0] if errors and errors[0].strip() else ""
    return IreeError(f"{source_name}: error: {what}" + (f": {first}" if first else ""), list(errors))


def _parsed_input(session: Session, data: bytes, text: bytes, source_name: str, options: CompileOptions):
    """An invocation holding the parsed input `data` (for Torq: PT2E's uint8 activations
    rewritten, input signatures attached); `text` its `ops_text`."""
    inv = _invocation(session)
    # The buffer name becomes the file name in locations and diagnostics.
    if not inv.parse_source(Source.wrap_buffer(session, data, buffer_name=source_name)):
        raise _iree_failure(source_name, "failed to parse the input", inv)
    if options.torq:
        inv = _rewrite_torch_input(session, inv, text)
        # input signatures into iree.reflection, for the runtime's input checks
        from .signature import attach_to_invocation
        inv = attach_to_invocation(inv)
    return inv


def _module_at_dispatch_creation(session: Session, data: bytes, text: bytes, source_name: str, flags: list[str],
                                  options: CompileOptions, cache: FrontendCache | None, on_compile=None):
    """The module IREE makes of the input at dispatch creation: from the front-end `cache`
    (compiler/frontend_cache.py) when it holds a readable entry, else compiled and kept
    (`on_compile()` called first; the entry is written on a thread, `cache.flush` waits for
    it). Also what must outlive the module: MLIR's bytecode reader may keep blobs as
    references into the buffer it parsed."""
    key = frontend_key(data, source_name, flags) if cache else ""
    cached = cache.get(key) if cache else None
    if cached is not None:
        inv = _invocation(session)
        src = Source.wrap_buffer(session, cached, buffer_name=source_name)
        if inv.parse_source(src):
            return inv.export_module(), (cached, src, inv)
        # not readable (truncated, another IREE's bytecode): compile afresh
    if on_compile is not None:
        on_compile()
    inv = _parsed_input(session, data, text, source_name, options)
    to_phase, _ = _phase_fns()
    to_phase(inv._inv_p, b"dispatch-creation")
    if not inv.execute():
        raise _iree_failure(source_name, "IREE failed before dispatch creation", inv)
    module_op = inv.export_module()
    if cache:
        cache.put_beside(key, bytecode(module_op))  # the module's bytes now: the target changes it
    return module_op, None


def _is_qdq(text: bytes) -> bool:
    """Whether the input (`text`: its `ops_text`) quantizes."""
    return any(mark in text for mark in _QDQ_MARKS)


_BYTECODE_MAGIC = b"ML\xefR"


def ops_text(data: bytes) -> bytes:
    """The part of an MLIR input that names its ops, as text: MLIR text before its dialect
    resources (`{-#`, where an exported model's weights are, as hex: scanning ViT-B/16's
    340 MB for a mark took 0.1-0.16 s a time, a few times a compile, warm ones too); bytecode
    printed without its resources. Bytecode names ops and types in tables, so the torch
    rewrites' marks (`torch.aten.linear ... : !torch.vtensor<[...`, `torch.torchao.`) are not
    in its bytes: a saved .mlirbc missed them."""
    if data.startswith(_BYTECODE_MAGIC):
        return _bytecode_ops_text(data)
    end = data.find(b"\n{-#")
    return data if end < 0 else data[:end]


def _bytecode_ops_text(data: bytes) -> bytes:
    """MLIR bytecode `data` printed without its resources, parsed in a scratch context; its
    own bytes when it does not parse there (IREE's parse then reports why)."""
    with ir.Context() as ctx:
        ctx.allow_unregistered_dialects = True
        try:
            module = ir.Module.parse(data)
        except ir.MLIRError:
            return data
        return module.operation.get_asm(large_resource_limit=0).encode()


def _compile_in_session(session: Session, source: str | bytes, options: CompileOptions,
                        source_name: str, remarks) -> CompileResult:
    flags = list(options.iree_flags)
    data = source.encode() if isinstance(source, str) else source
    # The input's ops as text, made once (bytecode is parsed for it): only Torq reads them.
    text = ops_text(data) if options.torq else b""
    quantized = dynamic = False
    if options.torq:
        # With --torq-keep-f32 f32 models stay on the host, where llvm-cpu cannot
        # compile some dispatches with a fused pad (large padded depthwise convs).
        quantized, dynamic = _is_qdq(text), any(mark in text for mark in _DYNAMIC_QUANTIZATION_MARKS)
        npu = [] if options.keep_f32 or dynamic else DISPATCH_FLAGS + (QDQ_DISPATCH_FLAGS if quantized else [])
        flags = HOST_FLAGS + npu + flags
    try:
        session.set_flags(*flags)
    except ValueError as e:
        raise UsageError(str(e).strip().splitlines()[-1]) from None
    stop = options.compile_to
    torq_stop = stop if stop in TORQ_PHASES else ""
    if torq_stop and not options.torq:
        raise UsageError(f"--compile-to={stop} needs the Torq target")
    through_target = options.torq and (not stop or torq_stop
                                       or PHASES.index(stop) > PHASES.index("dispatch-creation"))
    if not through_target:
        return _finish(_parsed_input(session, data, text, source_name, options), options, source_name,
                       TargetReport())
    started = StartedWorkers()
    frontend = options.frontend_cache()
    try:
        preload = QDQ_PRELOAD if quantized else ()
        return _compile_through_target(session, data, text, options, source_name, remarks, flags, torq_stop,
                                       started, frontend, preload, dynamic)
    finally:
        started.close()  # a failed compile's workers too
        if frontend is not None:
            frontend.flush()  # its entry is on disk when the compile returns


def _compile_through_target(session: Session, data: bytes, text: bytes, options: CompileOptions,
                            source_name: str, remarks, flags: list[str], torq_stop: str, started: StartedWorkers,
                            frontend: FrontendCache | None, preload: tuple[str, ...] = (),
                            dynamic: bool = False) -> CompileResult:
    """IREE to dispatch creation, the Torq target, then IREE to the end. When IREE's front end
    has to run (no front-end cache entry), the dispatch compile workers start beside it, and
    they and this process import `preload` meanwhile. `text`: the input's `ops_text`."""
    _, from_phase = _phase_fns()
    jobs = options.jobs or default_jobs()
    parallel = jobs > 1 and not options.print_ir_after_all and not torq_stop

    def beside_front_end() -> None:
        preload_modules(preload)
        if parallel:
            started.start(jobs - 1, preload)

    module_op, keep_alive = _module_at_dispatch_creation(session, data, text, source_name, flags, options, frontend,
                                                         beside_front_end)
    ctx = module_op.context
    # IREE's pipeline loads the dialects its passes use, a parse of the cached module only
    # those it names. With all loaded, the target sees the same context either way: it
    # creates no op of an unloaded dialect (an unregistered op, which crashed when freed
    # once the dialect was loaded), and prints a dispatch's ops the same way for its
    # cache key (a registered op's properties, an unregistered one's attributes).
    ctx.load_all_available_dialects()
    ctx.allow_unregistered_dialects = True
    with ctx, ir.Location.unknown():
        printer = None
        if options.print_ir_after_all:
            import sys

            def printer(name, m):
                # Weights ride on the first passes' arguments (torq.constant): elided, as
                # IREE's --mlir-elide-elementsattrs-if-larger would.
                text = m.operation.get_asm(large_elements_limit=1024, large_resource_limit=1024)
                print(f"// -----// IR Dump After {name} //----- //\n{text}", file=sys.stderr)
        report = TorqTarget(options.pass_options(), remarks=remarks, print_after_all=printer,
                            stop_after_phase=torq_stop, jobs=jobs, cache=options.dispatch_cache(),
                            check_dispatches=options.check_dispatches, started=started,
                            run_time_quantization=dynamic).run(module_op)
        if torq_stop:
            return CompileResult(None, report.stopped_ir, report)
    started.close()  # any the target did not take: IREE's back end may use both cores
    inv = _invocation(session)
    inv.import_module(module_op)
    from_phase(inv._inv_p, b"dispatch-creation")
    return _finish(inv, options, source_name, report)


def _finish(inv, options: CompileOptions, source_name: str, report: TargetReport) -> CompileResult:
    """IREE from where `inv` stands to --compile-to (or the end): IR text or the .vmfb."""
    to_phase, _ = _phase_fns()
    stop = options.compile_to
    if stop:
        to_phase(inv._inv_p, stop.encode())
    if not inv.execute():
        raise _iree_failure(source_name, "IREE compilation failed", inv)
    out = Output.open_membuffer()
    if stop and stop != "end":
        inv.output_ir(out)
        return CompileResult(None, bytes(out.map_memory()).decode(), report)
    inv.output_vm_bytecode(out)
    return CompileResult(bytes(out.map_memory()), None, report)

