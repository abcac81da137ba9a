"""Compile extracted dispatch functions: once per distinct body, and in parallel.

After extraction a dispatch function is self-contained (the flow-level
constants it reads ride on its arguments, see dispatch_extraction), so its
compile is a function of its IR, the pipeline, the pass options and the
package versions, nothing else. `DispatchCompiler.compile_all` uses that:

- **A dispatch compiles once.** Dispatches whose compile is the same (the
  same function text, and constants that answer what the compile read of them
  alike: compiler/dispatch_cache.py) compile once per model, and not again
  while the on-disk cache holds them. A model's layers are the same text with
  other weights: one of each compiles first, then only those that read
  weights of their own (a static int8 model's rescales). A hit equals a
  fresh compile byte for byte (tests/e2e/test_dispatch_cache.py), and
  identical dispatches embed one constant in the .vmfb.
- **Distinct dispatches compile in parallel** (`jobs` > 1): the functions go
  as bytecode to `jobs` - 1 worker processes (`dispatch_worker`, each with its own
  MLIR context, started for one compile), which run the same pipeline and send back the same
  `Compiled` record; the compiling process takes tasks too (it has already imported IREE's
  bindings, which a worker takes about 0.8 s to do), and when IREE's front end has to run
  the driver starts the workers beside it (`StartedWorkers`). The output is identical to
  `jobs=1` (same functions, same passes).

A compile that `--torq-print-ir-after-all` or a stop phase watches runs in the
compiling process (the target calls `compile_in_process` itself).
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib
import math
import os
import pickle
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np
from iree.compiler import ir

from .constant_args import ConstantArgs
from .dispatch_cache import Compiled, DispatchCache, bytecode, text_key
from .ir_text import structure_text
from .ir_utils import CompileError, static_shape, walk_ops
from .nss_ir import program_meta
from .passes import PassOptions, lower_requantization
from .patterns import Unsupported
from .pipeline import run_passes

# Fewer distinct dispatches than this compile in this process: starting a worker
# (a Python with IREE's bindings) costs about as much as compiling a few small ones.
MIN_PARALLEL = 4


@dataclass
class Refused:
    """The pipeline refused the dispatch: `unsupported` (no NPU form, host by design) or a
    failed Torq compile (CompileError); `internal` holds the traceback of a compiler bug."""
    message: str
    unsupported: bool
    internal: str = ""


class WorkerError(Exception):
    """A bug in the compiler met in a worker process; `details` is the worker's traceback."""

    def __init__(self, message: str, details: str):
        super().__init__(message)
        self.details = details


def compile_in_process(module: ir.Module, pipeline: list[str], options: PassOptions,
                       print_after_all=None, catch_bugs: bool = False) -> Compiled | Refused:
    """Runs `pipeline` on the one-function `module`: the executable, or why the pipeline
    refused it. A compiler bug propagates, unless `catch_bugs` (a worker: the parent
    reports it as an internal error with the worker's traceback)."""
    try:
        with _single_threaded(module.context):
            reports = run_passes(module, pipeline, options, print_after_all)
        return _compiled(module.body.operations[0].operation, reports)
    except Unsupported as e:
        return Refused(str(e), unsupported=True)
    except CompileError as e:
        return Refused(str(e), unsupported=False)
    except Exception as e:
        if not catch_bugs:
            raise
        return Refused(f"{type(e).__name__}: {e}", unsupported=False, internal=traceback.format_exc())


@contextmanager
def _single_threaded(ctx: ir.Context) -> Iterator[None]:
    """MLIR's thread pool off while the Torq pipeline runs in this process (the compiling
    process's context has it on for IREE): super tiling runs small pass pipelines on
    one-function scratch modules thousands of times, where handing them to the pool costs
    more than it saves (audio encoder dispatches 4, 5, 6: 4.1 s with the pool, 3.3 s
    without), and in a parallel compile the pool's threads take the core a worker runs on."""
    threaded = ctx.get_num_threads() > 1
    if threaded:
        ctx.enable_multithreading(False)
    try:
        yield
    finally:
        if threaded:
            ctx.enable_multithreading(True)


