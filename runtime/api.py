"""Python API to run a compiled .vmfb with its Torq dispatches on the simulator.

Contract:
- `load(path_or_bytes, hw=None, parameters=None) -> LoadedModule` reads a
  .vmfb (a path or its bytes) and instantiates it on IREE's "local-task" CPU
  device for host code, with the `torq` VM module (`TorqModule`) registered
  before it. `hw` (a `TorqHw` or a `--torq-hw` spec string) fixes the
  simulated device; by default each Torq executable runs on the hardware it
  was compiled for. `parameters` are the parameter archives (.irpa, .gguf,
  .safetensors) of a module compiled with external weights (iree-turbine's
  `externalize_module_parameters`), as IREE's `--parameters` takes them:
  `[scope=]path` strings (one or a list; iree-turbine's scope is "model") or a
  {scope: path} mapping; IREE's `io_parameters` module serves them.
- Each public function of the module is a callable attribute (`m.main(x, y)`;
  also `m["name"]` for names that are not identifiers or clash with methods).
  Inputs are numpy arrays, numpy/Python scalars or torch tensors; results are
  numpy arrays: one result is returned bare, several as a tuple.
- Inputs are checked before the VM is invoked, against the function's
  reflection metadata when it has any (`torq.signature`, which torq-compile
  records for every public function, else IREE's `iree.abi` JSON or
  `iree.abi.declaration` string): count, shape (dynamic dims match anything)
  and dtype (exact: no silent casts; Python scalars and lists are converted
  to the expected dtype). An `InputError` names the function, the input
  index, the expected and the given `SHAPExTYPE`. A module without metadata
  (e.g. hand-written `!hal.buffer_view` functions) is called as is; IREE or
  the simulator then reports a mismatch.
- `m.last_stats` is the list of per-dispatch stats dicts of the last call
  (one per Torq dispatch, in execution order; see `TorqModule` and
  `simulator.DispatchStats`: name, executor, tiles, cycles, latency_us,
  dma_bytes_in/out, compulsory_bytes, lram_peak_bytes, macs,
  roofline_cycles, efficiency, ddr_traffic_ratio, engine_busy_cycles, ...).
  `m.last_wall_us` is the host wall time of the last call (VM invocation
  only, inputs already converted). `m.record_timeline = True` makes the
  stats carry each command's simulated start/end ("timeline").
  `m.last_checks`: with a module compiled with --torq-check-dispatches, one
  record per checked NPU result of the last call, against its host copy
  (runtime/dispatch_check.py).
- `m.save(path)` writes the .vmfb, `m.function_names` lists the functions,
  `m.signature(name)` gives the parsed signature, `m.close()` frees IREE
  objects (also automatic on collection and at interpreter exit).
- Errors are `TorqRuntimeError`s (see `errors`): `ModuleLoadError` for a bad
  file, `InputError` for wrong inputs, `DispatchError` for a Torq dispatch
  that failed, `InvocationError` for a host-side failure.
"""

from __future__ import annotations

import json
import os
import re
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import iree.runtime as rt
import ml_dtypes
import numpy as np

from torq.contract import dispatch_records
from torq.contract.hw import TorqHw, parse_hw_spec
from torq.contract.module_abi import MAX_INPUTS, MAX_RESULTS

from .errors import DispatchError, InputError, InvocationError, ModuleLoadError, TorqRuntimeError
from .module import (
    ELEMENT_TYPES,
    ElementType,
    TorqModule,
    buffer_view_to_numpy,
    element_type_of_dtype,
    element_type_of_hal,
    numpy_to_buffer_view,
)

__all__ = [
    "load",
    "LoadedModule",
    "FunctionSignature",
    "TensorSpec",
    "TorqRuntimeError",
    "ModuleLoadError",
    "InputError",
    "DispatchError",
    "InvocationError",
]

HOST_DEVICE = "local-task"


# --------------------------------------------------------------------------
# Signatures from reflection metadata


@dataclass(frozen=True)
class TensorSpec:
    """An expected tensor: dims (None = dynamic) and element type (None = unknown)."""

    shape: tuple[int | None, ...]
    element: ElementType | None
    text: str  # e.g. "2x3xf32"

    def matches(self, array: np.ndarray) -> bool:
        if self.element is not None and array.dtype != self.element.dtype:
            return False
        if len(self.shape) != array.ndim:
            return False
        return all(d is None or d == a for d, a in zip(self.shape, array.shape))


