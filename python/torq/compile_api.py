"""`torq.compile`: a model (torch, turbine export, MLIR text or path, ONNX file) to a runnable module."""

from __future__ import annotations

import io
import os
from typing import Any, Sequence

from torq.compiler.driver import UsageError, _ListHw, compile_source, parse_torq_flags, write_atomically
from torq.compiler.ir_utils import CompileError
from torq.compiler.onnx_import import read_onnx_source
from torq.compiler.target import TargetReport
from torq.contract.hw import TorqHw, parse_hw_spec


class TorqCompileError(Exception):
    """Compilation failed; the message is the one-line compiler error. When IREE itself rejected
    the model, `diagnostics` holds every error it reported (with source locations)."""

    def __init__(self, message: str, diagnostics: Sequence[str] = ()):
        super().__init__(message)
        self.diagnostics = list(diagnostics)


_FILE_SUFFIXES = (".mlir", ".mlirbc", ".onnx")


def _as_bytecode(module: Any) -> bytes:
    """The export as MLIR bytecode, with its source locations (the model's file:line per op,
    which remarks and per-layer reports name; plain str() drops them). Bytecode, not text:
    ViT-B/16's weights printed as text took 2.9 s (660 MB of hex for IREE to parse again),
    as bytecode 0.14 s (330 MB, the weights' own bytes); the driver reads its ops as text
    for the torch rewrites' marks (`driver.ops_text`, 0.12 s); the compile is the same."""
    buffer = io.BytesIO()
    module.operation.write_bytecode(buffer)
    return buffer.getvalue()


def _to_mlir(model: Any, args: Sequence[Any]) -> tuple[str | bytes, str]:
    """The model as MLIR text or bytecode, and the name diagnostics use for it.

    Files and bytes holding an ONNX model (`.onnx`, or ModelProto content; see
    `torq.compiler.onnx_import.is_onnx`) are imported with IREE's ONNX importer.
    """
    if isinstance(model, (bytes, bytearray)):
        return _import_if_onnx(bytes(model), "<bytes>", None)
    if isinstance(model, str):
        if "\n" not in model and (model.endswith(_FILE_SUFFIXES) or os.path.exists(model)):
            if not os.path.isfile(model):
                raise TorqCompileError(f"cannot read '{model}': no such file")
            with open(model, "rb") as f:
                return _import_if_onnx(f.read(), model, model)
        return model, "<string>"
    if isinstance(model, os.PathLike):
        return _to_mlir(os.fspath(model), args)
    if type(model).__name__ == "ModelProto" and hasattr(model, "SerializeToString"):  # onnx.ModelProto
        return _import_if_onnx(model.SerializeToString(), f"<onnx {model.graph.name or 'model'}>", None)
    if hasattr(model, "mlir_module"):  # an iree.turbine.aot export
        return _as_bytecode(model.mlir_module), type(model).__name__
    try:
        import torch
    except ImportError:  # pragma: no cover
        torch = None
    if torch is not None and isinstance(model, torch.nn.Module):
        import iree.turbine.aot as aot

        exported = aot.export(model, args=tuple(args))
        return _as_bytecode(exported.mlir_module), type(model).__name__
    raise TorqCompileError(f"cannot compile an object of type {type(model).__name__}: pass a "
                           "torch.nn.Module, a turbine export, MLIR text or a file path (.mlir, .onnx)")


def _import_if_onnx(data: bytes, name: str, path: str | None) -> tuple[bytes, str]:
    try:
        return read_onnx_source(data, name, path)
    except CompileError as e:
        raise TorqCompileError(str(e)) from None


class CompiledModule:
    """A compiled .vmfb, loaded on the Torq device (simulator) on first use."""

    def __init__(self, vmfb: bytes, hw: TorqHw, report: TargetReport, parameters: Any = None):
        self.vmfb = vmfb
        self.hw = hw
        self.report = report
        self.parameters = parameters  # runtime.api.load's: the archives of external weights
        self._loaded = None

    @property
    def module(self):
        if self._loaded is None:
            from torq.runtime.api import load

            self._loaded = load(self.vmfb, hw=self.hw, parameters=self.parameters)
        return self._loaded

    def __call__(self, *args):
        """Calls `main`, or the module's only function (an ONNX model's is named after its graph)."""
        names = self.module.function_names
        entry = "main" if "main" in names or len(names) != 1 else names[0]
        return self.module[entry](*args)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.module, name)

    @property
    def last_stats(self):
        return self.module.last_stats

    def save(self, path: str | os.PathLike) -> None:
        write_atomically(os.fspath(path), self.vmfb)


def compile(model: Any, *args: Any, hw: str | TorqHw | None = None, flags: Sequence[str] = (),
            remarks=None, parameters: Any = None) -> CompiledModule:
    """Compile `model` for Torq. `args` are example inputs for a torch module. `hw` (a preset
    spec such as "SL2610:lram_kb=256", or a TorqHw) wins over a --torq-hw in `flags`;
    with neither, the default hardware model. `parameters`: the archives the module's
    external weights are read from when it runs (`torq.runtime.api.load`'s, e.g.
    "model=weights.irpa" for a model exported after iree-turbine's
    `externalize_module_parameters` and saved with `save_module_parameters`)."""
    try:
        opts, rest, _ = parse_torq_flags(list(flags))
    except (UsageError, _ListHw) as e:
        raise TorqCompileError(str(e)) from None
    try:
        if hw is not None:
            opts.hw = hw if isinstance(hw, TorqHw) else parse_hw_spec(hw)
    except ValueError as e:
        raise TorqCompileError(str(e)) from None
    opts.iree_flags = rest
    source, name = _to_mlir(model, args)
    try:
        result = compile_source(source, opts, name, remarks=remarks)
    except (CompileError, UsageError) as e:
        raise TorqCompileError(str(e), getattr(e, "diagnostics", ())) from None
    return CompiledModule(result.vmfb, opts.hw, result.report, parameters)