def _compiled(func: ir.Operation, reports: dict) -> Compiled:
    blob = np.array(ir.DenseElementsAttr(func.attributes["torq.executable"]), dtype=np.int8).tobytes()
    meta = program_meta(func)
    ftype = ir.FunctionType(ir.TypeAttr(func.attributes["torq.original_type"]).value)
    results = [str(t) for t in ftype.results]
    if "torq.host_result_types" in func.attributes:  # f32 where the NPU computes bf16
        results = [str(ir.TypeAttr(t).value) for t in ir.ArrayAttr(func.attributes["torq.host_result_types"])]
    arg_shapes = [static_shape(t) for t in ftype.inputs]
    requant = reports.get(lower_requantization.NAME) or {}
    read = tuple(q for report in requant.values() for q in report.constants_read)
    return Compiled(blob, meta["tiles"], meta["lram_peak"], results, arg_shapes, reports, read)


def same_structure(modules: list[ir.Module]) -> list[list[int]]:
    """The modules' numbers, grouped by `ir_text.structure_text` (the same ops and shapes,
    any weights: a model's layers), in order: one process compiles a group one after the
    other, so super tiling searches its tilings once (tiling/search.py keeps its choices)."""
    groups: dict[str, list[int]] = {}
    for k, m in enumerate(modules):
        groups.setdefault(hashlib.sha256(structure_text(m.operation).encode()).hexdigest(), []).append(k)
    return list(groups.values())


# --- worker processes ---------------------------------------------------------------

_worker_context: ir.Context | None = None


def _compile_bytecode(data: bytes, pipeline: list[str], options: PassOptions) -> Compiled | Refused:
    """Worker entry point: parse the function in this worker's MLIR context and compile it.
    One context for the worker's life (one compile_all): a fresh one per task costs about
    0.2 s of warm-up each (ResNet-18 int8: 22.5 s of tasks in one context, 26.7 s in one each)."""
    global _worker_context
    if _worker_context is None:
        _worker_context = ir.Context()
        _worker_context.allow_unregistered_dialects = True
        _worker_context.enable_multithreading(False)  # the workers are the parallelism
    with _worker_context, ir.Location.unknown():
        return compile_in_process(ir.Module.parse(data), pipeline, options, catch_bugs=True)


def _start_worker(preload: tuple[str, ...] = ()) -> subprocess.Popen:
    # One thread each: n workers already use the n cores (numpy's BLAS would start a
    # thread per core in every worker and they would contend).
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "torq.compiler.dispatch_worker", *preload],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)


def keep_freed_memory() -> None:
    """Keeps the memory numpy frees for reuse in this process (glibc's malloc; elsewhere
    nothing). By default glibc maps every array above 128 KiB afresh and unmaps it when freed,
    and the fits' temporaries (millions of values each) are then page-faulted in on every
    allocation: about a sixth of a PT2E ResNet-50 compile. Only for processes that do nothing
    but compile (a dispatch worker, the command-line tools): the memory stays with the
    process until it exits."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, 1 << 30)
    mallopt(_M_TRIM_THRESHOLD, (1 << 31) - 1)


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameter numbers


# What a quantized model's dispatches import on first use (rescale_pairs' linear programs:
# 0.5 s, paid by every process that compiles a residual add), imported ahead while IREE's
# front end runs (`preload`).
QDQ_PRELOAD = ("scipy.optimize",)


def import_ahead(modules: tuple[str, ...]) -> None:
    """Imports `modules`; one that fails is left to the compile that needs it to report."""
    for m in modules:
        try:
            importlib.import_module(m)
        except ImportError:
            pass


def preload(modules: tuple[str, ...]) -> None:
    """`import_ahead(modules)` in this process on a background thread: IREE's front end, which
    runs meanwhile, holds no Python lock (a ctypes call), and an import of the same module
    on the compile's thread waits for this one (Python's import lock)."""
    if modules:
        threading.Thread(target=import_ahead, args=(modules,), daemon=True).start()


class StartedWorkers:
    """Worker processes started early, while IREE's front end runs (a worker spends about
    0.8 s importing IREE's bindings before it can take a task, and imports `preload` then),
    for the compile's `DispatchCompiler` to take; `close` ends those it did not take."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []
        self.preload: tuple[str, ...] = ()

    def start(self, n: int, preload: tuple[str, ...] = ()) -> None:
        self.preload = preload
        self.procs += [_start_worker(preload) for _ in range(n)]

    def take(self, n: int) -> list[subprocess.Popen]:
        """`n` workers: the started ones first, then new ones."""
        taken, self.procs = self.procs[:n], self.procs[n:]
        return taken + [_start_worker(self.preload) for _ in range(n - len(taken))]

    def close(self) -> None:
        """Ends the workers nobody took at once: they hold no task, and waiting for one still
        importing IREE's bindings to read its end of input would hold the compile up."""
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()
        self.procs = []


