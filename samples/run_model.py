"""Run a reference model (samples/models.py, random weights) on the Torq simulator.

    python samples/run_model.py mobilenet_v2 --size 64
    python samples/run_model.py resnet18            # 224x224
    python samples/run_model.py bert --seq 32 --hw SL2610:lram_kb=256
    python samples/run_model.py vit --layers 2   # ViT-B/16, 197 tokens

Exports the model with iree-turbine, compiles it with `torq.compile`, runs it
on the simulator and prints: compile seconds, error vs torch fp32 (relative
L2 and cosine, DESIGN §7 limits), the NPU share of the model's MACs, the
dispatches left on the host with the compiler's reason, and the per-dispatch
benchmark table. Exit status 0 when the error is within the limits.
`run_model(...)` is the same as a function (tests and benchmarks use it).
"""

from __future__ import annotations

import argparse
import inspect
import io
import os
import sys
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cnn import COSINE_LIMIT, REL_L2_LIMIT, error_figures, within_limits  # noqa: E402
from models import MODELS  # noqa: E402

# torch.export internals warn about their own deprecations on every export.
warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", category=DeprecationWarning)

MAC_SHARE_TARGET = 0.98  # issue 5: share of MACs on the NPU


def build(name: str, **kwargs):
    """(model, example input, label) of a `MODELS` entry built with `kwargs` (size, seq,
    layers, ...), or of "cnn" (samples/cnn.py at `size`, default 32)."""
    if name == "cnn":
        from cnn import make_model

        size = kwargs.get("size", 32)
        x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(1))
        return make_model(), x, f"cnn 1x3x{size}x{size}"
    if name not in MODELS:
        raise SystemExit(f"run_model: error: unknown model '{name}' (one of {', '.join(MODELS)})")
    model, x = MODELS[name](**kwargs)
    default = inspect.signature(MODELS[name]).parameters.get("layers")
    layers = kwargs.get("layers", default.default if default is not None else 1)
    label = f"{name} {'x'.join(map(str, x.shape))}" + (f" ({layers} layers)" if layers != 1 else "")
    return model, x, label


def _size_kwargs(name: str, size: int | None, seq: int | None, layers: int | None) -> dict:
    """The command line's sizes as `MODELS` arguments (each model takes only its own)."""
    if name == "bert":
        return {k: v for k, v in (("seq", seq), ("layers", layers)) if v and (k != "layers" or v != 1)}
    if name == "audio_encoder":  # --seq is its mel frames
        return {k: v for k, v in (("frames", seq), ("layers", layers)) if v}
    if name == "vit":
        return {k: v for k, v in (("size", size), ("layers", layers)) if v}
    return {"size": size} if size and name in ("mobilenet_v2", "mobilenet_v3", "resnet18") else {}


def export_mlir(model: torch.nn.Module, x: torch.Tensor) -> str:
    """Torch-dialect MLIR of `model(x)` via iree-turbine (the input torq and IREE both compile)."""
    import iree.turbine.aot as aot

    return str(aot.export(model, args=(x,)).mlir_module)


@dataclass
class ModelRun:
    label: str
    hw: str
    export_s: float
    compile_s: float
    run_s: float
    rel_l2: float
    cosine: float
    report: object  # torq.compiler.target.TargetReport
    stats: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return within_limits(self.rel_l2, self.cosine)


def run_model(name: str, size: int | None = None, seq: int | None = None, hw: str = "SL2610",
              flags: tuple[str, ...] = (), layers: int | None = None) -> ModelRun:
    """Export, compile for Torq, run on the simulator and compare with torch fp32."""
    import torq

    model, x, label = build(name, **_size_kwargs(name, size, seq, layers))
    with torch.no_grad():
        ref = model(x).numpy()
    t0 = time.perf_counter()
    mlir = export_mlir(model, x)
    t1 = time.perf_counter()
    cm = torq.compile(mlir, hw=hw, flags=flags, remarks=io.StringIO())  # reasons are in cm.report
    t2 = time.perf_counter()
    y = cm(x.numpy())
    t3 = time.perf_counter()
    rel_l2, cosine = error_figures(np.asarray(y), ref)
    return ModelRun(label, hw, t1 - t0, t2 - t1, t3 - t2, rel_l2, cosine, cm.report, list(cm.last_stats))


def print_run(run: ModelRun, console=None) -> None:
    from rich.console import Console

    from torq.report import mac_share_line, print_dispatch_table, print_host_dispatches

    console = console or (Console() if Console().is_terminal else Console(width=160))
    console.print(f"{run.label} on Torq {run.hw}: export {run.export_s:.1f} s, compile {run.compile_s:.1f} s, "
                  f"run {run.run_s:.1f} s")
    print_dispatch_table(run.report, run.stats, console)
    print_host_dispatches(run.report, console)
    met = "met" if run.report.npu_mac_share >= MAC_SHARE_TARGET else "NOT met"
    console.print(f"{mac_share_line(run.report)}; target >= {100 * MAC_SHARE_TARGET:.0f}%: {met}")
    console.print(f"vs torch fp32: relative L2 error {run.rel_l2:.2e} (limit {REL_L2_LIMIT:g}), "
                  f"cosine {run.cosine:.6f} (limit {COSINE_LIMIT})")
    console.print("PASS" if run.ok else "FAIL")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", choices=[m for m in MODELS if m != "mlp"])
    p.add_argument("--size", type=int, help="input height and width of the CNNs and ViT (default 224)")
    p.add_argument("--seq", type=int, help="sequence length of the BERT layer (default 128), mel frames of "
                   "the audio encoder (default 3000)")
    p.add_argument("--layers", type=int, help="encoder layers (BERT default 1, audio encoder 2, ViT 12)")
    p.add_argument("--hw", default="SL2610", help="Torq hardware, e.g. SL2610:lram_kb=64")
    p.add_argument("--flag", action="append", default=[], help="extra compiler flag (repeatable), e.g. "
                   "--flag=--torq-super-tiling-strategy=seed")
    args = p.parse_args(argv)
    import torq

    try:
        torq.parse_hw_spec(args.hw)  # a bad spec fails before the export
    except ValueError as e:
        print(f"run_model: error: {e}", file=sys.stderr)
        return 2
    try:
        run = run_model(args.model, args.size, args.seq, args.hw, tuple(args.flag), args.layers)
    except (torq.TorqCompileError, torq.TorqRuntimeError) as e:
        print(f"run_model: error: {e}", file=sys.stderr)
        return 1
    print_run(run)
    return 0 if run.ok else 1


if __name__ == "__main__":
    sys.exit(main())
