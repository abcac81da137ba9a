"""`torq-run-module`: iree-run-module's flags, with Torq dispatches on the simulator.

Contract:
- Flags (IREE syntax): `--module=path.vmfb` (required), `--function=main`,
  `--device=torq` (the only device: IREE CPU for host code + the simulator),
  repeated `--input=` in argument order, repeated `--output=` in result order,
  `--torq-hw=SPEC` (`parse_hw_spec`; `--torq-hw=list` prints the presets),
  `--print-stats` (per-dispatch table; with a module compiled with
  --torq-check-dispatches also each NPU result against its host copy), `--output_max_element_count=1024`,
  repeated `--expected_output=` in result order (the `--input` forms, or
  `(ignored)`), with `--expected_f32_threshold=0.0001`,
  `--expected_f16_threshold=0.001`, `--expected_bf16_threshold=0.01`,
  `--expected_f64_threshold=0.0001` (absolute; integers must be equal):
  prints `[SUCCESS] all function outputs matched their expected values.` or
  `[FAILED] result[i]: ...` for the first mismatch, exit code 1 then.
- `--input` forms: `@file.npy`; `2x3xf32=@file.npy` (file shape and dtype
  must equal the declared ones; a raw 2-byte npy is read as bf16 when bf16 is
  declared); `2x3xf32=1.5` (splat); `2xf32=1,2` (list; separators are commas,
  spaces and brackets); `f32=3` (scalar); `2xf32=` (zeros). Element types:
  f32 f16 bf16 f64 i8 i16 i32 i64 ui8 ui16 ui32 ui64 si8.. i1.
- `--output` forms (one per result, like iree-run-module): `@file.npy`
  (write), `+file.npy` (append), `@file.bin` / `+file.bin` (raw bytes), `-`
  (print), `` (ignore). Files are written only after the whole run
  succeeded, each through a temporary file renamed into place.
- Without `--output`, results are printed like iree-run-module: `EXEC @fn`,
  then per result `result[i]: hal.buffer_view` and `2x3xf32=[1 2 3][4 5 6]`
  (C `%G` for floats, elided with `...` after the element budget).
- Inputs are checked against the function's signature before the call (see
  `api`); a wrong shape or dtype names the `--input` (index and text, so the
  file) and the expected and given `SHAPExTYPE`.
- Errors: one line `torq-run-module: error: <message>` on stderr, never a
  traceback; exit code 1, or 2 for command-line usage errors (unknown flag,
  missing value or --module). No output file is written on any error.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from typing import Any, NoReturn, Sequence

import numpy as np

from torq.contract.hw import HwSpecError, TorqHw, describe_presets, parse_hw_spec

from .api import describe_array
from .errors import InputError, TorqRuntimeError
from .module import ELEMENT_TYPES, ElementType

PROG = "torq-run-module"
DEVICES = ("torq",)


class ToolError(Exception):
    """A user error: printed as one line, exit code 1."""


def _one_line(message: object) -> str:
    return " ".join(str(message).split())


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"{PROG}: error: {_one_line(message)}", file=sys.stderr)
        raise SystemExit(2)


def _parser() -> _Parser:
    p = _Parser(
        prog=PROG,
        allow_abbrev=False,
        description="Runs a function of a .vmfb with its Torq dispatches on the Torq NPU simulator "
        "(flags as iree-run-module).",
    )
    p.add_argument("--module", help="path of the .vmfb to run")
    p.add_argument("--function", default="main", help="function to call (default: main)")
    p.add_argument("--device", default="torq", help="device: torq (IREE CPU for host code + Torq simulator)")
    p.add_argument("--input", action="append", default=[], help="an input, in order: @x.npy, 2x3xf32=@x.npy, 2x3xf32=1.5, 2xf32=1,2, f32=3")
    p.add_argument("--output", action="append", default=[], help="a result, in order: @y.npy, +y.npy, @y.bin, -, or empty to ignore")
    add_parameters_flag(p)
    p.add_argument("--torq-hw", dest="torq_hw", default=None, help="simulated hardware NAME[:key=value,...] (default: as compiled); 'list' to list")
    p.add_argument("--print-stats", dest="print_stats", action="store_true", help="print a per-dispatch statistics table")
    p.add_argument("--output_max_element_count", "--output-max-element-count", dest="max_elements", type=int, default=1024,
                   help="print at most this many elements per result (default 1024)")
    p.add_argument("--expected_output", "--expected-output", dest="expected", action="append", default=[],
                   help="a result's expected value, in result order: the --input forms, or (ignored)")
    for name, default in _THRESHOLDS.items():
        p.add_argument(f"--expected_{name}_threshold", f"--expected-{name}-threshold", dest=f"{name}_threshold",
                       type=float, default=default,
                       help=f"largest |result - expected| for {name} results (default {default})")
    return p


# iree-run-module's default tolerances for --expected_output (bf16: one unit of its 8-bit mantissa near 1).
_THRESHOLDS = {"f32": 0.0001, "f16": 0.001, "bf16": 0.01, "f64": 0.0001}


def check_expected(specs: list[str], results: list[tuple[Any, ElementType | None]],
                   args: argparse.Namespace) -> str | None:
    """None when every result matches its `--expected_output`, else the first mismatch."""
    if len(specs) != len(results):
        raise ToolError(f"{len(specs)} --expected_output values for {len(results)} results")
    for i, (text, (value, et)) in enumerate(zip(specs, results)):
        if text == "(ignored)":
            continue
        expected = parse_input(text, i, flag="--expected_output")
        got = np.asarray(value)
        if got.shape != expected.shape:
            return f"result[{i}]: shape {'x'.join(map(str, got.shape)) or 'scalar'}, expected " \
                   f"{'x'.join(map(str, expected.shape)) or 'scalar'}"
        name = et.name if et is not None else ""
        if name in _THRESHOLDS:
            diff = np.abs(got.astype(np.float64) - expected.astype(np.float64))
            bad = ~(diff <= getattr(args, f"{name}_threshold"))  # NaN never matches
        else:
            bad = got != expected
        if np.any(bad):
            k = int(np.flatnonzero(bad)[0])
            index = np.unravel_index(k, got.shape) if got.shape else ()
            return (f"result[{i}]: element {list(map(int, index))} is {got.reshape(-1)[k]}, expected "
                    f"{expected.reshape(-1)[k]} ({int(bad.sum())} of {bad.size} elements differ)")
    return None


# --------------------------------------------------------------------------
# Inputs


def _element_type(name: str, what: str) -> ElementType:
    et = ELEMENT_TYPES.get(name)
    if et is None:
        raise ToolError(f"{what}: unknown element type '{name}' (supported: {', '.join(ELEMENT_TYPES)})")
    return et


def _load_npy(path: str, what: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except OSError as e:
        raise ToolError(f"{what}: cannot read {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise ToolError(f"{what}: {path} is not a valid .npy file: {_one_line(e)}") from None


def _parse_scalar(token: str, et: ElementType, what: str) -> Any:
    try:
        if et.name == "i1":
            low = token.lower()
            if low in ("1", "true", "01"):
                return True
            if low in ("0", "false", "00"):
                return False
            raise ValueError
        if et.dtype.kind in "iu":
            v = int(token, 0)
            info = np.iinfo(et.dtype)
            if not info.min <= v <= info.max:
                raise ToolError(f"{what}: value {token} out of range for {et.name} [{info.min}, {info.max}]")
            return v
        return float(token)
    except ValueError:
        raise ToolError(f"{what}: bad {et.name} value '{token}'") from None


def input_flag_error(e: InputError, flags: list[str]) -> Exception:
    """A bad call input as the error of the `--input` flag (and so the file) it came from;
    `e` itself when it names no input of `flags`."""
    if e.index is None or not 0 <= e.index < len(flags):
        return e
    return ToolError(f"--input #{e.index} '{flags[e.index]}': {e}")


def parse_input(text: str, index: int, flag: str = "--input") -> np.ndarray:
    """Parses one `--input=` value (or another flag's, in the same forms) into an array (see
    module docstring)."""
    what = f"{flag} #{index} '{text}'"
    if text.startswith("@"):
        array = _load_npy(text[1:], what)
        if array.dtype.kind == "V" and array.dtype.itemsize == 2:
            array = array.view(ELEMENT_TYPES["bf16"].dtype)  # numpy saves bfloat16 as raw 2 bytes
        return array
    type_text, eq, value = text.partition("=")
    if not eq:
        raise ToolError(f"{what}: expected SHAPExTYPE=VALUES, SHAPExTYPE=@file.npy or @file.npy")
    parts = type_text.strip().split("x")
    et = _element_type(parts[-1], what)
    shape = []
    for d in parts[:-1]:
        if not d.isdigit():
            raise ToolError(f"{what}: bad dimension '{d}' in '{type_text}'")
        shape.append(int(d))
    if value.startswith("@"):
        path = value[1:]
        if not path.endswith(".npy"):
            raise ToolError(f"{what}: only .npy files are supported")
        array = _load_npy(path, what)
        if et.name == "bf16" and array.dtype.kind == "V" and array.dtype.itemsize == 2:
            array = array.view(et.dtype)
        if array.dtype != et.dtype or list(array.shape) != shape:
            raise ToolError(f"{what}: {path} holds {describe_array(array)}, expected {type_text}")
        return array
    tokens = value.replace(",", " ").replace("[", " ").replace("]", " ").split()
    count = math.prod(shape)
    if not tokens:
        return np.zeros(shape, et.dtype)
    values = [_parse_scalar(t, et, what) for t in tokens]
    if len(values) == 1:
        return np.full(shape, values[0], dtype=et.dtype)
    if len(values) != count:
        raise ToolError(f"{what}: {len(values)} values for {count} elements of {type_text}")
    return np.array(values, dtype=np.float64 if et.dtype.kind == "V" else None).astype(et.dtype).reshape(shape)


# --------------------------------------------------------------------------
# Printing, like iree-run-module (iree_hal_format_buffer_elements)


def _format_element(v: Any, et: ElementType) -> str:
    if et.name == "i1":
        return "%02X" % int(bool(v))
    if et.dtype.kind in "iu":
        return str(int(v))
    return "%G" % float(v)


def format_tensor(array: np.ndarray, et: ElementType, max_elements: int = 1024) -> str:
    """`2x3xf32=[1 2 3][4 5 6]`, as iree-run-module prints a buffer view."""
    budget = [max(0, max_elements)]

    def leaf(row: np.ndarray) -> str:
        n = min(budget[0], row.shape[0])
        budget[0] -= n
        text = " ".join(_format_element(v, et) for v in row[:n])
        return text + ("..." if n < row.shape[0] else "")

    def rec(a: np.ndarray) -> str:
        if a.ndim == 0:
            return leaf(a.reshape(1))
        if a.ndim == 1:
            return leaf(a)
        return "".join("[" + rec(sub) + "]" for sub in a)

    return "x".join([*(str(d) for d in array.shape), et.name]) + "=" + rec(array)


def _format_result(value: Any, et: ElementType | None, max_elements: int) -> str:
    if et is None:
        return str(value)
    return format_tensor(value, et, max_elements)


def _print_stats(stats: list[dict], function: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=sys.stdout, width=max(100, Console().width))
    if not stats:
        console.print(f"@{function}: no Torq dispatches")
        return
    table = Table(title=f"Torq dispatches of @{function}")
    cols = [("name", "name"), ("executor", "executor"), ("tiles", "tiles"), ("LRAM peak", "lram_peak_bytes"),
            ("DMA in", "dma_bytes_in"), ("DMA out", "dma_bytes_out"), ("MACs", "macs"), ("cycles", "cycles")]
    for title, _ in cols:
        table.add_column(title, justify="left" if title in ("name", "executor") else "right")

    def cell(v: Any) -> str:
        return f"{v:,}" if isinstance(v, int) else str(v)

    for s in stats:
        table.add_row(*(cell(s.get(key, "")) for _, key in cols))
    if len(stats) > 1:
        totals = {k: sum(int(s.get(k, 0)) for s in stats) for _, k in cols[2:]}
        totals["lram_peak_bytes"] = max(int(s.get("lram_peak_bytes", 0)) for s in stats)
        table.add_row("total", "", *(cell(totals[k]) for _, k in cols[2:]), style="bold")
    console.print(table)


def _print_checks(checks: list[dict]) -> None:
    """The NPU results of a module compiled with --torq-check-dispatches vs their host copies."""
    from rich.console import Console
    from rich.table import Table

    from .dispatch_check import summary_line

    console = Console(file=sys.stdout, width=max(100, Console().width))
    table = Table(title="NPU results vs their host copies (IREE llvm-cpu, same inputs)")
    for title in ("name", "result", "dtype", "elements", "differing", "max steps", "max abs", "rel L2"):
        table.add_column(title, justify="left" if title in ("name", "dtype") else "right")
    for c in checks:
        steps = "" if c["max_steps"] is None else str(c["max_steps"])
        table.add_row(c["name"], str(c["result"]), c["dtype"], f"{c['elements']:,}", f"{c['differing']:,}", steps,
                      f"{c['max_abs']:.3g}", f"{c['rel_l2']:.2e}")
    console.print(table)
    console.print(summary_line(checks))


# --------------------------------------------------------------------------
# Outputs


def _npy_bytes(array: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def _write_outputs(writes: list[tuple[str, bytes, bool]]) -> None:
    """Writes (path, data, append) atomically: all temporaries first, then renames."""
    temps: list[tuple[str, str]] = []
    path = ""
    try:
        for path, data, append in writes:
            directory = os.path.dirname(os.path.abspath(path))
            prefix = b""
            if append and os.path.exists(path):
                with open(path, "rb") as f:
                    prefix = f.read()
            fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
            temps.append((tmp, path))
            with os.fdopen(fd, "wb") as f:
                f.write(prefix + data)
        for tmp, path in temps:
            os.replace(tmp, path)
        temps.clear()
    except OSError as e:
        raise ToolError(f"cannot write output {path}: {e.strerror or e}") from None
    finally:
        for tmp, _ in temps:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _plan_outputs(specs: list[str], results: list[tuple[Any, ElementType | None]], max_elements: int) -> tuple[list[str], list[tuple[str, bytes, bool]]]:
    if len(specs) != len(results):
        raise ToolError(f"{len(specs)} --output values for {len(results)} results")
    lines: list[str] = []
    writes: list[tuple[str, bytes, bool]] = []
    for i, (spec, (value, et)) in enumerate(zip(specs, results)):
        if spec == "":
            continue
        if spec == "-":
            lines += ["hal.buffer_view" if et is not None else "", _format_result(value, et, max_elements)]
            continue
        if spec[0] not in "@+" or len(spec) == 1:
            raise ToolError(f"--output #{i} '{spec}': expected @file.npy, +file.npy, @file.bin, - or empty")
        if et is None:
            raise ToolError(f"--output #{i}: result {i} is not a tensor")
        path = spec[1:]
        data = _npy_bytes(value) if path.endswith(".npy") else np.ascontiguousarray(value).tobytes()
        writes.append((path, data, spec[0] == "+"))
    return lines, writes


# --------------------------------------------------------------------------
# Entry point


def add_parameters_flag(p: argparse.ArgumentParser) -> None:
    """--parameters, as torq-run-module and torq-benchmark-module (and iree-run-module) take it."""
    p.add_argument("--parameters", action="append", default=[],
                   help="a parameter archive of a module compiled with external weights, as iree-run-module "
                        "takes it: [scope=]FILE (.irpa, .gguf, .safetensors; iree-turbine's scope is \"model\"); "
                        "repeatable")


def check_common_args(args: argparse.Namespace, parser) -> TorqHw | None:
    """The flags torq-run-module and torq-benchmark-module share: --module, --device,
    --torq-hw (None = the executable's own hardware). Call after handling --torq-hw=list."""
    if not args.module:
        parser.error("the following argument is required: --module")
    if args.device not in DEVICES:
        raise ToolError(f"unsupported --device={args.device} (allowed: {', '.join(DEVICES)})")
    return parse_hw_spec(args.torq_hw) if args.torq_hw else None


def _run(args: argparse.Namespace, parser: _Parser) -> int:
    if args.torq_hw == "list":
        print(describe_presets())
        return 0
    hw = check_common_args(args, parser)
    inputs = [parse_input(text, i) for i, text in enumerate(args.input)]

    from .api import load

    module = load(args.module, hw=hw, parameters=args.parameters)
    try:
        results = module.call_raw(args.function, *inputs)
        stats, checks = list(module.last_stats), list(module.last_checks)
    except InputError as e:
        raise input_flag_error(e, args.input) from None
    finally:
        module.close()

    if args.output:
        lines, writes = _plan_outputs(args.output, results, args.max_elements)
    else:
        lines, writes = [], []
        for i, (value, et) in enumerate(results):
            lines += [f"result[{i}]: hal.buffer_view" if et is not None else f"result[{i}]:",
                      _format_result(value, et, args.max_elements)]
    mismatch = check_expected(args.expected, results, args) if args.expected else None
    _write_outputs(writes)
    sys.stdout.write("\n".join([f"EXEC @{args.function}", *lines]) + "\n")
    if args.print_stats:
        _print_stats(stats, args.function)
        if checks:
            _print_checks(checks)
    if args.expected:
        print(f"[FAILED] {mismatch}" if mismatch else "[SUCCESS] all function outputs matched their expected values.")
    sys.stdout.flush()
    return 1 if mismatch else 0


def tool_main(prog: str, parser: argparse.ArgumentParser, run, argv: Sequence[str] | None) -> int:
    """Runs a runtime tool's `run(args, parser)`: every failure is one `prog: error:` line."""
    try:
        args = parser.parse_args(argv)
        return run(args, parser)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2, already printed)
        return e.code if isinstance(e.code, int) else 1
    except (ToolError, TorqRuntimeError, HwSpecError) as e:
        print(f"{prog}: error: {_one_line(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: error: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug: still one line, never a traceback
        print(f"{prog}: error: internal error: {type(e).__name__}: {_one_line(e)}", file=sys.stderr)
        return 1


def run_module_main(argv: Sequence[str] | None = None) -> int:
    """The `torq-run-module` console script; returns the exit code."""
    return tool_main(PROG, _parser(), _run, argv)


if __name__ == "__main__":
    sys.exit(run_module_main())
