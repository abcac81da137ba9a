"""Console scripts: torq-compile, torq-opt; and iree-compile's Torq target (iree_compile_main).

`iree-compile` is iree-base-compiler's own launcher: python/_torq_iree_compile_hook.py (loaded
by iree-torq's .pth) sends its command lines for the Torq target to iree_compile_main.

torq-compile and iree-compile with the Torq target take MLIR (text or
bytecode) or an ONNX model, which is imported first (onnx_import.py).

Every user error prints one line `<tool>: error: ...` and exits non-zero;
no output file is left behind.
"""

from __future__ import annotations

import os
import sys

from _torq_iree_compile_hook import TORQ_TARGETS as _TORQ_TARGETS  # the launcher's
from _torq_iree_compile_hook import wants_torq

from .dispatch_compile import keep_freed_memory
from .driver import (
    TORQ_FLAG_HELP,
    InternalCompilerError,
    IreeError,
    UsageError,
    _ListHw,
    compile_source,
    hw_list_text,
    parse_torq_flags,
    write_atomically,
)
from .ir_utils import CompileError
from .onnx_import import read_onnx_source


def _fail(tool: str, msg: str, code: int = 1) -> int:
    print(f"{tool}: error: {msg}", file=sys.stderr)
    return code


def _split_io(rest: list[str]) -> tuple[str | None, str | None, list[str]]:
    """Pull the input file and -o out of the remaining args."""
    inp = out = None
    flags = []
    i = 0
    while i < len(rest):
        a = rest[i]
        if a == "-o":
            if i + 1 >= len(rest):
                raise UsageError("-o needs a file name")
            out = rest[i + 1]
            i += 2
            continue
        if a.startswith("-o") and not a.startswith("--"):
            out = a[2:]
        elif a.startswith("--output-file="):
            out = a.split("=", 1)[1]
        elif a.startswith("-") and a != "-":
            flags.append(a)
        else:
            if inp is not None:
                raise UsageError(f"more than one input file ('{inp}', '{a}')")
            inp = a
        i += 1
    return inp, out, flags


def _read_input(inp: str | None) -> tuple[bytes, str]:
    if inp is None:
        raise UsageError("no input file (usage: torq-compile model.mlir -o model.vmfb)")
    if inp == "-":
        return sys.stdin.buffer.read(), "<stdin>"
    if not os.path.isfile(inp):
        raise UsageError(f"cannot read input file '{inp}': no such file")
    with open(inp, "rb") as f:
        return f.read(), inp


def help_text(tool: str) -> str:
    """`--help` of torq-compile (and of iree-compile with the Torq target): Torq's flags, then
    where IREE's are documented."""
    lines = [f"usage: {tool} MODEL (.mlir, .mlirbc or .onnx; - for stdin) -o MODEL.vmfb [flags]", "",
             "Compiles a model for the Torq NPU: IREE up to dispatch creation, Torq's pipeline for the",
             "dispatches the NPU runs, IREE's llvm-cpu backend for the rest; writes an IREE .vmfb.", "",
             "Torq flags:"]
    for flag, (value, what) in TORQ_FLAG_HELP.items():
        lines.append(f"  {flag + ('=' + value if value else ''):44} {what}")
    lines += ["  --compile-to=PHASE                           stop after an IREE or Torq phase and print the IR",
              "  -h, --help                                   this text",
              "  --version                                    package, IREE and hardware-model versions", "",
              "Every other flag is IREE's, passed to iree-compile as is: 'iree-compile --help' lists them",
              "(https://iree.dev/reference/mlir-passes/ and the iree-compile documentation)."]
    return "\n".join(lines)


def version_text() -> str:
    """`--version`: this package, the IREE packages it runs on, and the hardware models."""
    from torq.contract.executable import FORMAT_VERSION
    from torq.contract.hw import PRESETS

    from .versions import installed_version as version

    return (f"iree-torq {version('iree-torq')}\n"
            f"iree-base-compiler {version('iree-base-compiler')}, iree-base-runtime {version('iree-base-runtime')}\n"
            f"hardware models: {', '.join(sorted(PRESETS))} (executable format {FORMAT_VERSION})")


def _run_tool(tool: str, body) -> int:
    """Runs `body()` (which returns the exit status) with the errors every compiler tool reports
    the same way: one `tool: error: ...` line (IREE's own diagnostics first), never a traceback."""
    try:
        return body()
    except _ListHw:
        print(hw_list_text())
        return 0
    except UsageError as e:
        return _fail(tool, str(e), 2)
    except CompileError as e:
        if isinstance(e, InternalCompilerError) and os.environ.get("TORQ_DEBUG"):
            print(e.details, file=sys.stderr, end="")
        if isinstance(e, IreeError):  # IREE's own diagnostics first, as iree-compile prints them
            print("\n".join(d.rstrip() for d in e.diagnostics), file=sys.stderr)
        return _fail(tool, str(e).removeprefix("error: "))
    except KeyboardInterrupt:
        return _fail(tool, "interrupted", 130)


