"""Bad input at run time: one-line CLI errors and typed API exceptions.

Covers `torq-run-module` (a subprocess of the console script) and the Python
API (`torq.compile(...)(x)`, `torq.load(...).main(x)`) for: a missing input
file, a wrong input shape / dtype / count, a missing or truncated module, a
.vmfb whose embedded Torq executable is truncated or corrupted, and an
executable whose LRAM map exceeds the simulated device. Also checks that the
input signature torq-compile records (`torq.signature` in the function's
reflection, see compiler/signature.py) survives IREE for torch-dialect,
linalg and TOSA inputs, and that a module without it keeps IREE's own checks.

Models are compiled once per module (module-scoped fixtures).
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
from mlir_inputs import CONV_F32  # noqa: E402
from torch_reference import within_bf16_limits  # noqa: E402

import torq
from torq.runtime.api import LoadedModule

BIN = Path(sys.executable).parent
TOOL = "torq-run-module"

LINALG = CONV_F32 + """func.func @dyn(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %0 = arith.addf %x, %x : tensor<?x4xf32>
  return %0 : tensor<?x4xf32>
}
"""

# int8 TOSA: conv2d (i32 accumulator) + rescale to i8 (TOSA 1.0 operand form).
TOSA = """
func.func @main(%x: tensor<1x8x8x4xi8>) -> tensor<1x6x6x8xi8> {
  %w = "tosa.const"() <{values = dense<1> : tensor<8x3x3x4xi8>}> : () -> tensor<8x3x3x4xi8>
  %bias = "tosa.const"() <{values = dense<0> : tensor<8xi32>}> : () -> tensor<8xi32>
  %zp8 = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %zp32 = "tosa.const"() <{values = dense<0> : tensor<1xi32>}> : () -> tensor<1xi32>
  %mul = "tosa.const"() <{values = dense<1073741824> : tensor<1xi32>}> : () -> tensor<1xi32>
  %sh = "tosa.const"() <{values = dense<35> : tensor<1xi8>}> : () -> tensor<1xi8>
  %c = "tosa.conv2d"(%x, %w, %bias, %zp8, %zp8) <{acc_type = i32, dilation = array<i64: 1, 1>,
       pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 1, 1>}>
       : (tensor<1x8x8x4xi8>, tensor<8x3x3x4xi8>, tensor<8xi32>, tensor<1xi8>, tensor<1xi8>) -> tensor<1x6x6x8xi32>
  %r = "tosa.rescale"(%c, %mul, %sh, %zp32, %zp8) <{scale32 = true, rounding_mode = #tosa<rounding_mode<SINGLE_ROUND>>,
       per_channel = false, input_unsigned = false, output_unsigned = false}>
       : (tensor<1x6x6x8xi32>, tensor<1xi32>, tensor<1xi8>, tensor<1xi32>, tensor<1xi8>) -> tensor<1x6x6x8xi8>
  return %r : tensor<1x6x6x8xi8>
}
"""

SMALL_HW = "SL2610:lram_kb=64"


class ConvRelu(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


def _torq_blob(vmfb: bytes) -> tuple[int, int]:
    """(start, length) of the first serialized Torq executable inside a .vmfb.

    The executable is a rodata byte vector: [u32 length][root offset u32]["TORQ"]...
    """
    ident = vmfb.find(b"TORQ")
    assert ident >= 8, "no Torq executable in the module"
    start = ident - 4
    (length,) = struct.unpack_from("<I", vmfb, start - 4)
    assert 8 < length <= len(vmfb) - start
    return start, length


def _corruptions(vmfb: bytes) -> dict[str, bytes]:
    start, length = _torq_blob(vmfb)
    out = {}
    d = bytearray(vmfb)
    d[start + 4 : start + 8] = b"TORX"
    out["identifier"] = bytes(d)
    d = bytearray(vmfb)
    d[start + 8 : start + length] = b"\xff" * (length - 8)
    out["garbage"] = bytes(d)
    d = bytearray(vmfb)
    struct.pack_into("<I", d, start, 0x7FFFFFF0)  # root table offset far outside
    out["root_offset"] = bytes(d)
    d = bytearray(vmfb)
    struct.pack_into("<I", d, start - 4, length // 2)  # the VM sees half of the blob
    out["truncated_half"] = bytes(d)
    d = bytearray(vmfb)
    struct.pack_into("<I", d, start - 4, 6)
    out["truncated_header"] = bytes(d)
    return out


@pytest.fixture(scope="module")
def art(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Compiled modules and input files, shared by every test of this file."""
    d = tmp_path_factory.mktemp("run_errors")
    torch.manual_seed(0)
    a: dict = {"dir": d}
    # torch-dialect input (iree-turbine export inside torq.compile): 1x3x8x8 f32.
    x = torch.randn(1, 3, 8, 8)
    a["conv_model"] = ConvRelu(3, 8).eval()
    a["conv"] = torq.compile(a["conv_model"], x)
    a["conv_path"] = d / "conv.vmfb"
    a["conv"].save(a["conv_path"])
    # A model whose LRAM map needs more than 64 KiB (compiled for the 512 KiB default).
    a["big"] = torq.compile(nn.Conv2d(16, 16, 3, padding=1).eval(), torch.randn(1, 16, 48, 48))
    a["big_path"] = d / "big.vmfb"
    a["big"].save(a["big_path"])
    # linalg MLIR through the torq-compile CLI.
    (d / "conv.mlir").write_text(LINALG)
    a["linalg_path"] = d / "linalg.vmfb"
    r = subprocess.run([str(BIN / "torq-compile"), str(d / "conv.mlir"), "-o", str(a["linalg_path"]), "--torq-quiet"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    vmfb = a["linalg_path"].read_bytes()
    for name, data in _corruptions(vmfb).items():
        (d / f"bad_{name}.vmfb").write_bytes(data)
    (d / "trunc.vmfb").write_bytes(vmfb[: len(vmfb) // 3])
    (d / "empty.vmfb").write_bytes(b"")
    rng = np.random.default_rng(0)
    np.save(d / "x.npy", rng.standard_normal((1, 3, 8, 8)).astype(np.float32))
    np.save(d / "x9.npy", rng.standard_normal((1, 3, 9, 9)).astype(np.float32))
    np.save(d / "x64.npy", rng.standard_normal((1, 3, 8, 8)))
    np.save(d / "x4.npy", rng.standard_normal((1, 4, 10, 10)).astype(np.float32))
    np.save(d / "xb.npy", rng.standard_normal((1, 16, 48, 48)).astype(np.float32))
    return a


# ---------------------------------------------------------------- the CLI


def run_tool(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / TOOL), *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_cli_good_path(art: dict, tmp_path: Path) -> None:
    d = art["dir"]
    r = run_tool([f"--module={art['conv_path']}", f"--input=@{d / 'x.npy'}", f"--output=@{tmp_path / 'y.npy'}"], tmp_path)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout == "EXEC @main\n"
    x = torch.from_numpy(np.load(d / "x.npy"))
    with torch.no_grad():
        ref = art["conv_model"](x).numpy()
    y = np.load(tmp_path / "y.npy")
    assert y.shape == ref.shape and y.dtype == np.float32
    assert within_bf16_limits(y, ref)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["y.npy"]


# (module key or file name in the artifacts dir, args with {d} = artifacts dir, needles in the error line)
CLI_CASES = {
    "missing_input_file": ("conv_path", ["--input=@{d}/nope.npy"], ["nope.npy", "No such file"]),
    "declared_shape_vs_file": ("conv_path", ["--input=1x3x9x9xf32=@{d}/x.npy"],
                               ["x.npy", "holds 1x3x8x8xf32, expected 1x3x9x9xf32"]),
    "wrong_shape_npy": ("conv_path", ["--input=@{d}/x9.npy"],
                        ["--input #0", "x9.npy", "input 0: expected 1x3x8x8xf32, got 1x3x9x9xf32"]),
    "wrong_shape_declared": ("conv_path", ["--input=1x3x9x9xf32=@{d}/x9.npy"],
                             ["--input #0", "x9.npy", "expected 1x3x8x8xf32, got 1x3x9x9xf32"]),
    "wrong_shape_splat": ("conv_path", ["--input=1x3x8xf32=1"], ["--input #0", "expected 1x3x8x8xf32, got 1x3x8xf32"]),
    "wrong_dtype_npy": ("conv_path", ["--input=@{d}/x64.npy"], ["x64.npy", "expected 1x3x8x8xf32, got 1x3x8x8xf64"]),
    "wrong_dtype_splat": ("conv_path", ["--input=1x3x8x8xi32=1"], ["expected 1x3x8x8xf32, got 1x3x8x8xi32"]),
    "too_many_inputs": ("conv_path", ["--input=@{d}/x.npy", "--input=@{d}/x.npy"],
                        ["main: expected 1 input, got 2", "1x3x8x8xf32"]),
    "no_inputs": ("conv_path", [], ["main: expected 1 input, got 0"]),
    "linalg_wrong_shape": ("linalg_path", ["--input=@{d}/x.npy"], ["input 0: expected 1x4x10x10xf32, got 1x3x8x8xf32"]),
    "missing_module": ("nope.vmfb", ["--input=@{d}/x4.npy"], ["cannot read module", "nope.vmfb"]),
    "truncated_vmfb": ("trunc.vmfb", ["--input=@{d}/x4.npy"], ["not a valid .vmfb", "trunc.vmfb"]),
    "empty_vmfb": ("empty.vmfb", ["--input=@{d}/x4.npy"], ["not a valid .vmfb", "empty.vmfb"]),
    "exe_identifier": ("bad_identifier.vmfb", ["--input=@{d}/x4.npy"], ["not a Torq executable", "TORX"]),
    "exe_garbage": ("bad_garbage.vmfb", ["--input=@{d}/x4.npy"], ["Torq executable"]),
    "exe_root_offset": ("bad_root_offset.vmfb", ["--input=@{d}/x4.npy"], ["truncated or corrupted Torq executable"]),
    "exe_truncated": ("bad_truncated_half.vmfb", ["--input=@{d}/x4.npy"], ["truncated or corrupted Torq executable"]),
    "exe_truncated_header": ("bad_truncated_header.vmfb", ["--input=@{d}/x4.npy"], ["Torq executable too short"]),
    "lram_exceeds_device": ("big_path", ["--input=@{d}/xb.npy", f"--torq-hw={SMALL_HW}"],
                            ["bytes of LRAM but the device", "has 65536 bytes"]),
    "unknown_hw": ("conv_path", ["--input=@{d}/x.npy", "--torq-hw=XYZ"], ["unknown Torq hardware 'XYZ'"]),
    "bad_hw_override": ("conv_path", ["--input=@{d}/x.npy", "--torq-hw=SL2610:lram=3"], ["bad --torq-hw override"]),
    "unknown_torq_flag": ("conv_path", ["--input=@{d}/x.npy", "--torq-frobnicate=1"], ["--torq-frobnicate"]),
    "unknown_function": ("conv_path", ["--input=@{d}/x.npy", "--function=nope"], ["no function 'nope'"]),
}


@pytest.mark.parametrize("case", list(CLI_CASES))
def test_cli_error_is_one_line(art: dict, tmp_path: Path, case: str) -> None:
    module, args, needles = CLI_CASES[case]
    d = art["dir"]
    path = art[module] if module in art else d / module
    out = tmp_path / "y.npy"
    r = run_tool([f"--module={path}", *(a.format(d=d) for a in args), f"--output=@{out}"], tmp_path)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].strip(), r.stderr
    assert lines[0].startswith(f"{TOOL}: error: "), r.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert r.stdout == ""
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []  # no temporaries either


# ---------------------------------------------------------------- the Python API


@pytest.fixture(scope="module")
def loaded(art: dict) -> LoadedModule:
    m = torq.load(art["conv_path"])
    yield m
    m.close()


def _no_vm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any VM invocation fail loudly: input errors must come first."""

    def boom(*_a, **_k):
        raise AssertionError("the VM was invoked")

    monkeypatch.setattr(LoadedModule, "_invoke", boom)


BAD_CALLS = {
    "shape": ((np.zeros((1, 3, 9, 9), np.float32),), 0, r"main: input 0: expected 1x3x8x8xf32, got 1x3x9x9xf32"),
    "rank": ((np.zeros((3, 8, 8), np.float32),), 0, r"main: input 0: expected 1x3x8x8xf32, got 3x8x8xf32"),
    "dtype": ((np.zeros((1, 3, 8, 8), np.float64),), 0, r"main: input 0: expected 1x3x8x8xf32, got 1x3x8x8xf64"),
    "int_dtype": ((np.zeros((1, 3, 8, 8), np.int32),), 0, r"expected 1x3x8x8xf32, got 1x3x8x8xi32"),
    "torch_shape": ((torch.zeros(1, 3, 8, 9),), 0, r"expected 1x3x8x8xf32, got 1x3x8x9xf32"),
    "too_many": ((np.zeros((1, 3, 8, 8), np.float32),) * 2, None,
                 r"main: expected 1 input, got 2 \(signature: main\(1x3x8x8xf32\)\)"),
    "none": ((), None, r"main: expected 1 input, got 0"),
}


@pytest.mark.parametrize("case", list(BAD_CALLS))
@pytest.mark.parametrize("via", ["compile", "load"])
def test_api_bad_inputs_are_typed(art: dict, loaded: LoadedModule, monkeypatch: pytest.MonkeyPatch,
                                  via: str, case: str) -> None:
    args, index, pattern = BAD_CALLS[case]
    fn = art["conv"] if via == "compile" else loaded.main
    _no_vm(monkeypatch)
    with pytest.raises(torq.InputError, match=pattern) as e:
        fn(*args)
    assert isinstance(e.value, torq.TorqRuntimeError) and isinstance(e.value, ValueError)
    assert e.value.index == index
    assert "\n" not in str(e.value)


def test_api_still_runs_after_bad_inputs(art: dict, loaded: LoadedModule) -> None:
    x = np.load(art["dir"] / "x.npy")
    with pytest.raises(torq.InputError):
        loaded.main(x[:, :, :7])
    y1, y2 = loaded.main(x), art["conv"](x)
    np.testing.assert_array_equal(y1, y2)
    assert y1.shape == (1, 8, 8, 8) and loaded.last_stats


def test_api_module_errors(art: dict) -> None:
    d = art["dir"]
    with pytest.raises(torq.ModuleLoadError, match="cannot read module .*nope.vmfb"):
        torq.load(d / "nope.vmfb")
    with pytest.raises(torq.ModuleLoadError, match=r"not a valid \.vmfb: .*trunc\.vmfb"):
        torq.load(d / "trunc.vmfb")
    x4 = np.load(d / "x4.npy")
    for name, cause in [("identifier", "not a Torq executable"), ("truncated_half", "truncated or corrupted"),
                        ("garbage", "Torq executable"), ("root_offset", "truncated or corrupted")]:
        with torq.load(d / f"bad_{name}.vmfb") as m:
            with pytest.raises(torq.DispatchError, match=cause) as e:
                m.main(x4)
            assert type(e.value.__cause__).__name__ == "ExecutableError"
            assert "\n" not in str(e.value)


def test_api_lram_map_exceeds_device(art: dict) -> None:
    xb = np.load(art["dir"] / "xb.npy")
    y = art["big"](xb)  # fits the device it was compiled for
    peak = max(s["lram_peak_bytes"] for s in art["big"].last_stats)
    assert peak > torq.parse_hw_spec(SMALL_HW).lram_bytes  # so the small device cannot hold it
    with torq.load(art["big_path"], hw=SMALL_HW) as m:
        with pytest.raises(torq.DispatchError, match=r"needs \d+ bytes of LRAM but the device .* has 65536 bytes") as e:
            m.main(xb)
        assert type(e.value.__cause__).__name__ == "ExecutableError"
    assert y.shape == (1, 16, 48, 48)


# ---------------------------------------------------------------- the recorded signature


def _reflection(vmfb: bytes) -> dict[str, dict]:
    import iree.runtime as rt

    mod = rt.VmModule.copy_buffer(rt.VmInstance(), vmfb)
    out = {}
    for name in mod.function_names:
        fn = mod.lookup_function(name)
        out[name] = dict(fn.reflection)
    return out


def test_signature_kept_for_torch_input(art: dict) -> None:
    refl = _reflection(art["conv"].vmfb)
    sig = json.loads(refl["main"]["torq.signature"])
    assert sig == {"v": 1, "inputs": ["1x3x8x8xf32"], "results": ["1x8x8x8xf32"]}
    s = art["conv"].signature("main")
    assert [t.text for t in s.inputs] == ["1x3x8x8xf32"] and [t.text for t in s.results] == ["1x8x8x8xf32"]


def test_signature_kept_for_linalg_input_with_dynamic_dims(art: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    refl = _reflection(art["linalg_path"].read_bytes())
    assert json.loads(refl["main"]["torq.signature"])["inputs"] == ["1x4x10x10xf32"]
    assert json.loads(refl["dyn"]["torq.signature"]) == {"v": 1, "inputs": ["?x4xf32"], "results": ["?x4xf32"]}
    with torq.load(art["linalg_path"]) as m:
        for n in (3, 5):  # the dynamic dim matches anything
            x = np.arange(4 * n, dtype=np.float32).reshape(n, 4)
            np.testing.assert_array_equal(m.dyn(x), 2 * x)
        _no_vm(monkeypatch)
        with pytest.raises(torq.InputError, match=r"dyn: input 0: expected \?x4xf32, got 3x5xf32"):
            m.dyn(np.zeros((3, 5), np.float32))
        with pytest.raises(torq.InputError, match=r"dyn: input 0: expected \?x4xf32, got 3x4xf64"):
            m.dyn(np.zeros((3, 4)))


def test_signature_kept_for_tosa_input(monkeypatch: pytest.MonkeyPatch) -> None:
    cm = torq.compile(TOSA, flags=["--iree-input-type=tosa"])
    refl = _reflection(cm.vmfb)
    assert json.loads(refl["main"]["torq.signature"]) == {"v": 1, "inputs": ["1x8x8x4xi8"], "results": ["1x6x6x8xi8"]}
    x = np.ones((1, 8, 8, 4), np.int8)
    y = cm(x)
    assert y.shape == (1, 6, 6, 8) and y.dtype == np.int8
    _no_vm(monkeypatch)
    with pytest.raises(torq.InputError, match=r"main: input 0: expected 1x8x8x4xi8, got 1x8x8x4xf32"):
        cm(x.astype(np.float32))
    with pytest.raises(torq.InputError, match=r"main: input 0: expected 1x8x8x4xi8, got 1x8x8x4xui8"):
        cm(x.astype(np.uint8))


def test_torch_types_in_signature() -> None:
    from torq.compiler.signature import type_text

    assert type_text("!torch.vtensor<[?,3],si64>") == "?x3xi64"
    assert type_text("!torch.vtensor<[2,3],ui8>") == "2x3xui8"
    assert type_text("!torch.vtensor<[],f32>") == "f32"
    assert type_text("!torch.vtensor<[4],i1>") == "4xi1"
    assert type_text("tensor<2x?xbf16>") == "2x?xbf16"
    assert type_text("tensor<*xf32>") is None
    assert type_text("!torch.int") is None and type_text("index") is None and type_text("!hal.buffer_view") is None
    # A mutable (non-value) tensor: an argument the model writes in place, listed as mutated.
    assert type_text("!torch.tensor<[1,3,16,8],f32>") == "1x3x16x8xf32"


def test_mutated_arguments_in_signature() -> None:
    from iree.compiler import ir

    from torq.compiler.signature import signature_json

    with ir.Context() as ctx:
        ctx.allow_unregistered_dialects = True
        cache, row = ir.Type.parse("!torch.tensor<[2,8],f32>"), ir.Type.parse("!torch.vtensor<[1,8],f32>")
        assert json.loads(signature_json([row, cache], [row])) == {
            "v": 1, "inputs": ["1x8xf32", "2x8xf32"], "results": ["1x8xf32"], "mutated": [1]}
        assert "mutated" not in json.loads(signature_json([row], [row]))


def test_module_without_signature_keeps_iree_checks(art: dict) -> None:
    """A stock .vmfb of a torch export has no reflection: IREE's own check reports the mismatch."""
    import iree.compiler as ic
    import iree.turbine.aot as aot

    exported = aot.export(art["conv_model"], args=(torch.zeros(1, 3, 8, 8),))
    vmfb = ic.compile_str(str(exported.mlir_module), target_backends=["llvm-cpu"],
                          extra_args=["--iree-llvmcpu-target-cpu=generic"])
    assert "torq.signature" not in _reflection(vmfb)["main"]
    with torq.load(vmfb) as m:
        assert m.signature("main").inputs is None
        x = np.load(art["dir"] / "x.npy")
        assert m.main(x).shape == (1, 8, 8, 8)
        with pytest.raises(torq.TorqRuntimeError, match="mismatch") as e:
            m.main(np.zeros((1, 3, 9, 9), np.float32))
        assert not isinstance(e.value, torq.InputError)
        assert "\n" not in str(e.value)
