"""Shared plumbing of the benchmark scripts (run.py, tiling.py).

- `machine_info()` / `machine_markdown()`: where a RESULTS file was measured.
- `MODEL_SIZES`: the full and `--quick` inputs of each benchmarked model.
- `run_worker(script, spec, timeout)`: runs one measurement in a child Python
  process (`script --worker SPEC.json RESULT.json`), so a model that crashes
  the compiler or exceeds the time limit becomes a row with its error, and
  each measurement starts from a fresh process (no cache or heap carried over
  from the previous model).
- `progress()`: a rich progress display (plain lines when not a terminal).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from importlib import metadata

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLES = os.path.join(ROOT, "samples")
if SAMPLES not in sys.path:
    sys.path.insert(0, SAMPLES)

# Per model: builder kwargs at full size and for --quick (smoke tests, CI).
# ResNet-18's quick size is 64, not 32: at 32x32 IREE's own global optimization
# fails on the last 3x3 conv (1x1 output), before any Torq code runs.
MODEL_SIZES = {
    "mlp": ({"batch": 8, "features": 784, "hidden": 1024}, {"batch": 2, "features": 64, "hidden": 64}),
    "cnn": ({"size": 224}, {"size": 16}),
    "mobilenet_v2": ({"size": 224}, {"size": 64}),
    "mobilenet_v3": ({"size": 224}, {"size": 64}),
    "resnet18": ({"size": 224}, {"size": 64}),
    "bert": ({"seq": 128}, {"seq": 32}),
    "audio_encoder": ({"frames": 3000}, {"frames": 200}),
    # ViT-B/16: 197 tokens, a prime count (peeled tiles); quick: 17 tokens, one small layer.
    "vit": ({"size": 224}, {"size": 64, "layers": 1, "hidden": 192, "heads": 3, "ffn": 768}),
    # The same models quantized to int8 by onnxruntime (int8.py).
    "mobilenet_v2_int8": ({"size": 224}, {"size": 64}),
    "mobilenet_v3_int8": ({"size": 224}, {"size": 64}),
    "resnet18_int8": ({"size": 224}, {"size": 64}),
    "bert_int8": ({"seq": 128}, {"seq": 32}),
    # ... with softmax and LayerNorm on the NPU in bf16 (--torq-int8-float-ops=bf16).
    "bert_int8_bf16_float_ops": ({"seq": 128}, {"seq": 32}),
    # ... quantized by onnxruntime quantize_dynamic (its transformer recipe), float ops in bf16
    # on the NPU, and on the host in f32 (--torq-keep-f32).
    "bert_int8_dynamic": ({"seq": 128}, {"seq": 32}),
    "bert_int8_dynamic_keep_f32": ({"seq": 128}, {"seq": 32}),
    # samples/llm.py: SmolLM2-135M's widths and vocabulary, prefill at T = 128 (llm_rows.py).
    # 16 tokens: issue 12's greedy-generation check.
    "llm": ({"layers": 30, "vocab": 49152, "prompt": 128, "tokens": 16, "max_len": 144},
            {"layers": 1, "vocab": 512, "prompt": 8, "tokens": 3, "max_len": 16}),
}


def build_model(name: str, kwargs: dict):
    """(model, example input, label) for a `MODEL_SIZES` name (samples/run_model.build)."""
    from run_model import build

    return build(name, **kwargs)


def versions() -> dict:
    out = {"python": platform.python_version()}
    for dist in ("iree-base-compiler", "iree-base-runtime", "iree-turbine", "torch"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "?"
    return out


def machine_info() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    return {"cpu": cpu, "cores": os.cpu_count(), "os": platform.platform(), "load_at_start": round(load, 2),
            "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"), **versions()}


def machine_markdown(info: dict) -> str:
    return (f"Machine: {info['cpu']}, {info['cores']} cores ({info['os']}), load average {info['load_at_start']} "
            f"at start; Python {info['python']}, iree-base-compiler {info['iree-base-compiler']}, "
            f"iree-base-runtime {info['iree-base-runtime']}, iree-turbine {info['iree-turbine']}, "
            f"torch {info['torch']}; {info['date']}.")


def run_worker(script: str, spec: dict, timeout: float) -> dict:
    """Run `script --worker` on `spec` in a child process; its result dict, or {"error": ...}."""
    with tempfile.TemporaryDirectory(prefix="torq-bench-") as tmp:
        spec_path, result_path = os.path.join(tmp, "spec.json"), os.path.join(tmp, "result.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, script, "--worker", spec_path, result_path],
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:  # subprocess.run killed the child
            return {"error": f"timed out after {timeout / 60:.0f} min", "wall_s": time.perf_counter() - t0}
        if os.path.exists(result_path):
            with open(result_path) as f:
                return json.load(f)
        tail = [line for line in (proc.stderr or proc.stdout).strip().splitlines() if line.strip()]
        why = tail[-1] if tail else "no output"
        return {"error": f"worker exited with status {proc.returncode}: {why}", "wall_s": time.perf_counter() - t0}


def worker_main(argv: list[str], measure) -> int:
    """`--worker SPEC RESULT`: `measure(spec) -> dict`, written to RESULT (errors as {"error"})."""
    import warnings

    warnings.filterwarnings("ignore")
    spec_path, result_path = argv
    with open(spec_path) as f:
        spec = json.load(f)
    try:
        result = measure(spec)
    except Exception as e:  # a failing model is a row, not a crash of the suite
        result = {"error": " ".join(f"{type(e).__name__}: {e}".split())[:400]}
    with open(result_path, "w") as f:
        json.dump(result, f)
    return 0


HOST_FLAGS = ["--iree-llvmcpu-target-cpu=host"]  # as torq's host side (compiler/driver.py HOST_FLAGS)


def llvm_cpu_compile(mlir: str | bytes) -> tuple[float, bytes]:
    """iree-compile (llvm-cpu) seconds and the .vmfb: the peer every compile time is a ratio to."""
    from iree.compiler import tools as iree_tools

    t0 = time.perf_counter()
    vmfb = iree_tools.compile_str(mlir, target_backends=["llvm-cpu"], extra_args=HOST_FLAGS)
    return time.perf_counter() - t0, vmfb


def compile_cold_and_warm(model, hw: str, remarks, flags: list[str] = (),
                          cache: str | None = None) -> tuple[object, float, float]:
    """(compiled module, seconds of a cold `torq.compile`, seconds of the same compile again).

    Both use one fresh cache directory (`cache`, an empty directory the caller keeps, or a
    temporary one): the first compile finds it empty (within it, identical dispatches
    still compile once), the second finds IREE's front end and every NPU dispatch there,
    as a user's recompile does. Dispatches compile in one worker per core (the default).
    Raises torq.TorqCompileError as torq.compile does."""
    import torq

    if cache is None:
        with tempfile.TemporaryDirectory(prefix="torq-bench-cache-") as tmp:
            return compile_cold_and_warm(model, hw, remarks, flags, tmp)
    flags = [f"--torq-cache-dir={cache}", *flags]
    t0 = time.perf_counter()
    cm = torq.compile(model, hw=hw, remarks=remarks, flags=flags)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    torq.compile(model, hw=hw, remarks=remarks, flags=flags)
    return cm, cold, time.perf_counter() - t0


def run_against_torch(cm, model, x) -> dict:
    """One simulator run of `cm` on `x` against the torch `model` in fp32 and in bf16, and the
    run's figures (a row of the architecture tables): its wall seconds, NPU share of MACs, NPU / host dispatches
    (host reasons; load-time initializers aside), relative L2 vs torch fp32 beside torch bf16's,
    simulated cycles, roofline cycles, DMA and compulsory bytes of the NPU dispatches."""
    import numpy as np
    import torch

    t0 = time.perf_counter()
    y = np.asarray(cm(x.numpy()))
    run_s = time.perf_counter() - t0
    with torch.no_grad():
        ref = model(x).numpy()
        ref_bf16 = model.to(torch.bfloat16)(x.to(torch.bfloat16)).float().numpy()
    stats = [s for s in cm.last_stats if s["executor"] == "torq"]
    host = [d for d in cm.report.dispatches if d.executor != "torq" and not d.name.startswith("initializer_")]
    return dict(run_s=run_s, share=cm.report.npu_mac_share, torq=len(stats), host=len(host),
                reasons=sorted({" ".join(d.reason.split()) for d in host}),
                rel_l2=float(np.linalg.norm(y - ref) / np.linalg.norm(ref)),
                bf16_rel_l2=float(np.linalg.norm(ref_bf16 - ref) / np.linalg.norm(ref)),
                cycles=sum(s["cycles"] for s in stats), roofline=sum(s["roofline_cycles"] for s in stats),
                dma=sum(s["dma_bytes_in"] + s["dma_bytes_out"] for s in stats),
                compulsory=sum(s["compulsory_bytes"] for s in stats))


# The columns of `run_against_torch`'s figures in the architecture tables, and their cells.
RUN_COLUMNS = ["NPU share of MACs", "dispatches torq/host", "rel L2 vs torch", "torch bf16 rel L2", "simulated cycles",
               "efficiency vs roofline", "DDR traffic ratio"]


def run_cells(r: dict) -> list[str]:
    """The `RUN_COLUMNS` cells of a row holding `run_against_torch`'s figures."""
    return [f"{100 * r['share']:.2f}%", f"{r['torq']}/{r['host']}", f"{r['rel_l2']:.2e}", f"{r['bf16_rel_l2']:.2e}",
            f"{r['cycles']:,}", f"{100 * r['roofline'] / r['cycles']:.1f}%", f"{r['dma'] / r['compulsory']:.3f}"]


