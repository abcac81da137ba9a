"""`torq-sweep`: models x hardware variants x tiling strategies, compiled and simulated, in one table.

    torq-sweep --model mlp:batch=2,features=64,hidden=256 --model cnn:size=16 --model net.mlir \\
        --vary lram_kb=64,128,256,512 --vary slices=1,2 --strategies default,seed \\
        --out sweep/ [--jobs N | --ray=auto | --ray=ADDRESS] [--timeout SECONDS]

Contract:
- Models: a sample name `samples/run_model.py` builds (`cnn`, `mlp`, `mobilenet_v2`, ...) with
  `name:key=value,...` builder arguments (`mobilenet_v2:size=64`), or a `.mlir`/`.mlirbc`/`.onnx`
  file. Each is exported (torch) or imported (ONNX) once, in this process; its MLIR and example
  inputs travel to the workers with each point (Ray: put once in the object store). A file's
  inputs are seeded random arrays of its entry function's signature (dynamic dims as 1).
- Hardware: every `--hw` base spec (`--torq-hw` syntax, default SL2610) crossed with every
  `--vary KEY=V1,V2,...` axis (any `TorqHw` field: lram_kb, slices, dma_bytes_per_cycle,
  clock_mhz, ...); strategies are `--torq-super-tiling-strategy` values.
- Each point is one `torq.compile` + one call on the simulator, in a worker: a local process
  pool (`--jobs`, default one per core) or Ray tasks (`--ray`; `pip install iree-torq[ray]`).
  A point that fails (bad spec, compile or run error, dead worker) is a row with its error.
- `--timeout S`: a point still running S seconds after it started is a failed row whose error
  names the timeout, and the sweep goes on. Locally its worker process is killed (at once, even
  inside IREE's native code) and replaced; a worker's imports happen before its clock starts. On
  Ray the timer runs inside the task (SIGALRM in the worker's main thread): a point in a long
  native call stops when that call returns.
- Row figures, summed over the Torq dispatches of the call (`last_stats`): simulated cycles,
  latency in us at the point's clock, DDR bytes (DMA in + out) and their ratio to the
  compulsory bytes, the largest LRAM peak and the budget, the NPU share of MACs and the
  count of host dispatches (compile report); `pareto` marks the points no other point of
  the same model beats on both latency and LRAM size.
- Writes `sweep.csv`, `sweep.json`, `latency_vs_lram.png` and `pareto.png` into `--out`.
"""

from __future__ import annotations

import argparse
import csv
import io
import itertools
import json
import os
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np

STRATEGIES = ("default", "traffic", "seed")
FIELDS = ["model", "hw", "lram_kb", "slices", "dma_bytes_per_cycle", "clock_mhz", "strategy", "status", "error",
          "compile_s", "cycles", "latency_us", "ddr_bytes", "traffic_ratio", "lram_peak_bytes",
          "lram_budget_bytes", "npu_mac_share", "host_dispatches", "pareto"]
_FILE_SUFFIXES = (".mlir", ".mlirbc", ".onnx")
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class SweepError(Exception):
    """A user error before the sweep starts (bad model, missing Ray): one line, no traceback."""


@dataclass
class ModelSource:
    """One model, exported once: its MLIR (text or bytecode) and the inputs of its entry function."""

    label: str
    mlir: str | bytes
    inputs: list[np.ndarray] | None  # None: random inputs from the compiled signature


def _parse_value(text: str) -> int | float | str:
    for typ in (int, float):
        try:
            return typ(text)
        except ValueError:
            pass
    return text


