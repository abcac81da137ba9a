"""`torch.compile(model, backend="torq")`: dynamo's graphs compiled for Torq, run on the simulator.

Contract:
- Registered under the `torch_dynamo_backends` entry point group as `torq`
  (pyproject.toml), so `torch.compile(model, backend="torq")` finds it as it
  finds iree-turbine's `turbine_cpu`. `torq_backend` is also callable as
  `backend=torq_backend`.
- Options (`torch.compile(..., options={...})`): `"hw"`, a hardware spec
  such as "SL2610:lram_kb=256" or a `TorqHw`; `"flags"`, torq-compile /
  IREE flags (e.g. ["--torq-super-tiling-strategy=traffic"]). Unknown keys or
  bad values raise `TorqCompileError` when dynamo hands over its first graph
  (dynamo wraps it in its BackendCompilerFailed). `mode` is ignored.
- Each graph dynamo hands over (a graph break splits a forward into several;
  the Python between them runs in eager torch, as dynamo does for every
  backend) is compiled at its first call for the concrete input shapes and
  dtypes of that call: the module's parameters and buffers become constants
  of the program (as `torq.compile` makes them for an nn.Module) and sizes
  dynamo made symbolic are fixed to the call's values. Compiled programs are
  kept per graph, keyed by shapes, dtypes, sizes and the identity and version
  of every parameter and buffer (an in-place weight update compiles anew),
  and across graphs keyed by the exported program's MLIR and the options, so
  dynamo's recompile of a graph with dynamic sizes reuses the programs of
  the shapes already seen. `STATS` counts graphs, exports and compiles.
- Inference only: results are new torch tensors (no autograd history). A
  graph that mutates a buffer or input (a module left in training mode) or
  fails to compile raises `TorqCompileError` at its first call. A graph that
  returns a size or other non-tensor value runs in eager torch, with a warning.
"""

from __future__ import annotations

import hashlib
import re
import warnings
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from torq.compile_api import CompiledModule, TorqCompileError
from torq.compile_api import compile as torq_compile
from torq.contract.hw import TorqHw

__all__ = ["torq_backend", "BackendOptions", "BackendStats", "STATS", "clear_cache"]

_OPTION_KEYS = ("hw", "flags")
# How many compiled programs the cross-graph cache, and each graph, keep (least recently used goes first).
_PROGRAM_CACHE_SIZE = 32
_GRAPH_CACHE_SIZE = 16


@dataclass(frozen=True)
class BackendOptions:
    """`options={...}` of torch.compile, validated."""

    hw: str | TorqHw | None = None
    flags: tuple[str, ...] = ()

    @staticmethod
    def parse(options: dict[str, Any] | None) -> BackendOptions:
        options = dict(options or {})
        unknown = sorted(set(options) - set(_OPTION_KEYS))
        if unknown:
            raise TorqCompileError(f"torq backend: unknown option {', '.join(map(repr, unknown))} "
                                   f"(options: {', '.join(_OPTION_KEYS)})")
        hw = options.get("hw")
        if hw is not None and not isinstance(hw, (str, TorqHw)):
            raise TorqCompileError(f"torq backend: option 'hw' takes a spec string such as 'SL2610:lram_kb=256' "
                                   f"or a TorqHw, not {type(hw).__name__}")
        flags = options.get("flags", ())
        if isinstance(flags, str) or not all(isinstance(f, str) for f in flags):
            raise TorqCompileError("torq backend: option 'flags' takes a list of strings, e.g. "
                                   "['--torq-super-tiling-strategy=traffic']")
        parsed = BackendOptions(hw, tuple(flags))
        parsed.check()
        return parsed

    def check(self) -> None:
        """Raises TorqCompileError for a bad flag or hw spec now, not at the first compile."""
        from torq.compiler.driver import UsageError, _ListHw, parse_torq_flags
        from torq.contract.hw import parse_hw_spec

        try:
            parse_torq_flags(list(self.flags))
            if isinstance(self.hw, str):
                parse_hw_spec(self.hw)
        except (UsageError, _ListHw, ValueError) as e:
            raise TorqCompileError(f"torq backend: {e}") from None

    def cache_key(self) -> str:
        return repr((self.hw, self.flags))


@dataclass
class BackendStats:
    """What the backend did since the last `clear_cache()`: graphs dynamo handed over, graphs
    exported (one per new shape of a graph), Torq compiles (exports whose program was new) and
    calls served by an already compiled program."""

    graphs: int = 0
    exports: int = 0
    compiles: int = 0
    cached_calls: int = 0
    eager_graphs: int = 0
    last_module: CompiledModule | None = field(default=None, repr=False)


