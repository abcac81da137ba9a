"""Torq NPU compiler and simulator on top of IREE.

    import torq
    cm = torq.compile(model, x)      # torch.nn.Module (+ example args), MLIR text or path
    y = cm(x)                        # runs on the Torq simulator
    cm.save("m.vmfb"); m = torq.load("m.vmfb"); m.main(x); m.last_stats
    torch.compile(model, backend="torq")   # dynamo's graphs on Torq (torq.dynamo_backend)
    torq.compiler.compile_str(mlir, target_backends=["torq"])   # iree.compiler's API (torq.compiler)

Imports are lazy so that the runtime tools do not load the compiler.
"""

from torq.contract.hw import TorqHw, parse_hw_spec

_LAZY = {
    "compile": ("torq.compile_api", "compile"),
    "CompiledModule": ("torq.compile_api", "CompiledModule"),
    "TorqCompileError": ("torq.compile_api", "TorqCompileError"),
    "load": ("torq.runtime.api", "load"),
    "LoadedModule": ("torq.runtime.api", "LoadedModule"),
    "TorqRuntimeError": ("torq.runtime.errors", "TorqRuntimeError"),
    "ModuleLoadError": ("torq.runtime.errors", "ModuleLoadError"),
    "InputError": ("torq.runtime.errors", "InputError"),
    "DispatchError": ("torq.runtime.errors", "DispatchError"),
    "InvocationError": ("torq.runtime.errors", "InvocationError"),
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(mod), attr)
    raise AttributeError(f"module 'torq' has no attribute '{name}'")


__all__ = ["TorqHw", "parse_hw_spec", *_LAZY]