def _sample_source(spec: str) -> ModelSource:
    """A samples/run_model.py model, `name[:key=value,...]`, exported with iree-turbine."""
    name, _, args = spec.partition(":")
    kwargs = {}
    for item in filter(None, args.split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            raise SweepError(f"bad model argument '{item}' in '{spec}' (expected key=value)")
        kwargs[key.strip()] = _parse_value(value.strip())
    samples = os.path.join(_ROOT, "samples")
    if not os.path.isfile(os.path.join(samples, "run_model.py")):
        raise SweepError(f"model '{name}': sample models need the source tree's samples/ (not found at {samples})")
    if samples not in sys.path:  # as build_tools/benchmarks/common.py reaches the samples
        sys.path.insert(0, samples)
    from run_model import build, export_mlir

    try:
        model, x, _ = build(name, **kwargs)
    except SystemExit as e:  # run_model's unknown-model message
        raise SweepError(str(e).replace("run_model: error: ", "")) from None
    except TypeError as e:
        raise SweepError(f"model '{spec}': {e}") from None
    return ModelSource(spec, export_mlir(model, x), [x.numpy()])


def load_model(spec: str) -> ModelSource:
    """A sample name or a model file, as MLIR and inputs (a `SweepError` when it cannot be read)."""
    if not spec.endswith(_FILE_SUFFIXES):
        return _sample_source(spec)
    if not os.path.isfile(spec):
        raise SweepError(f"cannot read model '{spec}': no such file")
    with open(spec, "rb") as f:
        data = f.read()
    if spec.endswith(".onnx"):
        from torq.compiler.ir_utils import CompileError
        from torq.compiler.onnx_import import read_onnx_source

        try:
            data, _ = read_onnx_source(data, spec, spec)
        except CompileError as e:
            raise SweepError(str(e)) from None
    return ModelSource(spec, data, None)


def hw_specs(bases: Sequence[str], axes: Sequence[str]) -> list[str]:
    """Every base spec crossed with every `KEY=V1,V2` axis, as `--torq-hw` texts (not validated
    here: a bad one becomes its points' error rows)."""
    values = []
    for axis in axes:
        key, eq, vals = axis.partition("=")
        if not eq or not key.strip() or not vals.strip():
            raise SweepError(f"bad --vary '{axis}' (expected KEY=V1,V2,... with KEY a TorqHw field)")
        values.append([f"{key.strip()}={v.strip()}" for v in vals.split(",") if v.strip()])
    specs = []
    for base in bases:
        for combo in itertools.product(*values):
            sep = "," if ":" in base else ":"
            specs.append(base + (sep + ",".join(combo) if combo else ""))
    return specs


def _random_inputs(module: Any) -> list[np.ndarray]:
    names = module.function_names
    sig = module.signature("main" if "main" in names or len(names) != 1 else names[0])
    if sig.inputs is None or any(s is None or s.element is None for s in sig.inputs):
        raise ValueError("the entry function's input types are unknown: cannot make inputs for it")
    rng = np.random.default_rng(0)
    return [rng.standard_normal([d or 1 for d in s.shape]).astype(s.element.dtype) for s in sig.inputs]


def point_figures(cm: Any, stats: list[dict]) -> dict:
    """A compiled module's row figures from the per-dispatch stats of one call."""
    torq_stats = [s for s in stats if s.get("executor", "torq") == "torq"]
    cycles = sum(s["cycles"] for s in torq_stats)
    ddr = sum(s["dma_bytes_in"] + s["dma_bytes_out"] for s in torq_stats)
    compulsory = sum(s["compulsory_bytes"] for s in torq_stats)
    return {"cycles": cycles, "latency_us": cycles / cm.hw.clock_mhz, "ddr_bytes": ddr,
            "traffic_ratio": ddr / compulsory if compulsory else None,
            "lram_peak_bytes": max((s["lram_peak_bytes"] for s in torq_stats), default=0),
            "lram_budget_bytes": cm.hw.available_lram_bytes, "npu_mac_share": cm.report.npu_mac_share,
            "host_dispatches": sum(d.executor == "host" for d in cm.report.dispatches)}


def run_point(model: ModelSource, hw: str, strategy: str, flags: Sequence[str] = ()) -> dict:
    """Compile and simulate one point; its row (errors as `status` "error" with the message)."""
    import torq
    from torq.contract.hw import parse_hw_spec

    row: dict = {"model": model.label, "hw": hw, "strategy": strategy, "status": "ok", "error": ""}
    t0 = time.perf_counter()
    try:
        parsed = parse_hw_spec(hw)
        row.update(lram_kb=parsed.lram_kb, slices=parsed.slices, dma_bytes_per_cycle=parsed.dma_bytes_per_cycle,
                   clock_mhz=parsed.clock_mhz)
        cm = torq.compile(model.mlir, hw=parsed, remarks=io.StringIO(),
                          flags=[f"--torq-super-tiling-strategy={strategy}", *flags])
        row["compile_s"] = round(time.perf_counter() - t0, 3)
        cm(*(model.inputs if model.inputs is not None else _random_inputs(cm.module)))
        row.update(point_figures(cm, list(cm.last_stats)))
    except Exception as e:  # a failing point is a row, not the end of the sweep
        row.update(status="error", error=" ".join(f"{type(e).__name__}: {e}".split())[:500])
    return row


def _error_row(model: ModelSource, hw: str, strategy: str, e: BaseException) -> dict:
    return {"model": model.label, "hw": hw, "strategy": strategy, "status": "error",
            "error": " ".join(f"worker failed: {type(e).__name__}: {e}".split())[:500]}


def _timeout_row(model: ModelSource, hw: str, strategy: str, timeout: float) -> dict:
    return {"model": model.label, "hw": hw, "strategy": strategy, "status": "error",
            "error": f"timed out: still running after --timeout {timeout:g} s"}


Point = tuple[int, str, str]  # (model index, hw spec, strategy)


def _pool_worker(conn: Any) -> None:
    """A local worker process: imports the compiler, says it is ready (None), then runs the
    points the parent sends, one row back for each, until it gets None."""
    # Its own process group, so that killing it takes its dispatch-compile processes along.
    os.setpgrp()
    import torq.compile_api  # noqa: F401  (before the first point's clock starts)

    conn.send(None)
    while (task := conn.recv()) is not None:
        conn.send(run_point(*task))


@dataclass
class _Worker:
    proc: Any
    conn: Any
    ready: bool = False
    point: int | None = None  # the index of the point it runs
    deadline: float = float("inf")


class _LocalPool:
    """Spawned worker processes (the parent holds torch's threads), one point at a time each,
    so that a point past its timeout, or a dead worker, costs that worker alone (replaced)."""

    def __init__(self, models: list[ModelSource], points: list[Point], flags: Sequence[str], jobs: int,
                 timeout: float | None, progress: Callable[[dict], None]):
        import multiprocessing

        self.ctx = multiprocessing.get_context("spawn")
        self.models, self.points, self.flags, self.timeout, self.progress = models, points, flags, timeout, progress
        self.todo = deque(range(len(points)))
        self.rows: list[dict] = [{}] * len(points)
        self.workers = [self._start() for _ in range(min(jobs, len(points)))]

    def _start(self) -> _Worker:
        parent, child = self.ctx.Pipe()
        # Not a daemon: torq.compile starts its own worker processes (--torq-jobs).
        proc = self.ctx.Process(target=_pool_worker, args=(child,))
        proc.start()
        child.close()
        return _Worker(proc, parent)

    def _finish(self, w: _Worker, row: dict) -> None:
        self.rows[w.point] = row
        self.progress(row)
        w.point, w.deadline = None, float("inf")

    @staticmethod
    def _kill(w: _Worker) -> None:
        try:
            os.killpg(w.proc.pid, signal.SIGKILL)  # the worker and the processes it started
        except (ProcessLookupError, PermissionError):  # gone, or not yet its own group leader
            w.proc.kill()
        w.proc.join()

    def _retire(self, w: _Worker) -> None:
        """Kills a worker (timed out or dead); a fresh one takes its place while points remain."""
        self._kill(w)
        w.conn.close()
        self.workers.remove(w)
        if self.todo:
            self.workers.append(self._start())

    def _receive(self, w: _Worker) -> None:
        try:
            row = w.conn.recv()
        except (EOFError, OSError) as e:  # the worker died (or its row did not pickle)
            w.proc.join(5)
            if not w.ready:  # its imports failed: every worker would fail the same way
                self._kill(w)
                raise SweepError(f"a worker process failed to start (exit code {w.proc.exitcode})") from None
            if w.point is not None:
                m, hw, s = self.points[w.point]
                self._finish(w, _error_row(self.models[m], hw, s, RuntimeError(
                    f"worker process exited (code {w.proc.exitcode}) [{type(e).__name__}]")))
            self._retire(w)
            return
        if row is None:
            w.ready = True
        else:
            self._finish(w, row)

    def _expire(self, now: float) -> None:
        for w in [w for w in self.workers if w.point is not None and now >= w.deadline]:
            m, hw, s = self.points[w.point]
            self._finish(w, _timeout_row(self.models[m], hw, s, self.timeout))
            self._retire(w)

    def _assign(self) -> None:
        for w in self.workers:
            if w.ready and w.point is None and self.todo:
                w.point = self.todo.popleft()
                m, hw, s = self.points[w.point]
                w.conn.send((self.models[m], hw, s, self.flags))
                w.deadline = time.monotonic() + self.timeout if self.timeout else float("inf")

    def run(self) -> list[dict]:
        from multiprocessing.connection import wait

        try:
            while self.todo or any(w.point is not None for w in self.workers):
                self._assign()
                deadline = min((w.deadline for w in self.workers), default=float("inf"))
                left = None if deadline == float("inf") else max(0.0, deadline - time.monotonic())
                ready = wait([w.conn for w in self.workers], timeout=left)
                for w in [w for w in self.workers if w.conn in ready]:
                    self._receive(w)
                self._expire(time.monotonic())
        finally:
            for w in self.workers:
                self._kill(w)
        return self.rows


def run_local(models: list[ModelSource], points: list[Point], flags: Sequence[str], jobs: int,
              progress: Callable[[dict], None], timeout: float | None = None) -> list[dict]:
    """The points on a local pool of `jobs` worker processes (see _LocalPool)."""
    return _LocalPool(models, points, flags, jobs, timeout, progress).run()


class _PointTimeout(BaseException):
    """Raised by the timer inside a point (BaseException: run_point's `except Exception` lets it by)."""


def run_point_timed(model: ModelSource, hw: str, strategy: str, flags: Sequence[str] = (),
                    timeout: float | None = None) -> dict:
    """run_point under a SIGALRM timer (in a Ray task; no timer where signals cannot be set:
    not the process's main thread)."""
    import threading

    if not timeout or threading.current_thread() is not threading.main_thread():
        return run_point(model, hw, strategy, flags)
    fired = []

    def raise_timeout(signum: int, frame: Any) -> None:
        fired.append(True)
        raise _PointTimeout()

    previous = signal.signal(signal.SIGALRM, raise_timeout)
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            row = run_point(model, hw, strategy, flags)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _PointTimeout:
        pass  # `fired` says so
    finally:
        signal.signal(signal.SIGALRM, previous)
    # Python wraps an exception raised while a class body is built (an import under way)
    # in RuntimeError ("Error calling __set_name__"), which run_point reports as an error:
    # a timer that fired is a timeout whatever became of its exception.
    return _timeout_row(model, hw, strategy, timeout) if fired else row


def run_ray(models: list[ModelSource], points: list[Point], flags: Sequence[str], address: str,
            progress: Callable[[dict], None], timeout: float | None = None) -> list[dict]:
    """The points as Ray tasks; each model is put in the object store once."""
    try:
        import ray
    except ImportError:
        raise SweepError("--ray needs Ray: pip install 'iree-torq[ray]'") from None
    if not ray.is_initialized():
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
    task = ray.remote(num_cpus=1)(run_point_timed)
    refs = [ray.put(m) for m in models]
    pending = [task.remote(refs[m], hw, s, flags, timeout) for m, hw, s in points]
    rows = []
    for ref, (m, hw, s) in zip(pending, points):
        try:
            rows.append(ray.get(ref))
        except Exception as e:  # a lost worker or node is this point's error
            rows.append(_error_row(models[m], hw, s, e))
        progress(rows[-1])
    return rows


def mark_pareto(rows: list[dict]) -> None:
    """`pareto`: no other ok point of the same model has lower-or-equal latency and LRAM, one lower."""
    ok = [r for r in rows if r.get("status") == "ok"]
    ok_ids = {id(r) for r in ok}
    for r in rows:
        r["pareto"] = id(r) in ok_ids and not any(
            o["model"] == r["model"] and o["latency_us"] <= r["latency_us"] and o["lram_kb"] <= r["lram_kb"]
            and (o["latency_us"], o["lram_kb"]) != (r["latency_us"], r["lram_kb"]) for o in ok)


def write_tables(rows: list[dict], out: str) -> None:
    with open(os.path.join(out, "sweep.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows({k: r.get(k, "") for k in FIELDS} for r in rows)
    with open(os.path.join(out, "sweep.json"), "w") as f:
        json.dump([{k: r.get(k) for k in FIELDS} for r in rows], f, indent=1)


def _series_label(row: dict) -> str:
    """A line of the LRAM plot: the strategy and the hardware apart from its LRAM size."""
    rest = [kv for kv in row["hw"].partition(":")[2].split(",") if kv and not kv.startswith("lram_kb=")]
    return row["strategy"] + (" " + ",".join(rest) if rest else "")


def write_plots(rows: list[dict], out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r.get("status") == "ok"]
    models = list(dict.fromkeys(r["model"] for r in rows))
    for name, draw in (("latency_vs_lram.png", _draw_lines), ("pareto.png", _draw_pareto)):
        fig, axes = plt.subplots(1, max(1, len(models)), figsize=(5 * max(1, len(models)), 4), squeeze=False)
        for ax, model in zip(axes[0], models):
            draw(ax, [r for r in ok if r["model"] == model])
            ax.set(title=model, xlabel="LRAM (KiB)", ylabel="latency (us)")
            ax.set_xscale("log", base=2)
        fig.tight_layout()
        fig.savefig(os.path.join(out, name), dpi=100)
        plt.close(fig)


def _draw_lines(ax: Any, rows: list[dict]) -> None:
    for label in dict.fromkeys(map(_series_label, rows)):
        pts = sorted((r["lram_kb"], r["latency_us"]) for r in rows if _series_label(r) == label)
        ax.plot(*zip(*pts), marker="o", label=label)
    if rows:
        ax.legend(fontsize=7)


def _draw_pareto(ax: Any, rows: list[dict]) -> None:
    ax.scatter([r["lram_kb"] for r in rows], [r["latency_us"] for r in rows], c="lightgray", label="points")
    front = sorted((r["lram_kb"], r["latency_us"]) for r in rows if r["pareto"])
    if front:
        ax.step(*zip(*front), where="post", color="C3", marker="o", label="Pareto front")
        ax.legend(fontsize=7)


def sweep(model_specs: Iterable[str], hw: Sequence[str], strategies: Sequence[str], out: str | None = None,
          flags: Sequence[str] = (), jobs: int | None = None, ray_address: str | None = None,
          progress: Callable[[dict], None] = lambda row: None, timeout: float | None = None) -> list[dict]:
    """Runs the whole sweep; its rows (model-major order), also written to `out` when given;
    `timeout`: seconds a point may run (None: no limit)."""
    models = [load_model(spec) for spec in model_specs]
    points = [(m, h, s) for m in range(len(models)) for h in hw for s in strategies]
    if ray_address:
        rows = run_ray(models, points, flags, ray_address, progress, timeout)
    else:
        jobs = max(1, min(jobs or os.cpu_count() or 1, len(points)))
        rows = run_local(models, points, flags, jobs, progress, timeout)
    mark_pareto(rows)
    if out:
        os.makedirs(out, exist_ok=True)
        write_tables(rows, out)
        write_plots(rows, out)
    return rows


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not the usage block
        self.exit(2, f"{self.prog}: error: {message}\n")


def _comma_list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _strategies(text: str) -> list[str]:
    values = _comma_list(text)
    bad = [v for v in values if v not in STRATEGIES]
    if bad or not values:
        raise argparse.ArgumentTypeError(f"unknown strategy '{','.join(bad)}' (one of {', '.join(STRATEGIES)})")
    return values


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = _Parser(prog="torq-sweep", description=__doc__.splitlines()[0])
    p.add_argument("--model", action="append", required=True, metavar="NAME[:k=v,...]|FILE",
                   help="sample model (cnn, mlp, mobilenet_v2:size=64, ...) or .mlir/.onnx file; repeatable")
    p.add_argument("--hw", action="append", metavar="SPEC", help="base --torq-hw spec (repeatable; default SL2610)")
    p.add_argument("--vary", action="append", default=[], metavar="KEY=V1,V2",
                   help="a TorqHw field's values, crossed with the others (e.g. lram_kb=64,128,256)")
    p.add_argument("--strategies", type=_strategies, default=["default"], help=f"comma list of {', '.join(STRATEGIES)}")
    p.add_argument("--flag", action="append", default=[], help="extra torq.compile flag (repeatable)")
    p.add_argument("--out", default="sweep", help="directory for sweep.csv/json and the plots (default ./sweep)")
    p.add_argument("-j", "--jobs", type=int, help="local worker processes (default: one per core)")
    p.add_argument("--ray", metavar="auto|ADDRESS", help="run on a Ray cluster instead of the process pool")
    p.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="per point: one still running after SECONDS is a failed row, the sweep goes on")
    args = p.parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        p.error(f"--jobs must be at least 1, got {args.jobs}")
    if args.timeout is not None and not args.timeout > 0:
        p.error(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        specs = hw_specs(args.hw or ["SL2610"], args.vary)
        print(f"torq-sweep: {len(args.model)} model(s) x {len(specs)} hardware x {len(args.strategies)} "
              f"strategies", file=sys.stderr)
        rows = sweep(args.model, specs, args.strategies, args.out, args.flag, args.jobs, args.ray,
                     progress=lambda r: print(f"  {r['model']} {r['hw']} {r['strategy']}: "
                                              f"{r.get('latency_us', r['error'][:100])}", file=sys.stderr),
                     timeout=args.timeout)
    except SweepError as e:
        print(f"torq-sweep: error: {e}", file=sys.stderr)
        return 2
    failed = sum(r["status"] != "ok" for r in rows)
    print(f"torq-sweep: {len(rows)} points ({failed} failed) -> {args.out}/sweep.csv, sweep.json, "
          "latency_vs_lram.png, pareto.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
