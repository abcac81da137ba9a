"""`iree-compile` is iree-base-compiler's own launcher; iree-torq adds the Torq target through
`_torq_iree_compile_hook` (loaded by iree_torq.pth), so installing or uninstalling iree-torq,
in either order with IREE, never takes `iree-compile` away.

The slow test installs both packages into a throwaway venv, iree-base-compiler as a stand-in
wheel: its real dist-info (console scripts included) over this environment's IREE code, which
the throwaway venv's tools read through PYTHONPATH (so this environment's .pth files stay out,
and pip, run without it, sees only the throwaway venv's packages).
"""

import base64
import hashlib
import os
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

import _torq_iree_compile_hook as hook
import numpy as np
import pytest
from mlir_inputs import CONV_F32
from torch_reference import within_bf16_limits

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
LAUNCHER_LINE = "from iree.compiler.tools.scripts.iree_compile.__main__ import main"


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _run(tool, *args, bin_dir=BIN, env=None):
    return subprocess.run([str(bin_dir / tool), *map(str, args)], capture_output=True, text=True, env=env)


def test_launcher_is_iree_s():
    """bin/iree-compile is the file pip wrote for iree-base-compiler (its RECORD hash), and
    iree-torq installs no file of that name, only the .pth and the hook."""
    iree = metadata.distribution("iree-base-compiler")
    entry = next(f for f in iree.files if f.name == "iree-compile" and "bin" in f.parts)
    assert _record_hash((BIN / "iree-compile").read_bytes()) == f"{entry.hash.mode}={entry.hash.value}"
    # The installed one: an egg-info left in the source tree by an older build may come first on sys.path.
    ours = next(metadata.distributions(name="iree-torq", path=[sysconfig.get_path("purelib")]))
    assert "iree-compile" not in {e.name for e in ours.entry_points}
    names = {f.name for f in ours.files}
    assert "iree-compile" not in names and "iree_torq.pth" in names


def test_torq_target_compiles_and_runs(tmp_path):
    import torq

    src, out = tmp_path / "conv.mlir", tmp_path / "conv.vmfb"
    src.write_text(CONV_F32)
    r = _run("iree-compile", src, "--iree-hal-target-backends=torq", "-o", out)
    assert r.returncode == 0, r.stderr
    x = np.random.default_rng(0).standard_normal((1, 4, 10, 10)).astype(np.float32)
    m = torq.load(out)
    y = np.asarray(m.main(x))
    assert m.last_stats, "no NPU dispatch ran"
    win = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), (3, 3), axis=(2, 3))
    ref = np.einsum("nchwij,ocij->nohw", win, np.full((8, 4, 3, 3), 0.125))
    assert within_bf16_limits(y, ref)


def test_llvm_cpu_is_iree_s(tmp_path):
    from iree.compiler.tools.binaries import find_tool

    src = tmp_path / "conv.mlir"
    src.write_text(CONV_F32)
    args = [src, "--iree-hal-target-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=generic"]
    r = _run("iree-compile", *args, "-o", tmp_path / "launcher.vmfb")
    assert r.returncode == 0, r.stderr
    subprocess.run([find_tool("iree-compile"), *map(str, args), "-o", str(tmp_path / "binary.vmfb")], check=True)
    assert (tmp_path / "launcher.vmfb").read_bytes() == (tmp_path / "binary.vmfb").read_bytes()


def test_hook_wraps_iree_main_in_process():
    """The .pth put the finder on sys.meta_path at startup; IREE's launcher module's main is wrapped."""
    from iree.compiler.tools.scripts.iree_compile import __main__ as launcher

    assert hook._Finder in sys.meta_path
    assert launcher.main.__wrapped__.__module__ == launcher.__name__


def test_wrapped_main_routes(monkeypatch):
    import torq.compiler.tools as tools

    calls = []
    wrapped = hook.wrap_main(lambda args=None: calls.append(("iree", args)) or 0)
    monkeypatch.setattr(tools, "iree_compile_main", lambda argv: calls.append(("torq", argv)) or 0)
    plain = ["m.mlir", "--iree-hal-target-backends=llvm-cpu", "-o", "m.vmfb"]
    wrapped(plain)
    monkeypatch.setattr(sys, "argv", ["iree-compile", *plain])
    wrapped()
    wrapped(["m.mlir", "--iree-hal-target-backends=torq", "-o", "m.vmfb"])
    wrapped(["m.mlir", "--torq-hw=list"])
    assert calls == [("iree", plain), ("iree", None), ("torq", ["m.mlir", "--iree-hal-target-backends=torq",
                                                                  "-o", "m.vmfb"]), ("torq", ["m.mlir", "--torq-hw=list"])]


def test_torq_phase_flags_match_the_pipeline():
    from torq.compiler.pipeline import TORQ_PHASES

    assert set(hook.TORQ_PHASE_FLAGS) == {f"--compile-to={p}" for p in TORQ_PHASES}
    assert hook.wants_torq(["--compile-to=nss"]) and not hook.wants_torq(["--compile-to=flow"])


def _stand_in_iree_wheel(dest: Path) -> Path:
    """iree-base-compiler's dist-info (metadata, console scripts) without its files."""
    real = metadata.distribution("iree-base-compiler")
    info = "iree_base_compiler-3.13.0.dist-info"
    files = {f"{info}/METADATA": f"Metadata-Version: 2.1\nName: iree-base-compiler\nVersion: {real.version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
             f"{info}/entry_points.txt": real.read_text("entry_points.txt")}
    record = [f"{name},{_record_hash(text.encode())},{len(text.encode())}" for name, text in files.items()]
    files[f"{info}/RECORD"] = "\n".join(record + [f"{info}/RECORD,,"]) + "\n"
    path = dest / f"iree_base_compiler-{real.version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


def _check_iree_compile(venv_bin: Path, torq: bool):
    """bin/iree-compile is IREE's launcher, runs IREE's binary, and has the Torq target iff `torq`."""
    assert LAUNCHER_LINE in (venv_bin / "iree-compile").read_text().splitlines()
    env = {**os.environ, "PYTHONPATH": sysconfig.get_path("purelib")}
    r = _run("iree-compile", "--version", bin_dir=venv_bin, env=env)
    assert r.returncode == 0 and "IREE" in r.stdout + r.stderr, r.stderr
    r = _run("iree-compile", "--iree-hal-target-backends=torq", "--help", bin_dir=venv_bin, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: iree-compile MODEL") == torq


@pytest.mark.slow
def test_install_uninstall_round_trip(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    vbin, vpy = venv / "bin", venv / "bin" / "python"
    wheels = tmp_path / "wheels"
    iree = _stand_in_iree_wheel(tmp_path)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", wheels, ROOT], check=True,
                   env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    ours = next(wheels.glob("iree_torq-*.whl"))

    def pip_in_venv(*args):
        subprocess.run([*pip, "--python", vpy, *args], check=True,
                       env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})

    pip_in_venv("install", "--no-deps", "--no-index", iree)
    pip_in_venv("install", "--no-deps", "--no-index", ours)
    _check_iree_compile(vbin, torq=True)
    pip_in_venv("uninstall", "-y", "iree-torq")
    _check_iree_compile(vbin, torq=False)
    # The other order: iree-torq first, then IREE; then iree-torq goes again.
    pip_in_venv("uninstall", "-y", "iree-base-compiler")
    pip_in_venv("install", "--no-deps", "--no-index", ours)
    pip_in_venv("install", "--no-deps", "--no-index", iree)
    _check_iree_compile(vbin, torq=True)
    pip_in_venv("uninstall", "-y", "iree-torq")
    _check_iree_compile(vbin, torq=False)
