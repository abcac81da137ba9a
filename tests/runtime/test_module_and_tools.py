"""The `torq` VM module, the Python API (`torq.runtime.api`) and `torq-run-module`.

Modules are built by hand: MLIR that passes a serialized Program (an
elementwise add of two 2x3 f32 inputs computed in bf16) as a
`util.buffer.constant` to the `torq.run_i2_o1` import, compiled with the stock
IREE compiler. References are numpy and the real `iree-run-module`.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

iree_compiler = pytest.importorskip("iree.compiler")

from torq.contract.executable import serialize_program  # noqa: E402
from torq.contract.hw import TorqHw  # noqa: E402
from torq.contract.program import (  # noqa: E402
    Compute,
    DmaIn,
    DmaOut,
    Epilogue,
    EpilogueStep,
    LramBuffer,
    Operand,
    Program,
    Ref,
    TensorDesc,
)
from torq.runtime import api  # noqa: E402
from torq.runtime.errors import DispatchError, InputError, ModuleLoadError, TorqRuntimeError  # noqa: E402
from torq.runtime.tools import run_module_main  # noqa: E402

SHAPE = (2, 3)
ERR = "torq-run-module: error:"


def io_tensors(inputs: int, outputs: int) -> list[TensorDesc]:
    """The inputs then the outputs of a program on 2x3 tensors: f32 on the host, bf16 in DDR."""
    kinds = [("input", k) for k in range(inputs)] + [("output", k) for k in range(outputs)]
    return [TensorDesc(i, kind, SHAPE, "bf16", "f32", k) for i, (kind, k) in enumerate(kinds)]


def lram_buffers(live_ends: list[int]) -> list[LramBuffer]:
    """Buffer i: 2x3 bf16 (12 bytes) at 64 * i, live from command i to command `live_ends[i]`."""
    return [LramBuffer(i, 64 * i, 12, i, end) for i, end in enumerate(live_ends)]


def i8_constant(blob: bytes) -> str:
    """`blob` as a util.buffer.constant's value."""
    return f"dense<[{', '.join(str(b - 256 if b > 127 else b) for b in blob)}]> : vector<{len(blob)}xi8>"


def add_program() -> Program:
    """out = a + b on 2x3 tensors: f32 on the host, bf16 in DDR and LRAM."""
    tensors, buffers = io_tensors(2, 1), lram_buffers([2, 2, 3])
    add = Epilogue([EpilogueStep("add", [Ref("operand", 0, (0, 1)), Ref("operand", 1, (0, 1))])])
    commands = [
        DmaIn(0, (0, 0), SHAPE, 0),
        DmaIn(1, (0, 0), SHAPE, 1),
        Compute("elementwise", [Operand(0, SHAPE, "bf16"), Operand(1, SHAPE, "bf16")], Operand(2, SHAPE, "bf16"), {}, add),
        DmaOut(2, 2, (0, 0), SHAPE),
    ]
    return Program("add_2x3", TorqHw().to_dict(), tensors, buffers, commands)


def torq_module_mlir(blob: bytes) -> str:
    return textwrap.dedent(
        f"""
        module @m {{
          util.func private @torq.run_i2_o1(!util.buffer, !hal.buffer_view, !hal.buffer_view) -> !hal.buffer_view
          util.func public @main(%a: !hal.buffer_view, %b: !hal.buffer_view) -> !hal.buffer_view {{
            %exe = util.buffer.constant : !util.buffer = {i8_constant(blob)}
            %r = util.call @torq.run_i2_o1(%exe, %a, %b) : (!util.buffer, !hal.buffer_view, !hal.buffer_view) -> !hal.buffer_view
            util.return %r : !hal.buffer_view
          }}
        }}
        """
    )


CPU_MLIR = """
func.func @main(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = arith.addf %a, %b : tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}
"""