@dataclass(frozen=True)
class FunctionSignature:
    """Inputs/results of a function; a None entry is a value of unknown type."""

    name: str
    inputs: tuple[TensorSpec | None, ...] | None  # None: no metadata at all
    results: tuple[TensorSpec | None, ...] | None
    declaration: str = ""
    # Inputs the function writes in place (compiler/signature.py "mutated"): the call copies
    # each back into the caller's array (a numpy array, or the memory of a torch tensor).
    mutated: tuple[int, ...] = ()


def describe_array(array: np.ndarray) -> str:
    """IREE-style `2x3xf32` text for an array (numpy dtype name if not an IREE type)."""
    try:
        name = element_type_of_dtype(array.dtype).name
    except KeyError:
        name = str(array.dtype)
    return "x".join([*(str(d) for d in array.shape), name])


def _tensor_spec(text: str) -> TensorSpec | None:
    m = re.fullmatch(r"\s*tensor<([^,>]*)(?:,[^>]*)?>\s*", text)
    if not m:
        return None
    parts = m.group(1).strip().split("x")
    dims: list[int | None] = []
    for p in parts[:-1]:
        if p == "?":
            dims.append(None)
        elif p.isdigit():
            dims.append(int(p))
        else:
            return None
    return TensorSpec(tuple(dims), ELEMENT_TYPES.get(parts[-1]), m.group(1).strip())


def _split_values(section: str) -> tuple[TensorSpec | None, ...]:
    # `%input0: tensor<2x3xf32>, %input1: !hal.buffer_view` -> one spec per value
    chunks = [c for c in re.split(r"(?:^|,\s*)%[\w$.-]+\s*:\s*", section.strip()) if c.strip()]
    return tuple(_tensor_spec(c.strip().rstrip(",")) for c in chunks)


def _parse_declaration(name: str, decl: str) -> FunctionSignature:
    m = re.search(r"@[^(]*\((.*?)\)\s*->\s*(.*)$", decl, re.S)
    if not m:
        m2 = re.search(r"@[^(]*\((.*?)\)\s*$", decl, re.S)
        if not m2:
            return FunctionSignature(name, None, None, decl)
        return FunctionSignature(name, _split_values(m2.group(1)), (), decl)
    results = m.group(2).strip()
    if results.startswith("(") and results.endswith(")"):
        results = results[1:-1]
    return FunctionSignature(name, _split_values(m.group(1)), _split_values(results), decl)


def _spec_type(spec: TensorSpec | None) -> str:
    return f"tensor<{spec.text}>" if spec is not None else "?"


def _abi_spec(desc: Any) -> TensorSpec | None:
    # iree.abi JSON: ["ndarray", "f32", rank, d0, d1, ...] with null for dynamic dims.
    if not isinstance(desc, list) or len(desc) < 3 or desc[0] != "ndarray":
        return None
    dims = tuple(d if isinstance(d, int) else None for d in desc[3:])
    text = "x".join([*("?" if d is None else str(d) for d in dims), str(desc[1])])
    return TensorSpec(dims, ELEMENT_TYPES.get(str(desc[1])), text)


def _torq_signature(name: str, text: str) -> FunctionSignature | None:
    # torq.signature JSON (compiler/signature.py): {"v":1,"inputs":["1x3x8x8xf32",null],"results":[...]}
    try:
        sig = json.loads(text)
        values = [sig["inputs"], sig["results"]]
        if not all(isinstance(v, list) and all(t is None or isinstance(t, str) for t in v) for v in values):
            return None
        mutated = tuple(int(i) for i in sig.get("mutated", ()))
    except (ValueError, KeyError, TypeError):
        return None

    def specs(texts: list) -> tuple[TensorSpec | None, ...]:
        return tuple(None if t is None else _tensor_spec(f"tensor<{t}>") for t in texts)

    return FunctionSignature(name, specs(values[0]), specs(values[1]), mutated=mutated)


