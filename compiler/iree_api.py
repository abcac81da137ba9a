"""IREE's Python compiler API, with the Torq target: `torq.compiler.compile_str` / `compile_file`.

Contract:
- Same signatures and semantics as `iree.compiler.compile_str(input, **kwargs)`
  and `iree.compiler.compile_file(path, **kwargs)`: keyword arguments are
  `iree.compiler.CompilerOptions`' fields (`target_backends`, `input_type`,
  `extra_args`, `output_file`, `output_format`, ...; an unknown one is a
  TypeError, a bad `input_type` a ValueError, as there). They return the
  compiled module's bytes, or None when `output_file` is given (written
  atomically). A script switches from IREE with its import line.
- `target_backends=["torq"]` (or `--iree-hal-target-backends=torq` in
  `extra_args`) compiles with the Torq target in process (host code and
  host dispatches with llvm-cpu, as torq-compile does); `extra_args` may hold
  Torq flags (`--torq-hw=...`, `-j N`, `--compile-to=...`) beside IREE's.
  ONNX input (a file or ModelProto bytes) is imported first, as torq-compile
  does. Any other `target_backends` go to `iree.compiler` unchanged.
- A failed Torq compile raises `TorqCompilerToolError`, a subclass of
  IREE's `CompilerToolError` (so `except CompilerToolError` keeps working):
  its message is the one-line error followed by IREE's own diagnostics
  (with source locations), also in `.diagnostics`.
- Importing this module loads no compiler: the driver is imported at the
  first Torq compile.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from iree.compiler.tools.binaries import CompilerToolError
from iree.compiler.tools.core import CompilerOptions, InputType, OutputFormat

__all__ = ["compile_str", "compile_file", "CompilerOptions", "CompilerToolError", "InputType", "OutputFormat",
           "TorqCompilerToolError", "query_available_targets"]

TORQ_BACKEND = "torq"
_TORQ_TARGET_FLAGS = ("--iree-hal-target-backends=torq", "--iree-hal-target-device=torq")
# CompilerOptions fields that only shape iree-compile's printing or debugging and that the in-process
# compile does not take; their defaults are accepted, other values are refused rather than ignored.
_UNSUPPORTED_WITH_TORQ = ("output_generic_mlir", "extended_diagnostics", "crash_reproducer_path",
                          "enable_benchmark")


class TorqCompilerToolError(CompilerToolError):
    """The Torq compile failed. `message` is the one-line error; `diagnostics` IREE's errors (with
    source locations) when IREE itself rejected the input; `details` a traceback for a compiler bug."""

    def __init__(self, message: str, diagnostics: Sequence[str] = (), details: str = ""):
        self.message = message
        self.diagnostics = list(diagnostics)
        self.details = details
        text = "\n".join([message, "Diagnostics:", *(d.rstrip() for d in self.diagnostics)]) if diagnostics else message
        Exception.__init__(self, text)  # IREE's __init__ wants a finished subprocess


def compile_str(input_str: str | bytes, **kwargs: Any) -> bytes | None:
    """Compiles MLIR text or bytecode (or ONNX ModelProto bytes, with the Torq target); see the
    module docstring."""
    options = CompilerOptions(**kwargs)
    if not _wants_torq(options):
        from iree.compiler.tools.core import compile_str as iree_compile_str

        return iree_compile_str(input_str, **kwargs)
    data = input_str.encode() if isinstance(input_str, str) else bytes(input_str)
    return _compile_torq(data, "<string>", None, options)


def compile_file(input_file: str | os.PathLike, **kwargs: Any) -> bytes | None:
    """Compiles an MLIR (or, with the Torq target, ONNX) file; see the module docstring."""
    options = CompilerOptions(**kwargs)
    path = os.fspath(input_file)
    if not _wants_torq(options):
        from iree.compiler.tools.core import compile_file as iree_compile_file

        return iree_compile_file(path, **kwargs)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise TorqCompilerToolError(f"cannot read input file '{path}': {e.strerror}") from None
    return _compile_torq(data, path, path, options)


def query_available_targets() -> list[str]:
    """IREE's target backends, and torq."""
    from iree.compiler.tools.core import query_available_targets as iree_targets

    return [*iree_targets(), TORQ_BACKEND]


def _wants_torq(options: CompilerOptions) -> bool:
    """Whether these options select the Torq target; mixing it with other backends is refused."""
    backends = list(options.target_backends or ())
    if TORQ_BACKEND not in backends:
        return any(a in _TORQ_TARGET_FLAGS for a in options.extra_args)
    if backends != [TORQ_BACKEND]:
        raise ValueError(f"target_backends={backends}: the Torq target compiles host code with llvm-cpu "
                         "itself; pass target_backends=['torq'] alone")
    return True


def _iree_flags(options: CompilerOptions) -> list[str]:
    """The IREE flags of `options`, as iree.compiler's command line spells them; `extra_args` last
    so that they win."""
    for name in _UNSUPPORTED_WITH_TORQ:
        if getattr(options, name) != CompilerOptions.__dataclass_fields__[name].default:
            raise ValueError(f"{name}={getattr(options, name)!r} is not supported with target_backends="
                             "['torq'] (the Torq target compiles in process)")
    flags = [f"--iree-input-type={options.input_type!s}",
             f"--iree-vm-bytecode-module-output-format={options.output_format!s}"]
    if options.strip_debug_ops:
        flags.append("--iree-vm-bytecode-module-strip-debug-ops")
    if options.strip_source_map:
        flags.append("--iree-vm-bytecode-module-strip-source-map")
    if options.enable_tflite_bindings:
        flags.append("--iree-tflite-bindings-support")
    return flags + [a for a in options.extra_args if a not in _TORQ_TARGET_FLAGS]


def _compile_torq(data: bytes, name: str, path: str | None, options: CompilerOptions) -> bytes | None:
    """The Torq compile of `data`: its output bytes, or None once written to `output_file`."""
    from .driver import UsageError, _ListHw, compile_source, hw_list_text, parse_torq_flags, write_atomically
    from .ir_utils import CompileError
    from .onnx_import import read_onnx_source

    try:
        torq_options, iree_flags, _quiet = parse_torq_flags(_iree_flags(options))
        torq_options.iree_flags = iree_flags
        data, name = read_onnx_source(data, name, path)
        result = compile_source(data, torq_options, name, remarks=None)
    except _ListHw:
        raise TorqCompilerToolError(f"--torq-hw=list lists the hardware models, it compiles nothing:\n"
                                    f"{hw_list_text()}") from None
    except UsageError as e:
        raise TorqCompilerToolError(f"{name}: error: {str(e).strip()}") from None
    except CompileError as e:
        raise TorqCompilerToolError(str(e), getattr(e, "diagnostics", ()), getattr(e, "details", "")) from None
    output = result.vmfb if result.vmfb is not None else result.ir_text.encode()
    if options.output_file:
        write_atomically(options.output_file, output)
        return None
    return output
