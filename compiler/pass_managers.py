"""Pass pipelines and transform scripts parsed once per pipeline run, not once per use.

Super tiling cleans up every candidate tiling it lowers with the same few pass
pipelines and tiles it with transform scripts that repeat. A PassManager parsed
afresh initialises its passes again on each run: canonicalize gathers the
canonicalization patterns of every loaded dialect, which took 3-4x as long as
canonicalizing a tile (audio encoder, 400 cleanups: 1.17 s parsed each time,
0.27 s reused; the same IR out). A pass manager and a parsed module keep their
MLIR context alive, so the cache is scoped (`reuse`, entered by
`pipeline.run_passes` for a dispatch's whole pipeline) rather than global.
Outside a scope every call parses afresh. `reused` keeps other values the same way
(decoded epilogues, keyed by their uniqued attribute)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

from iree.compiler import ir, passmanager

_scope: ContextVar[dict | None] = ContextVar("torq_pass_managers", default=None)
_T = TypeVar("_T")


@contextmanager
def reuse() -> Iterator[None]:
    """Within this block (nested blocks share the outer one's cache), `run_pipeline` and
    `parse_script` reuse what they parsed."""
    token = _scope.set({}) if _scope.get() is None else None
    try:
        yield
    finally:
        if token is not None:
            _scope.reset(token)


def run_pipeline(text: str, op: ir.Operation) -> None:
    """Runs the textual pass pipeline `text` on `op` (raises as PassManager.parse / run do)."""
    cache = _scope.get()
    if cache is None:
        passmanager.PassManager.parse(text).run(op)
        return
    key = ("pipeline", text, op.context)
    pm = cache.get(key)
    if pm is None:
        pm = passmanager.PassManager.parse(text)
    try:
        pm.run(op)
    except Exception:
        cache.pop(key, None)  # a failed run may leave the pass manager in any state
        raise
    cache[key] = pm


def parse_script(text: str) -> ir.Module:
    """The module `text` parsed in the current context: a transform script that is only read
    (the interpreter does not change the script it applies), so the same object may be
    handed out again within a `reuse` scope. Never mutate it."""
    cache = _scope.get()
    if cache is None:
        return ir.Module.parse(text)
    key = ("script", text, ir.Context.current)
    if key not in cache:
        cache[key] = ir.Module.parse(text)
    return cache[key]


def reused(key: Hashable, make: Callable[[], _T]) -> _T:
    """`make()`, made once per `reuse` scope for `key` (each call outside one). The value is
    shared: never mutate it."""
    cache = _scope.get()
    if cache is None:
        return make()
    key = ("value", key)
    if key not in cache:
        cache[key] = make()
    return cache[key]