def function_signature(fn: rt.VmFunction) -> FunctionSignature:
    """The signature of a VM function from its reflection metadata (best effort).

    Sources, first found wins: `torq.signature` (recorded by torq-compile for
    every input kind, including torch-dialect modules, which IREE gives no
    reflection), `iree.abi` JSON, then the `iree.abi.declaration` string.
    """
    refl = dict(fn.reflection)
    if "torq.signature" in refl:
        sig = _torq_signature(fn.name, refl["torq.signature"])
        if sig is not None:
            decl = refl.get("iree.abi.declaration", "")
            if not decl:
                ins = ", ".join(f"%input{i}: {_spec_type(s)}" for i, s in enumerate(sig.inputs or ()))
                outs = ", ".join(f"%output{i}: {_spec_type(s)}" for i, s in enumerate(sig.results or ()))
                decl = f"func @{fn.name}({ins}) -> ({outs})"
            return FunctionSignature(sig.name, sig.inputs, sig.results, decl, sig.mutated)
    if "iree.abi" in refl:
        try:
            abi = json.loads(refl["iree.abi"])
            return FunctionSignature(
                fn.name, tuple(_abi_spec(a) for a in abi["a"]), tuple(_abi_spec(r) for r in abi["r"])
            )
        except (ValueError, KeyError, TypeError):
            pass
    decl = refl.get("iree.abi.declaration")
    if decl:
        return _parse_declaration(fn.name, decl)
    return FunctionSignature(fn.name, None, None)


# --------------------------------------------------------------------------
# Input conversion


def _to_numpy(value: Any, spec: TensorSpec | None) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if type(value).__module__.startswith("torch"):
        import torch

        if isinstance(value, torch.Tensor):
            t = value.detach().cpu()
            if t.dtype == torch.bfloat16:
                return t.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
            return t.numpy()
    if isinstance(value, np.generic):
        return np.asarray(value)
    dtype = spec.element.dtype if spec is not None and spec.element is not None else None
    return np.asarray(value, dtype=dtype)


# --------------------------------------------------------------------------
# The loaded module


class _Resources:
    """IREE objects of one loaded module; `close` drops them in a safe order."""

    def __init__(self) -> None:
        self.config: rt.Config | None = None
        self.vm_module: rt.VmModule | None = None
        self.torq: TorqModule | None = None
        self.context: rt.SystemContext | None = None
        self.functions: dict[str, rt.VmFunction] = {}

    def close(self) -> None:
        self.functions.clear()
        self.context = None
        self.vm_module = None
        if self.torq is not None:
            self.torq.close()
            self.torq = None
        self.config = None