def _close(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        try:
            p.stdin.close()
        except OSError:
            pass
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()


class _WorkerPool:
    """dispatch_worker processes and this one; `run` hands each task to the next free one."""

    def __init__(self, procs: list[subprocess.Popen]):
        self.procs = procs

    def run(self, tasks: list[tuple], in_process, groups: list[list[int]],
            seconds: list[float]) -> list[Compiled | Refused]:
        """The outcome of each task (bytecode, pipeline, options); this process takes tasks too
        (`in_process(k)` compiles task k here: the workers' own start, an interpreter importing
        IREE's bindings, is about 0.8 s that this one has already paid). The tasks of one of
        `groups` (lists of task numbers) go to one process, one after the other."""
        results: list = [None] * len(tasks)
        # Longest group first (`seconds`: each task's `estimated_seconds`): one started last
        # would leave the other workers idle.
        pending = iter(sorted(groups, key=lambda g: -sum(seconds[k] for k in g)))
        lock = threading.Lock()
        failures: list[str] = []

        def next_group() -> list[int] | None:
            """The next group of tasks for a process to take; None when all are taken or one failed."""
            with lock:
                return None if failures else next(pending, None)

        def drive(proc: subprocess.Popen) -> None:
            for group in iter(next_group, None):
                for k in group:
                    try:
                        pickle.dump(tasks[k], proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
                        proc.stdin.flush()
                        results[k] = pickle.load(proc.stdout)
                    except (OSError, EOFError, pickle.UnpicklingError) as e:
                        failures.append(f"a dispatch compile worker died (exit code {proc.poll()}): {e}")
                        return

        threads = [threading.Thread(target=drive, args=(p,), daemon=True) for p in self.procs]
        for t in threads:
            t.start()
        try:
            for group in iter(next_group, None):
                for k in group:
                    results[k] = in_process(k)
        except BaseException:
            failures.append("stopped")  # a compiler bug here: the workers take no further task
            raise
        finally:
            for t in threads:
                t.join()
        if failures:
            raise WorkerError(failures[0], "")
        return results

    def close(self) -> None:
        _close(self.procs)


# A dispatch's compile seconds per bytecode byte (its constants: the requantization fit is
# per channel), per element of its largest tensor (super tiling prices programs tile by
# tile) and per op: least squares over the 204 dispatches of ten benchmark models
# (samples/models.py: the bf16 ones, int8 bert and resnet18; -j 1). Ordered by bytes alone,
# the audio encoder's attention scores (6 x 1500 x 1500, no weights, the longest at 1.35 s)
# started last: 3.63 s of the two processes' work instead of 3.27.
_SECONDS_PER_BYTE, _SECONDS_PER_ELEMENT, _SECONDS_PER_OP = 5.8e-7, 7.5e-8, 9.6e-3


def estimated_seconds(module: ir.Module, data: bytes) -> float:
    """What compiling the dispatch `module` (its bytecode `data`) should take, for ordering."""
    ops, largest = 0, 0
    for op in walk_ops(module.operation):
        ops += 1
        for r in op.results:
            if isinstance(r.type, ir.RankedTensorType) and ir.RankedTensorType(r.type).has_static_shape:
                largest = max(largest, math.prod(static_shape(r.type)))
    return len(data) * _SECONDS_PER_BYTE + largest * _SECONDS_PER_ELEMENT + ops * _SECONDS_PER_OP


def default_jobs() -> int:
    """$TORQ_JOBS if set (a positive number), else one per core this process may use."""
    env = os.environ.get("TORQ_JOBS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class DispatchCompiler:
    """Compiles the one-function modules of a model's dispatches (see the module docstring)."""

    def __init__(self, options: PassOptions, pipeline: list[str], jobs: int = 1, cache: DispatchCache | None = None,
                 started: StartedWorkers | None = None):
        self.options, self.pipeline, self.jobs, self.cache = options, pipeline, jobs, cache
        self.started = started  # workers started ahead, taken by the parallel compile

    def compile_all(self, items: list[tuple[str, ir.Module]]) -> list[Compiled | Refused]:
        """One outcome per (dispatch name, module), in order. With a cache, a dispatch whose
        compile another's would repeat (the same text, its constants answering that compile's
        questions alike: compiler/dispatch_cache.py) compiles once: first one function per text
        key, then those whose constants the stored entries do not answer for."""
        modules = [m for _, m in items]
        if self.cache is None:
            with self._runner(len(modules)) as run:
                return run(modules, list(range(len(modules))), [None] * len(modules))
        data = [bytecode(m) for m in modules]  # the key hashes it and a worker parses it
        keys = [text_key(d, self.pipeline, self.options) for d in data]
        constants = [ConstantArgs(m.body.operations[0].operation) for m in modules]  # before a compile takes them
        outcomes: list[Compiled | Refused | None] = [None] * len(items)

        def missing(i: int) -> bool:
            """Looks item i up; whether the cache has no entry for it."""
            hit = self.cache.get(keys[i], constants[i].digest)
            outcomes[i] = replace(hit, cached=True) if hit is not None else None
            return hit is None

        def compile_each(todo: list[int]) -> None:
            for i, outcome in zip(todo, run(modules, todo, data)):
                outcomes[i] = outcome
                if isinstance(outcome, Compiled):
                    self.cache.put(keys[i], constants[i].digest(outcome.constants_read), outcome)

        missed = [i for i in range(len(items)) if missing(i)]
        with self._runner(len(missed)) as run:
            first: dict[str, int] = {}
            compile_each([i for i in missed if first.setdefault(keys[i], i) == i])
            rest = [i for i in missed if outcomes[i] is None and missing(i)]
            if not rest:
                return outcomes
            # The rest read constants of their own: one compile per text and all constants'
            # values, a first-round function's included (so a refusal is shared that way too).
            rest_keys = {keys[i] for i in rest}
            same = lambda i: (keys[i], constants[i].values_digest())  # noqa: E731
            owner = {same(i): i for i in first.values() if keys[i] in rest_keys}
            todo = [i for i in rest if owner.setdefault(same(i), i) == i]
            compile_each(todo)
            for i in set(rest) - set(todo):
                done = outcomes[owner[same(i)]]
                outcomes[i] = replace(done, cached=True) if isinstance(done, Compiled) else done
        return outcomes

    @contextmanager
    def _runner(self, n: int):
        """A function compiling the modules numbered `todo` (their bytecode in `data`, or None)
        in this process, or, when the compile has `n` >= `MIN_PARALLEL` to do in all, with
        worker processes too (at most `n` processes in all, started on first use and kept
        for the compile's later calls)."""
        pool: _WorkerPool | None = None

        def run(modules: list[ir.Module], todo: list[int], data: list[bytes | None]) -> list[Compiled | Refused]:
            nonlocal pool
            if self.jobs <= 1 or n < MIN_PARALLEL or len(todo) < 2:
                return [compile_in_process(modules[k], self.pipeline, self.options) for k in todo]
            if pool is None:
                pool = _WorkerPool((self.started or StartedWorkers()).take(min(self.jobs, n) - 1))  # and this process
            chosen = [modules[k] for k in todo]
            tasks = [(data[k] if data[k] is not None else bytecode(modules[k]), self.pipeline, self.options)
                     for k in todo]
            return pool.run(tasks, lambda j: compile_in_process(chosen[j], self.pipeline, self.options),
                            same_structure(chosen), [estimated_seconds(m, t[0]) for m, t in zip(chosen, tasks)])

        try:
            yield run
        finally:
            if pool is not None:
                pool.close()
