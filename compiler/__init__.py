"""The Torq compiler; also IREE's Python compiler API with the Torq target (`iree_api`):

    import torq.compiler as ireec        # instead of: import iree.compiler as ireec
    vmfb = ireec.compile_str(mlir, target_backends=["torq"], input_type="auto", extra_args=[...])
    ireec.compile_file("model.mlir", target_backends=["torq"], output_file="model.vmfb")

Names are imported on first use, so that `import torq.compiler` loads neither IREE nor the driver.
"""

_LAZY = {name: "torq.compiler.iree_api" for name in (
    "compile_str", "compile_file", "query_available_targets", "CompilerOptions", "CompilerToolError",
    "InputType", "OutputFormat", "TorqCompilerToolError")}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'torq.compiler' has no attribute '{name}'")


__all__ = list(_LAZY)