class LoadedModule:
    """A .vmfb ready to run; see the module docstring."""

    def __init__(self, vmfb: bytes, source: str, hw: TorqHw | None = None,
                 parameters: Sequence[tuple[str, str]] = ()) -> None:
        self._vmfb = vmfb
        self.source = source
        self.last_stats: list[dict] = []
        # Per checked NPU result of the last call, with --torq-check-dispatches (runtime/dispatch_check.py).
        self.last_checks: list[dict] = []
        self.last_wall_us: float = 0.0
        res = self._res = _Resources()
        self._finalizer = weakref.finalize(self, _Resources.close, res)
        try:
            res.config = rt.Config(HOST_DEVICE)
            try:
                res.vm_module = rt.VmModule.copy_buffer(res.config.vm_instance, vmfb)
            except (ValueError, RuntimeError) as e:
                raise ModuleLoadError(f"not a valid .vmfb: {source}: {_iree_message(e)}") from None
            res.torq = TorqModule(res.config, hw)
            modules = [res.torq.vm_module, res.vm_module]
            if parameters:
                modules.insert(0, _parameters_module(res.config.vm_instance, parameters))
            try:
                res.context = rt.SystemContext(vm_modules=modules, config=res.config)
            except (ValueError, RuntimeError) as e:
                msg = _iree_message(e)
                if "not exported" in msg and "run_i" in msg:
                    msg += f" (the torq module exports run_i{{N}}_o{{M}} for N <= {MAX_INPUTS}, M <= {MAX_RESULTS})"
                msg += _parameters_hint(msg)
                raise ModuleLoadError(f"cannot instantiate {source}: {msg}") from None
            names = []
            for name in res.vm_module.function_names:
                fn = res.vm_module.lookup_function(name)
                if fn is None or name.startswith("__"):
                    continue
                if name.endswith("$async") or dict(fn.reflection).get("iree.abi.model") == "coarse-fences":
                    continue  # async variant (`name$async`): needs fences, not callable here
                res.functions[name] = fn
                names.append(name)
            self.function_names: list[str] = names
            self._signatures = {n: function_signature(res.functions[n]) for n in names}
            self._call_sites = {n: _call_sites(res.functions[n]) for n in names}
        except BaseException:
            self.close()
            raise

    # -- public API ---------------------------------------------------------

    @property
    def hw(self) -> TorqHw | None:
        return self._res.torq.contract.hw if self._res.torq is not None else None

    @property
    def record_timeline(self) -> bool:
        return self._res.torq is not None and self._res.torq.record_timeline

    @record_timeline.setter
    def record_timeline(self, value: bool) -> None:
        if self._res.torq is not None:
            self._res.torq.record_timeline = value

    def signature(self, name: str) -> FunctionSignature:
        self._check_function(name)
        return self._signatures[name]

    def save(self, path: str | os.PathLike) -> None:
        with open(path, "wb") as f:
            f.write(self._vmfb)

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> "LoadedModule":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_") or name not in self.__dict__.get("_signatures", {}):
            raise AttributeError(f"module has no function or attribute '{name}'")
        return self[name]

    def __getitem__(self, name: str) -> Callable[..., Any]:
        self._check_function(name)

        def call(*args: Any) -> Any:
            results = self.call_raw(name, *args)
            arrays = [a for a, _ in results]
            if len(arrays) == 1:
                return arrays[0]
            return tuple(arrays) if arrays else None

        call.__name__ = name
        call.__doc__ = self._signatures[name].declaration or f"Calls @{name}."
        return call

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self.__dict__.get("function_names", [])))

    def call_raw(self, name: str, *args: Any) -> list[tuple[Any, ElementType | None]]:
        """Calls `name`; returns each result with its IREE element type (None for scalars)."""
        self._check_function(name)
        sig = self._signatures[name]
        arrays = self._check_inputs(sig, args)
        # IREE objects live only inside _invoke, so no exception traceback pins them.
        results, error = self._invoke(name, sig, arrays)
        if error is not None:
            raise error
        return results

    # -- internals ----------------------------------------------------------

    def _check_function(self, name: str) -> None:
        if self._res.context is None:
            raise TorqRuntimeError(f"module {self.source} is closed")
        if name not in self._signatures:
            raise TorqRuntimeError(
                f"module {self.source} has no function '{name}' (functions: {', '.join(self.function_names) or 'none'})"
            )

    def _check_inputs(self, sig: FunctionSignature, args: Sequence[Any]) -> list[tuple[np.ndarray, ElementType]]:
        specs = sig.inputs
        if specs is not None and len(specs) != len(args):
            n = len(specs)
            msg = f"{sig.name}: expected {n} input{'' if n == 1 else 's'}, got {len(args)}"
            if any(s is not None for s in specs):
                msg += f" (signature: {sig.name}({', '.join(s.text if s else '?' for s in specs)}))"
            raise InputError(msg)
        out = []
        for i, value in enumerate(args):
            spec = specs[i] if specs is not None else None
            try:
                array = _to_numpy(value, spec)
            except (TypeError, ValueError) as e:
                raise InputError(f"{sig.name}: input {i}: cannot convert {type(value).__name__} to an array: {e}", i) from None
            if spec is not None and not spec.matches(array):
                raise InputError(f"{sig.name}: input {i}: expected {spec.text}, got {describe_array(array)}", i)
            if spec is not None and spec.element is not None:
                et = spec.element
            else:
                try:
                    et = element_type_of_dtype(array.dtype)
                except KeyError:
                    raise InputError(f"{sig.name}: input {i}: unsupported dtype {array.dtype}", i) from None
            out.append((array, et))
        return out

    def _invoke(
        self, name: str, sig: FunctionSignature, arrays: list[tuple[np.ndarray, ElementType]]
    ) -> tuple[list[tuple[Any, ElementType | None]], Exception | None]:
        res = self._res
        assert res.config is not None and res.context is not None and res.torq is not None
        device = res.config.device
        args = rt.VmVariantList(len(arrays))
        views = [numpy_to_buffer_view(device, array, et) for array, et in arrays]
        for view in views:
            args.push_ref(view)
        n_results = len(sig.results) if sig.results else 1
        rets = rt.VmVariantList(max(1, n_results))
        res.torq.reset(self._call_sites.get(name, ()))
        t0 = time.perf_counter()
        try:
            res.context.vm_context.invoke(res.functions[name], args, rets)
        except Exception as e:  # IREE reports Python errors of the torq module as RuntimeError
            pending = res.torq.pending_error
            if pending is not None:
                pending.__traceback__ = None
                error: Exception = pending  # type: ignore[assignment]
            else:
                error = InvocationError(f"{name}: {_iree_message(e)}")
            return [], error
        finally:
            self.last_wall_us = (time.perf_counter() - t0) * 1e6
            self.last_stats = list(res.torq.last_stats)
            self.last_checks = list(res.torq.last_checks)
        _write_back(sig, arrays, views)
        results: list[tuple[Any, ElementType | None]] = []
        for i in range(rets.size):
            value = rets.get_variant(i)
            if isinstance(value, rt.VmRef):
                bv = value.deref(rt.HalBufferView, True)
                if bv is None:
                    return [], InvocationError(f"{name}: result {i} is not a tensor (unsupported)")
                try:
                    et = element_type_of_hal(bv.element_type)
                except KeyError:
                    return [], InvocationError(f"{name}: result {i} has unsupported element type {int(bv.element_type)}")
                results.append((buffer_view_to_numpy(bv), et))
            else:
                results.append((value, None))
        return results, None