def compile_mlir(text: str) -> bytes:
    return iree_compiler.compile_str(text, target_backends=["llvm-cpu"], extra_args=["--iree-llvmcpu-target-cpu=generic"])


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("torq_rt")
    blob = serialize_program(add_program())
    out = {
        "torq": d / "add_torq.vmfb",
        "bad_exe": d / "bad_exe.vmfb",
        "cpu": d / "add_cpu.vmfb",
        "a": d / "a.npy",
        "dir": d,
    }
    out["torq"].write_bytes(compile_mlir(torq_module_mlir(blob)))
    out["bad_exe"].write_bytes(compile_mlir(torq_module_mlir(blob[: len(blob) // 2])))
    out["cpu"].write_bytes(compile_mlir(CPU_MLIR))
    # Values exact in bf16 (and their sums with 1.5), so bf16 and f32 print alike.
    np.save(out["a"], np.arange(6, dtype=np.float32).reshape(SHAPE) * 0.25)
    return out


def bf16_round(x: np.ndarray) -> np.ndarray:
    import ml_dtypes

    return x.astype(ml_dtypes.bfloat16).astype(np.float32)


# ---------------------------------------------------------------- Python API


def test_api_runs_torq_dispatch(files: dict[str, Path]) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(SHAPE).astype(np.float32)
    y = rng.standard_normal(SHAPE).astype(np.float32)
    m = api.load(files["torq"])
    assert m.function_names == ["main"]
    for _ in range(2):  # stats are per call, not accumulated
        r = m.main(x, y)
        assert isinstance(r, np.ndarray) and r.dtype == np.float32 and r.shape == SHAPE
        np.testing.assert_allclose(r, bf16_round(bf16_round(x) + bf16_round(y)), rtol=0, atol=0)
        np.testing.assert_allclose(r, x + y, rtol=2e-2, atol=2e-2)
        assert len(m.last_stats) == 1
        s = m.last_stats[0]
        assert s["name"] == "add_2x3" and s["executor"] == "torq"
        assert s["dma_bytes_in"] == 2 * 6 * 2 and s["dma_bytes_out"] == 6 * 2
    m.close()


def test_api_torch_inputs_and_save(files: dict[str, Path], tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    m = api.load(files["torq"].read_bytes())
    m.save(tmp_path / "copy.vmfb")
    assert (tmp_path / "copy.vmfb").read_bytes() == files["torq"].read_bytes()
    m2 = api.load(tmp_path / "copy.vmfb", hw="SL2610:lram_kb=64")
    r = m2["main"](torch.full(SHAPE, 1.5), torch.ones(SHAPE))
    np.testing.assert_array_equal(r, np.full(SHAPE, 2.5, np.float32))


def test_api_errors(files: dict[str, Path], tmp_path: Path) -> None:
    bad = tmp_path / "bad.vmfb"
    bad.write_bytes(b"not a module at all")
    with pytest.raises(ModuleLoadError, match=r"not a valid \.vmfb: .*bad\.vmfb: "):
        api.load(bad)
    with pytest.raises(ModuleLoadError, match="cannot read module"):
        api.load(tmp_path / "missing.vmfb")

    x = np.ones(SHAPE, np.float32)
    m = api.load(files["torq"])
    with pytest.raises(InputError, match=r"main: expected 2 inputs, got 1"):
        m.main(x)
    # The raw-buffer-view signature has no shapes: the simulator refuses it, typed.
    with pytest.raises(DispatchError, match=r"add_2x3.*input 1.*\(2, 3\)") as e:
        m.main(x, np.ones((3, 3), np.float32))
    assert type(e.value.__cause__).__name__ == "SimulatorError"
    np.testing.assert_array_equal(m.main(x, x), 2 * x)  # still usable after an error

    with pytest.raises(DispatchError) as e:
        api.load(files["bad_exe"]).main(x, x)
    assert type(e.value.__cause__).__name__ == "ExecutableError"

    cpu = api.load(files["cpu"])
    with pytest.raises(InputError, match=r"main: input 1: expected 2x3xf32, got 2x4xf32"):
        cpu.main(x, np.ones((2, 4), np.float32))
    with pytest.raises(InputError, match=r"main: input 0: expected 2x3xf32, got 2x3xf64"):
        cpu.main(x.astype(np.float64), x)
    with pytest.raises(TorqRuntimeError, match="no function 'nope'"):
        cpu["nope"]
    np.testing.assert_array_equal(cpu.main(x, x), 2 * x)
    assert cpu.last_stats == []


def test_api_two_results() -> None:
    """run_i1_o2: (a + a, a * a), returned as a tuple."""
    tensors, buffers = io_tensors(1, 2), lram_buffers([2, 3, 4])
    a = Ref("operand", 0, (0, 1))
    ops = [Operand(0, SHAPE, "bf16")]
    commands = [
        DmaIn(0, (0, 0), SHAPE, 0),
        Compute("elementwise", ops, Operand(1, SHAPE, "bf16"), {}, Epilogue([EpilogueStep("add", [a, a])])),
        Compute("elementwise", ops, Operand(2, SHAPE, "bf16"), {}, Epilogue([EpilogueStep("mul", [a, a])])),
        DmaOut(1, 1, (0, 0), SHAPE),
        DmaOut(2, 2, (0, 0), SHAPE),
    ]
    blob = serialize_program(Program("two", TorqHw().to_dict(), tensors, buffers, commands))
    mlir = f"""
    util.func private @torq.run_i1_o2(!util.buffer, !hal.buffer_view) -> (!hal.buffer_view, !hal.buffer_view)
    util.func public @f(%a: !hal.buffer_view) -> (!hal.buffer_view, !hal.buffer_view) {{
      %exe = util.buffer.constant : !util.buffer = {i8_constant(blob)}
      %r:2 = util.call @torq.run_i1_o2(%exe, %a) : (!util.buffer, !hal.buffer_view) -> (!hal.buffer_view, !hal.buffer_view)
      util.return %r#0, %r#1 : !hal.buffer_view, !hal.buffer_view
    }}
    """
    with api.load(compile_mlir(mlir)) as m:
        x = np.arange(6, dtype=np.float32).reshape(SHAPE) * 0.5
        r = m.f(x)
        assert isinstance(r, tuple) and len(r) == 2
        np.testing.assert_array_equal(r[0], x + x)
        np.testing.assert_array_equal(r[1], x * x)
        assert [s["name"] for s in m.last_stats] == ["two"]


# ---------------------------------------------------------------- torq-run-module


def _cli() -> list[str]:
    script = Path(sys.executable).parent / "torq-run-module"
    return [str(script)] if script.exists() else [sys.executable, "-m", "torq.runtime.tools"]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(_cli() + args, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_cli_output_file_and_no_leaks(files: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "y.npy"
    p = _run([f"--module={files['torq']}", f"--input=@{files['a']}", "--input=2x3xf32=1.5", f"--output=@{out}", "--print-stats"], tmp_path)
    assert p.returncode == 0, p.stderr
    assert "leaked" not in p.stderr and "Traceback" not in p.stderr
    a = np.load(files["a"])
    np.testing.assert_array_equal(np.load(out), a + 1.5)
    assert p.stdout.startswith("EXEC @main\n")
    assert "add_2x3" in p.stdout and "torq" in p.stdout  # the stats table
    assert sorted(x.name for x in tmp_path.iterdir()) == ["y.npy"]  # no temporaries left


def test_cli_print_format_matches_iree_run_module(files: dict[str, Path], tmp_path: Path) -> None:
    iree_run = Path(sys.executable).parent / "iree-run-module"
    if not iree_run.exists():
        found = shutil.which("iree-run-module")
        if not found:
            pytest.skip("iree-run-module not found")
        iree_run = Path(found)
    inputs = [f"--input=@{files['a']}", "--input=2x3xf32=1.5"]
    ref = subprocess.run([str(iree_run), f"--module={files['cpu']}", "--device=local-task", *inputs],
                         capture_output=True, text=True, timeout=120)
    assert ref.returncode == 0, ref.stderr
    ours_torq = _run([f"--module={files['torq']}", *inputs], tmp_path)
    ours_cpu = _run([f"--module={files['cpu']}", *inputs], tmp_path)
    assert ours_torq.returncode == 0 and ours_cpu.returncode == 0, ours_torq.stderr + ours_cpu.stderr
    lines = ref.stdout.splitlines()
    assert lines[:2] == ["EXEC @main", "result[0]: hal.buffer_view"]
    assert lines[2].startswith("2x3xf32=[")
    assert ours_torq.stdout == ref.stdout  # values are exact in bf16
    assert ours_cpu.stdout == ref.stdout


def test_format_elision_matches_iree(files: dict[str, Path]) -> None:
    from torq.runtime.module import ELEMENT_TYPES
    from torq.runtime.tools import format_tensor

    f32 = ELEMENT_TYPES["f32"]
    assert format_tensor(np.array(3, np.float32), f32) == "f32=3"
    assert format_tensor(np.array([1e-7, 123456789, np.inf], np.float32), f32) == "3xf32=1E-07 1.23457E+08 INF"
    assert format_tensor(np.arange(6, dtype=np.float32).reshape(2, 3), f32, 4) == "2x3xf32=[0 1 2][3...]"
    assert format_tensor(np.array([True, False]), ELEMENT_TYPES["i1"]) == "2xi1=01 00"
    assert format_tensor(np.zeros((0, 3), np.float32), f32) == "0x3xf32="


ERROR_CASES = [
    # (name, args after --module (None: no --module), expected exit code, expected text)
    ("missing module file", ["--module=missing.vmfb", "--input=@a.npy"], 1, "cannot read module"),
    ("not a vmfb", ["--module=a.npy", "--input=@a.npy"], 1, "not a valid .vmfb"),
    ("missing input file", ["--module=TORQ", "--input=@nope.npy", "--input=2x3xf32=1"], 1, "nope.npy"),
    ("bad input syntax", ["--module=TORQ", "--input=@a.npy", "--input=2x3xf32"], 1, "expected SHAPExTYPE"),
    ("bad element type", ["--module=TORQ", "--input=@a.npy", "--input=2x3xf99=1"], 1, "unknown element type 'f99'"),
    ("bad value", ["--module=TORQ", "--input=@a.npy", "--input=2x3xf32=x"], 1, "bad f32 value 'x'"),
    ("wrong value count", ["--module=TORQ", "--input=@a.npy", "--input=2x3xf32=1,2"], 1, "2 values for 6 elements"),
    ("file shape mismatch", ["--module=TORQ", "--input=@a.npy", "--input=3x2xf32=@a.npy"], 1, "holds 2x3xf32, expected 3x2xf32"),
    ("wrong input count", ["--module=TORQ", "--input=@a.npy"], 1, "expected 2 inputs, got 1"),
    ("simulator refuses shape", ["--module=TORQ", "--input=@a.npy", "--input=3x3xf32=1"], 1, "input 1"),
    ("corrupted executable", ["--module=BAD_EXE", "--input=@a.npy", "--input=2x3xf32=1"], 1, "torq.run_i2_o1: "),
    ("host shape check", ["--module=CPU", "--input=@a.npy", "--input=2x4xf32=1"], 1, "expected 2x3xf32, got 2x4xf32"),
    ("unknown function", ["--module=TORQ", "--function=foo", "--input=@a.npy", "--input=2x3xf32=1"], 1, "no function 'foo'"),
    ("bad device", ["--module=TORQ", "--device=cuda", "--input=@a.npy", "--input=2x3xf32=1"], 1, "allowed: torq"),
    ("bad hw", ["--module=TORQ", "--torq-hw=XYZ", "--input=@a.npy", "--input=2x3xf32=1"], 1, "unknown Torq hardware"),
    ("too many outputs", ["--module=TORQ", "--input=@a.npy", "--input=2x3xf32=1", "--output=@z.npy"], 1, "2 --output values for 1 results"),
    ("unknown flag", ["--module=TORQ", "--bogus=1"], 2, "unrecognized arguments"),
    ("no module", ["--input=@a.npy"], 2, "--module"),
]


@pytest.mark.parametrize("name,args,code,text", ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_cli_errors_in_process(files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture,
                               monkeypatch: pytest.MonkeyPatch, name: str, args: list[str], code: int, text: str) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(files["a"], tmp_path / "a.npy")
    subst = {"TORQ": files["torq"], "BAD_EXE": files["bad_exe"], "CPU": files["cpu"]}
    argv = []
    for a in args:
        flag, eq, value = a.partition("=")
        argv.append(f"{flag}={subst[value]}" if eq and value in subst else a)
    argv.append(f"--output=@{tmp_path / 'y.npy'}")
    assert run_module_main(argv) == code
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(ERR), captured.err
    assert text in lines[0]
    assert "Traceback" not in captured.err and captured.out == ""
    assert not (tmp_path / "y.npy").exists() and not (tmp_path / "z.npy").exists()
    assert sorted(x.name for x in tmp_path.iterdir()) == ["a.npy"]


def test_cli_error_subprocess_one_line(files: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "y.npy"
    p = _run([f"--module={files['torq']}", f"--input=@{files['a']}", "--input=3x3xf32=1", f"--output=@{out}"], tmp_path)
    assert p.returncode == 1
    assert p.stderr.count("\n") == 1 and p.stderr.startswith(ERR), p.stderr
    assert "Traceback" not in p.stderr and "leaked" not in p.stderr
    assert not out.exists()


def test_no_leak_noise_after_uncaught_error(files: dict[str, Path], tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text(textwrap.dedent(f"""
        import numpy as np
        from torq.runtime import api
        m = api.load({str(files['torq'])!r})
        x = np.ones((2, 3), np.float32)
        print(m.main(x, x).sum())
        m.main(x, np.ones((3, 3), np.float32))
    """))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and p.stdout.strip() == "12.0"
    assert "DispatchError" in p.stderr and "leaked" not in p.stderr, p.stderr