def _compile_main(tool: str, argv: list[str], torq_default: bool) -> int:
    if "-h" in argv or "--help" in argv:
        print(help_text(tool))
        return 0
    if "--version" in argv:
        print(version_text())
        return 0
    return _run_tool(tool, lambda: _compile(argv, torq_default))


def _compile(argv: list[str], torq_default: bool) -> int:
    keep_freed_memory()  # this process only compiles
    opts, rest, quiet = parse_torq_flags(argv)
    if not torq_default:
        opts.torq = any(a in _TORQ_TARGETS for a in rest)
    rest = [a for a in rest if a not in _TORQ_TARGETS]
    inp, out, flags = _split_io(rest)
    opts.iree_flags = flags
    data, name = _read_input(inp)
    if out is None and not opts.compile_to:
        raise UsageError("no output file: pass -o model.vmfb")
    # An ONNX model is imported to torch-dialect MLIR first (onnx_import.is_onnx decides).
    data, name = read_onnx_source(data, name, path=None if inp == "-" else inp)
    result = compile_source(data, opts, name, remarks=None if quiet else sys.stderr)
    payload = result.vmfb if result.vmfb is not None else result.ir_text.encode()
    if out is None or out == "-":
        sys.stdout.buffer.write(payload)
    else:
        write_atomically(out, payload)
    return 0


def torq_compile_main(argv: list[str] | None = None) -> int:
    return _compile_main("torq-compile", sys.argv[1:] if argv is None else argv, True)


def _stock_iree_compile(argv: list[str]) -> int:
    from iree.compiler.tools.binaries import find_tool

    exe = find_tool("iree-compile")
    os.execv(exe, [exe] + argv)


def iree_compile_main(argv: list[str] | None = None) -> int:
    """`iree-compile` that adds the Torq target; without it, the stock binary. IREE's launcher
    calls it (_torq_iree_compile_hook) for a command line naming the Torq target."""
    argv = sys.argv[1:] if argv is None else argv
    if not wants_torq(argv):  # the launcher's own test (checked against TORQ_PHASES in tests)
        return _stock_iree_compile(argv)
    return _compile_main("iree-compile", argv, False)


def torq_opt_main(argv: list[str] | None = None) -> int:
    """Run Torq and MLIR passes on an input file and print the IR (like iree-opt)."""
    return _run_tool("torq-opt", lambda: _opt(sys.argv[1:] if argv is None else argv))


def _opt_args(rest: list[str]) -> tuple[str, str, str | None]:
    """(input file, --pass-pipeline text, -o path) of torq-opt's non-Torq arguments."""
    pipeline, files, out = "", [], None
    i = 0
    while i < len(rest):
        a = rest[i]
        if a.startswith("--pass-pipeline="):
            pipeline = a.split("=", 1)[1]
        elif a == "-o":
            out = rest[i + 1]
            i += 1
        elif a.startswith("-") and a != "-":
            raise UsageError(f"unknown flag '{a}'")
        else:
            files.append(a)
        i += 1
    if len(files) != 1:
        raise UsageError("expected exactly one input file")
    return files[0], pipeline, out


def _opt(argv: list[str]) -> int:
    from iree.compiler import ir

    from .pipeline import run_pipeline_text

    opts, rest, _ = parse_torq_flags(argv)
    path, pipeline, out = _opt_args(rest)
    data, name = _read_input(path)
    ctx = ir.Context()
    ctx.allow_unregistered_dialects = True
    with ctx:
        try:
            module = ir.Module.parse(data.decode(), ctx)
        except ir.MLIRError as e:
            raise CompileError(f"{name}: failed to parse: {_first_diag(e)}") from None
        with ir.Location.unknown():
            if pipeline:
                run_pipeline_text(module, pipeline, opts.pass_options())
        text = str(module)
    if out:
        write_atomically(out, text.encode())
    else:
        sys.stdout.write(text + "\n")
    return 0


def _first_diag(e: Exception) -> str:
    lines = [l.strip() for l in str(e).splitlines() if l.strip()]
    for l in lines:
        if "error:" in l:
            return l.split("error:", 1)[1].strip()
    return lines[-1] if lines else str(e)
