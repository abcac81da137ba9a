"""IREE llvm-cpu on this machine: the independent reference the e2e tests compare Torq with."""

from __future__ import annotations

import numpy as np
from iree import compiler as ireec
from iree import runtime as ireert

TOSA = ["--iree-input-type=tosa"]


def llvm_cpu(mlir: str | bytes, *xs: np.ndarray, flags=(), function: str = "main"):
    """Compiles `mlir` for llvm-cpu (host CPU) with the extra `flags` and calls `function`
    on `xs`: one array, or a list of arrays for several results."""
    vmfb = ireec.compile_str(mlir, target_backends=["llvm-cpu"],
                             extra_args=[*flags, "--iree-llvmcpu-target-cpu=host"])
    config = ireert.Config("local-task")
    ctx = ireert.SystemContext(config=config)
    ctx.add_vm_module(ireert.VmModule.copy_buffer(config.vm_instance, vmfb))
    out = ctx.modules.module[function](*xs)
    return [np.asarray(r) for r in out] if isinstance(out, (list, tuple)) else np.asarray(out)