def one_line(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def composition(dispatches) -> dict:
    """Over the NPU dispatches' requantization summaries (report `requant` dicts, their "rest"
    included): channels whose nearest rescale was refitted so that no level one off is more
    than one output step at the result, and the accumulator values (input pairs) still more
    than one step off there, with the most steps (compiler/requant_compose.py)."""
    out = {"held": 0, "off": 0, "steps": 0}

    def add(summary):
        c = summary.get("composition") or {}
        out["held"] += c.get("held", 0)
        out["off"] += c.get("off", 0)
        out["steps"] = max(out["steps"], c.get("steps", 0))
        if summary.get("rest"):
            add(summary["rest"])
    for d in dispatches:
        if d.executor == "torq":
            for s in d.requant:
                add(s)
    return out


def composition_text(c: dict) -> str:
    """`composition` in a table cell."""
    return f"{c['held']:,} refitted; {c['off']:,} values off by 2+" + (f" (≤ {c['steps']})" if c["off"] else "")


def rows_markdown(rows: list[dict], columns: list[str], cells) -> list[str]:
    """A markdown table of per-model `rows` (`cells(row)`: the cells after the model's; a failed
    row's error fills its first cell), then each row's host dispatch reasons ("reasons")."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | failed: {one_line(r['error'], 300)} |" + " |" * (len(columns) - 2))
        else:
            lines.append("| " + " | ".join([r["model"], *cells(r)]) + " |")
    lines.append("")
    for r in rows:
        for reason in r.get("reasons", []):
            lines.append(f"- {r['model']}, on host: {reason}")
    return lines


def table_main(argv, script: str, measure, markdown, *, doc: str, models, kind: str, timeout: float, output: str,
               title: str, spec, needs: str | None = None) -> int:
    """The command line of a one-table benchmark script (`script`, its module docstring `doc`):
    `--worker` measures one row (`measure`); otherwise each of `--models` (`spec(name)`: its
    row label and spec) is measured in its own process and the table (`markdown(rows)`)
    written to `--output` under `title`; `needs` names a package the models come from."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker_main(argv[1:], measure)
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--models", default=",".join(models), help=f"comma-separated {kind} names")
    p.add_argument("--timeout", type=float, default=timeout, help="seconds per model")
    p.add_argument("--output", default=output)
    args = p.parse_args(argv)
    if needs:
        try:
            __import__(needs)
        except ImportError:
            p.error(f"needs {needs}: .venv/bin/pip install {needs}")
    info = machine_info()
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    rows = run_rows(os.path.abspath(script), [spec(name) for name in names], args.timeout, markdown)
    write_results(args.output, title, os.path.basename(script), info, markdown(rows))
    return 0


def write_results(path: str, title: str, script: str, info: dict, table: list[str]) -> None:
    """A results file: `title`, the script and machine it ran on, then `table`'s lines."""
    head = [f"# {title}", "", f"`build_tools/benchmarks/{script}`, SL2610. " + machine_markdown(info), ""]
    with open(path, "w") as f:
        f.write("\n".join(head + table) + "\n")


def run_rows(script: str, specs: list[tuple[str, dict]], timeout: float, markdown) -> list[dict]:
    """Each (row label, spec) measured by `script --worker` in its own process, its table line
    printed as it finishes (`markdown(rows)`: the table); the rows."""
    rows = []
    for label, spec in specs:
        rows.append({**run_worker(script, spec, timeout), "model": label})
        print(markdown(rows[-1:])[2], flush=True)
    return rows


def progress():
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True))