def _write_back(sig: FunctionSignature, arrays: list[tuple[np.ndarray, ElementType]],
                views: list[rt.HalBufferView]) -> None:
    """Copies each input the function wrote in place back into the caller's array, as torch
    mutates the caller's tensor (an array `_to_numpy` made afresh, from a list, is not the
    caller's: nothing to write)."""
    for i in sig.mutated:
        if i < len(arrays) and arrays[i][0].flags.writeable:
            np.copyto(arrays[i][0], buffer_view_to_numpy(views[i]).reshape(arrays[i][0].shape))


def _call_sites(fn: rt.VmFunction) -> tuple[tuple[str, str], ...]:
    """(name, source) of `fn`'s NPU dispatches in call order, from its dispatch records."""
    return dispatch_records.call_sites(dispatch_records.from_reflection(fn.reflection))


def _iree_message(e: BaseException) -> str:
    """IREE's error text on one line, without source locations and VM stack."""
    text = " ".join(str(e).split())
    text = re.sub(r"^Error invoking function:\s*", "", text)
    text = re.sub(r"\bc/runtime/\S+?:\d+:\s*", "", text)
    text = re.sub(r";?\s*\[\s*\d+\]\s*(bytecode|native)\b.*$", "", text)
    return text.strip().rstrip(";")


ParameterSpec = str | os.PathLike | Sequence[str | os.PathLike] | Mapping[str, str | os.PathLike] | None


def parameter_sources(parameters: ParameterSpec) -> list[tuple[str, str]]:
    """(scope, path) per archive of `parameters`: IREE's `[scope=]path` strings (one or a
    list; no scope is the empty scope) or a {scope: path} mapping."""
    if not parameters:
        return []
    if isinstance(parameters, Mapping):
        return [(str(scope), os.fspath(path)) for scope, path in parameters.items()]
    if isinstance(parameters, (str, os.PathLike)):
        parameters = [parameters]
    out = []
    for item in parameters:
        text = os.fspath(item)
        scope, sep, path = text.partition("=")
        out.append((scope, path) if sep and not os.path.exists(text) else ("", text))
    return out


def _parameters_hint(msg: str) -> str:
    """What to pass when IREE's message says the module's external parameters are missing."""
    if "'io_parameters' not registered" in msg:
        return " (the module reads external parameters: pass their archive, --parameters=[scope=]FILE.irpa)"
    scope = re.search(r"handles scopes like '([^']*)'", msg)
    if scope:
        return f" (pass the archive under scope '{scope.group(1)}': --parameters={scope.group(1)}=FILE.irpa)"
    return ""


def _parameters_module(instance: rt.VmInstance, sources: Sequence[tuple[str, str]]) -> rt.VmModule:
    """IREE's `io_parameters` module serving the archives `sources`, one provider per scope."""
    indices: dict[str, rt.ParameterIndex] = {}
    for scope, path in sources:
        if not os.path.isfile(path):
            raise ModuleLoadError(f"cannot read parameter archive {path}: no such file")
        try:
            indices.setdefault(scope, rt.ParameterIndex()).load(path)
        except (ValueError, RuntimeError) as e:
            raise ModuleLoadError(f"cannot read parameter archive {path}: {_iree_message(e)}") from None
    providers = [index.create_provider(scope=scope) for scope, index in indices.items()]
    return rt.create_io_parameters_module(instance, *providers)


def load(source: str | os.PathLike | bytes | bytearray | memoryview, hw: TorqHw | str | None = None,
         parameters: ParameterSpec = None) -> LoadedModule:
    """Loads a .vmfb (path or bytes) for running on the Torq simulator; see module docstring."""
    if isinstance(hw, str):
        hw = parse_hw_spec(hw)
    params = parameter_sources(parameters)
    if isinstance(source, (bytes, bytearray, memoryview)):
        return LoadedModule(bytes(source), "<bytes>", hw, params)
    path = os.fspath(source)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ModuleLoadError(f"cannot read module {path}: {e.strerror or e}") from None
    return LoadedModule(data, path, hw, params)