STATS = BackendStats()
# Compiled programs of every graph: (options, sha256 of the exported MLIR) -> module.
_PROGRAMS: OrderedDict[tuple[str, str], CompiledModule] = OrderedDict()


def clear_cache() -> None:
    """Forgets compiled programs and resets `STATS` (graphs dynamo already holds keep theirs)."""
    _PROGRAMS.clear()
    STATS.__init__()


# What each graph input is at run time: a tensor the caller passes, a parameter or buffer
# compiled in as a constant, or a size or other Python value fixed at compile time.
_INPUT, _CONSTANT, _VALUE = "input", "constant", "value"


def _input_kinds(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> list[tuple[str, str]]:
    """The kind of each placeholder and the name errors give it. Dynamo lifts a module's parameters
    and buffers into graph inputs (their source `L['self']._modules['bn']._buffers['running_mean']`,
    named `bn.running_mean` here); they are constants here."""
    kinds = []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, example in zip(placeholders, example_inputs):
        grapharg = node.meta.get("grapharg")
        source = grapharg.source.name if grapharg is not None and grapharg.source is not None else ""
        name = ".".join(re.findall(r"\['([^']*)'\]", source)[1:]) or node.name
        if isinstance(example, torch.nn.Parameter) or "._buffers[" in source:
            kinds.append((_CONSTANT, name))
        elif isinstance(example, torch.Tensor):
            kinds.append((_INPUT, name))
        else:
            kinds.append((_VALUE, name))
    return kinds


def _returns_only_tensors(gm: torch.fx.GraphModule) -> bool:
    output = next(n for n in gm.graph.nodes if n.op == "output")
    values = output.args[0] if isinstance(output.args[0], (tuple, list)) else (output.args[0],)
    return all(isinstance(v, torch.fx.Node) and isinstance(v.meta.get("example_value"), torch.Tensor)
               for v in values)


class _FrozenGraph(torch.nn.Module):
    """Dynamo's graph as a module of the caller's tensors only: parameters and buffers held as
    buffers (exported as constants), sizes and other values fixed."""

    def __init__(self, gm: torch.fx.GraphModule, kinds: Sequence[str], args: Sequence[Any]):
        super().__init__()
        self.graph_module = gm
        self._slots: list[tuple[str, Any]] = []  # per placeholder: (kind, input index / buffer name / value)
        n_inputs = 0
        for i, (kind, arg) in enumerate(zip(kinds, args)):
            if kind == _INPUT:
                self._slots.append((kind, n_inputs))
                n_inputs += 1
            elif kind == _CONSTANT:
                self.register_buffer(f"constant_{i}", arg.detach())
                self._slots.append((kind, f"constant_{i}"))
            else:
                self._slots.append((kind, arg))

    def forward(self, *inputs: torch.Tensor):
        args = [inputs[v] if kind == _INPUT else getattr(self, v) if kind == _CONSTANT else v
                for kind, v in self._slots]
        return self.graph_module(*args)


def _to_torch(array: Any) -> torch.Tensor:
    array = np.ascontiguousarray(array)
    if array.dtype.name == "bfloat16":  # ml_dtypes: torch reads it through its bits
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


class TorqGraph:
    """The callable the backend gives dynamo for one graph: compiles per concrete shape, runs on
    the simulator."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: BackendOptions):
        self.gm = gm
        self.options = options
        kinds_and_names = _input_kinds(gm, example_inputs)
        self.kinds = [kind for kind, _ in kinds_and_names]
        self.names = [name for _, name in kinds_and_names]  # of each placeholder, for errors
        # key -> (module, the constants it was compiled with): the key holds their ids, which a freed
        # tensor's successor may reuse, so a hit also checks that they are the same tensors.
        self.modules: OrderedDict[tuple, tuple[CompiledModule, list[weakref.ref]]] = OrderedDict()

    def key(self, args: Sequence[Any]) -> tuple:
        """What a compiled program of this graph depends on, from one call's arguments."""
        parts = []
        for kind, arg in zip(self.kinds, args):
            if kind == _INPUT:
                parts.append((tuple(arg.shape), arg.dtype))
            elif kind == _CONSTANT:
                parts.append((id(arg), arg._version, tuple(arg.shape), arg.dtype))
            else:
                parts.append((type(arg).__name__, arg))
        return tuple(parts)

    def buffer_name(self, buffer: str) -> str:
        """The module path of a buffer of `_FrozenGraph` (`constant_<placeholder index>`)."""
        index = buffer.removeprefix("constant_")
        return self.names[int(index)] if index.isdigit() else buffer

    def __call__(self, *args: Any) -> tuple[torch.Tensor, ...]:
        module = self.compiled_for(args)
        STATS.last_module = module
        inputs = [arg for kind, arg in zip(self.kinds, args) if kind == _INPUT]
        if torch.is_grad_enabled() and any(t.requires_grad for t in inputs):
            warnings.warn("torq backend: Torq runs inference only; these results carry no autograd history",
                          stacklevel=2)
        results = module(*inputs)
        return tuple(_to_torch(r) for r in (results if isinstance(results, tuple) else (results,)))

    def compiled_for(self, args: Sequence[Any]) -> CompiledModule:
        """The program of this graph for these arguments, compiled on a miss."""
        key = self.key(args)
        constants = [arg for kind, arg in zip(self.kinds, args) if kind == _CONSTANT]
        entry = self.modules.get(key)
        if entry is not None and all(ref() is c for ref, c in zip(entry[1], constants)):
            self.modules.move_to_end(key)
            STATS.cached_calls += 1
            return entry[0]
        module = self.compile(args)
        self.modules[key] = (module, [weakref.ref(c) for c in constants])
        while len(self.modules) > _GRAPH_CACHE_SIZE:
            self.modules.popitem(last=False)
        return module

    def compile(self, args: Sequence[Any]) -> CompiledModule:
        """Exports the graph at these arguments and compiles it, unless an identical program
        (same MLIR, same options) was compiled before."""
        mlir = self.export(args)
        program_key = (self.options.cache_key(), hashlib.sha256(mlir.encode()).hexdigest())
        module = _PROGRAMS.get(program_key)
        if module is not None:
            _PROGRAMS.move_to_end(program_key)
            return module
        STATS.compiles += 1
        module = torq_compile(mlir, hw=self.options.hw, flags=self.options.flags)
        _PROGRAMS[program_key] = module
        while len(_PROGRAMS) > _PROGRAM_CACHE_SIZE:
            _PROGRAMS.popitem(last=False)
        return module

    def export(self, args: Sequence[Any]) -> str:
        """The graph at these arguments as torch-dialect MLIR (torch.export, then iree-turbine)."""
        import iree.turbine.aot as aot
        from iree.turbine.aot.decompositions import current_aot_decompositions

        STATS.exports += 1
        frozen = _FrozenGraph(self.gm, self.kinds, args)
        inputs = tuple(arg.detach() for kind, arg in zip(self.kinds, args) if kind == _INPUT)
        try:
            with torch.no_grad(), warnings.catch_warnings():
                # torch.export's own use of a pytree API it deprecates, not the user's code.
                warnings.filterwarnings("ignore", message=".*LeafSpec", category=FutureWarning)
                program = torch.export.export(frozen, inputs, strict=False)
                # As aot.export does for an nn.Module (torq.compile's path): its decompositions, which
                # also make the program functional, so that in-place updates show in its signature.
                program = program.run_decompositions(current_aot_decompositions())
        except Exception as e:  # torch's own message says which op or construct
            raise TorqCompileError(f"torq backend: cannot export the graph: {type(e).__name__}: "
                                   f"{str(e).strip().splitlines()[0]}") from None
        signature = program.graph_signature
        if signature.buffers_to_mutate or signature.user_inputs_to_mutate:
            names = ", ".join(sorted(self.buffer_name(b) for b in signature.buffers_to_mutate.values()) +
                              ["an input"] * bool(signature.user_inputs_to_mutate))
            raise TorqCompileError(f"torq backend: the graph updates tensors in place ({names}); Torq runs "
                                   "inference graphs: call model.eval() (batch norm in training mode "
                                   "updates its running statistics) or move the update out of forward")
        return str(aot.export(program).mlir_module)


def torq_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *, options: dict[str, Any] | None = None,
                 mode: str | None = None) -> Callable[..., Any]:
    """Dynamo backend: the callable that runs `gm` on the Torq simulator (see the module docstring)."""
    parsed = BackendOptions.parse(options)
    STATS.graphs += 1
    if not _returns_only_tensors(gm):
        STATS.eager_graphs += 1
        warnings.warn("torq backend: a graph returns a size or other non-tensor value; it runs in eager torch",
                      stacklevel=2)
        return gm.forward
    return TorqGraph(gm, example_inputs, parsed)
