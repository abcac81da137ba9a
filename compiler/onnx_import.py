"""ONNX input: an ONNX model file becomes torch-dialect MLIR for the compile driver.

Contract:
- `is_onnx(data, name)` decides whether an input is an ONNX model: a name
  ending in `.onnx` always is; a name ending in `.mlir` / `.mlirbc` never is;
  anything else (stdin, raw bytes, `.pb`, ...) is ONNX when its first bytes
  are a serialized `onnx.ModelProto` header (field 1, `ir_version`, as a small
  varint, followed by another ModelProto field tag). MLIR text never starts
  with byte 0x08 and MLIR bytecode starts with `ML\\xefR`, so `.mlir` inputs
  are never mistaken for ONNX.
- `import_onnx(data, name, base_dir)` parses the model with the `onnx`
  package, loads external tensor data relative to `base_dir`, runs
  `onnx.checker` and ONNX shape inference (when it leaves a tensor without a
  rank, the exporter's small constant shape computations are folded and it
  runs again: compiler/onnx_fold.py), and imports the graph with IREE's
  own ONNX importer (`iree.compiler.extras.onnx_importer`, the machinery of
  `iree-import-onnx`). It returns the imported module as MLIR bytecode: one
  public `func.func` named after the ONNX graph (`main_graph` for
  torch.onnx exports) whose body is `torch.operator "onnx.<Op>"` ops,
  exactly what `iree-import-onnx` would write. IREE detects that input as
  ONNX and runs its ONNX → torch → linalg input pipeline, so the result
  compiles like any torch-dialect MLIR input.
- Before returning, the same first conversion IREE applies
  (`convert-torch-onnx-to-torch`) runs on a private copy of the module, so a
  node that IREE cannot convert (an op it does not know, or an op at an opset
  version it has no lowering for) is reported here, naming the node, op and
  opset, instead of as a multi-line legalization failure later.
- torq's own ONNX input (`read_onnx_source`) first applies the exact
  rewrites of compiler/onnx_dynamic_quant.py (a dynamically quantized
  MatMulInteger becomes a matmul of int8 dequantizes) and compiler/onnx_qdq.py
  (a dequantize / max pool / quantize with one scale becomes an int8 max
  pool); `import_onnx` alone, as the tests' llvm-cpu references use it,
  imports the graph as written.
- Every failure raises `OnnxImportError` (a `CompileError`) with one line
  that starts with the input name: an empty, truncated or corrupt file, a
  model the ONNX checker rejects, missing external data, a missing `onnx`
  package, a node the importer or IREE cannot convert.
"""

from __future__ import annotations

import io
import os
import re

from .ir_utils import CompileError
from .onnx_dynamic_quant import rewrite_dynamic_quant
from .onnx_fold import fold_shape_computations, has_unranked_values, tensor_types, unranked
from .onnx_qdq import rewrite_qdq

ONNX_SUFFIX = ".onnx"
_MLIR_SUFFIXES = (".mlir", ".mlirbc")
# Wire-format tags of onnx.ModelProto fields 2..8 (producer_name ... opset_import),
# 14 (metadata_props): the field that follows `ir_version` in a serialized model.
_MODEL_FIELD_TAGS = {0x12, 0x1A, 0x22, 0x28, 0x32, 0x3A, 0x42, 0x72}
# `convert-torch-onnx-to-torch` refuses an op it has a pattern for, at an opset it has none for.
_ILLEGAL_OP = re.compile(r'"torch\.operator"\([^)]*\)\s*<\{name = "onnx\.([A-Za-z0-9_]+)"')


class OnnxImportError(CompileError):
    """The ONNX model cannot be imported; the message is one line naming the file."""


def is_onnx(data: bytes, name: str) -> bool:
    """True if the input `name` with contents `data` is an ONNX model (see module docstring)."""
    lower = name.lower()
    if lower.endswith(ONNX_SUFFIX):
        return True
    if lower.endswith(_MLIR_SUFFIXES):
        return False
    return looks_like_onnx_model(data)


def looks_like_onnx_model(data: bytes) -> bool:
    """A serialized ModelProto starts with `ir_version` (tag 0x08, a one-byte varint) and another field."""
    return len(data) >= 3 and data[0] == 0x08 and 1 <= data[1] <= 0x7F and data[2] in _MODEL_FIELD_TAGS


def import_onnx(data: bytes, name: str, base_dir: str | None = None, qdq_rewrites: bool = False) -> bytes:
    """The ONNX model `data` (read from `name`) as torch-dialect MLIR bytecode; see module docstring.
    With `qdq_rewrites`, compiler/onnx_qdq.py's exact rewrites are applied first (torq's input)."""
    try:
        import onnx
    except ImportError:
        raise OnnxImportError(f"{name}: importing ONNX needs the 'onnx' Python package "
                              "(pip install onnx, or pip install 'iree-torq[onnx]')") from None
    model = _parse_model(onnx, data, name)
    if base_dir is not None:  # loads only the tensors stored outside the model file
        try:
            onnx.load_external_data_for_model(model, base_dir)
        except Exception as e:  # OSError, or onnx's ValidationError for a missing/irregular file
            raise OnnxImportError(f"{name}: cannot load the model's external tensor data: {_one_line(e)}") from None
    if qdq_rewrites and _opsets(model).get("", 0) >= 12:  # MaxPool takes int8 from opset 12
        rewrite_dynamic_quant(model)
        rewrite_qdq(model)
    model = _check_and_infer_shapes(onnx, model, name)
    if has_unranked_values(model):
        model = fold_shape_computations(onnx, model, _opsets(model).get("", 1))
    _name_unnamed_nodes(model)
    bytecode = _import_to_bytecode(model, name)
    _check_convertible(bytecode, name, model)
    return bytecode


def _one_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[0] if lines else type(e).__name__


def _parse_model(onnx, data: bytes, name: str):
    if not data:
        raise OnnxImportError(f"{name}: not an ONNX model: the file is empty")
    try:
        model = onnx.load_model_from_string(data)
    except Exception as e:  # google.protobuf.message.DecodeError and friends
        raise OnnxImportError(f"{name}: not a valid ONNX model (protobuf parse error: {_one_line(e)})") from None
    if not model.HasField("graph"):
        raise OnnxImportError(f"{name}: not a valid ONNX model: it has no graph")
    return model


def _check_and_infer_shapes(onnx, model, name: str):
    """onnx.checker, then shape inference (the importer needs value types), as iree-import-onnx does."""
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        raise OnnxImportError(f"{name}: invalid ONNX model: {_one_line(e)}") from None
    except ValueError as e:  # over the 2 GiB in-memory protobuf limit
        raise OnnxImportError(f"{name}: cannot check the ONNX model in memory: {_one_line(e)}") from None
    try:
        return onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception as e:  # InferenceError, or a ValueError for oversized models
        raise OnnxImportError(f"{name}: ONNX shape inference failed: {_one_line(e)}") from None


def _name_unnamed_nodes(model) -> None:
    """`<OpType>_<index>` for nodes without a name: the importer makes node names the op locations."""
    taken = {n.name for n in model.graph.node}
    for i, node in enumerate(model.graph.node):
        if not node.name:
            candidate = f"{node.op_type}_{i}"
            while candidate in taken:
                candidate += "_"
            node.name = candidate
            taken.add(candidate)


def _opsets(model) -> dict[str, int]:
    return {(o.domain if o.domain != "ai.onnx" else ""): o.version for o in model.opset_import}


def _import_to_bytecode(model, name: str) -> bytes:
    """IREE's ONNX importer in a private MLIR context; the module leaves it only as bytecode."""
    from iree.compiler import ir
    from iree.compiler.extras import onnx_importer

    context = ir.Context()
    try:
        info = onnx_importer.ModelInfo(model)
        module = info.create_module(context=context).operation
        onnx_importer.NodeImporter.define_function(info.main_graph, module).import_all()
        module.verify()
        buffer = io.BytesIO()
        module.write_bytecode(buffer)
        return buffer.getvalue()
    except Exception as e:  # OnnxImportError, MLIRError, or an assertion on an odd graph
        raise OnnxImportError(f"{name}: IREE's ONNX importer failed: {type(e).__name__}: {_one_line(e)}") from None


def _check_convertible(bytecode: bytes, name: str, model) -> None:
    """Runs IREE's first ONNX conversion on a fresh copy; raises naming the nodes it cannot convert."""
    from iree.compiler import ir, passmanager

    context = ir.Context()
    refused: list[tuple[str, str]] = []  # (node name, op type)
    module = None
    try:
        module = ir.Module.parse(bytecode, context)
        try:
            with context:
                pm = passmanager.PassManager.parse("builtin.module(func.func(convert-torch-onnx-to-torch))")
                pm.run(module.operation)
        except ir.MLIRError as e:
            for diag in e.error_diagnostics:
                m = _ILLEGAL_OP.search(diag.message)
                if m:
                    refused.append((_node_name(diag.location), m.group(1)))
            if not refused:
                first = e.error_diagnostics[0].message if e.error_diagnostics else str(e)
                raise OnnxImportError(f"{name}: IREE cannot convert the ONNX model: {_one_line(first)}") from None
        else:  # an op the pass has no pattern for at all stays a torch.operator
            module.operation.walk(lambda op: _collect_operator(op, refused))
    finally:
        module = None
    if refused:
        raise OnnxImportError(f"{name}: {_describe_refused(refused, model)}")


def _describe_refused(refused: list[tuple[str, str]], model) -> str:
    """`node 'n0': ONNX op Softmax is not supported ... at opset 11`, for the first refused node;
    `... cannot be imported: its input 'r' has no known rank ...` when shape inference left one
    of its inputs without a rank (IREE's conversions need one: a Transpose is supported, one of
    an unranked tensor is not)."""
    node_name, op_type = refused[0]
    node = next((n for n in model.graph.node if n.name == node_name and n.op_type == op_type), None)
    domain = node.domain if node is not None else ""
    opsets = _opsets(model)
    domain = "" if domain == "ai.onnx" else domain
    where = f"node '{node_name}': " if node_name else ""
    qualified = f"{domain}.{op_type}" if domain else op_type
    unranked = _unranked_input(model, node) if node is not None else None
    if unranked is not None:
        return (f"{where}ONNX op {qualified} cannot be imported: its input '{unranked}' has no known rank "
                "(ONNX shape inference cannot follow how its shape is computed; export the model with static "
                "shapes, or simplify it, e.g. with onnxsim)")
    opset = f"opset {opsets[domain]}" if domain in opsets else "an undeclared opset"
    more = ""
    if len(refused) > 1:
        others = sorted({op for _, op in refused[1:]} - {op_type})
        more = f" (and {len(refused) - 1} more unsupported node{'s' if len(refused) > 2 else ''}"
        more += f": {', '.join(others)})" if others else ")"
    return f"{where}ONNX op {qualified} is not supported by IREE's ONNX import at {opset}{more}"


def _unranked_input(model, node) -> str | None:
    """The first input of `node` that the (shape-inferred) `model` gives no rank, or None."""
    types, consts = tensor_types(model), {i.name for i in model.graph.initializer}
    return next((n for n in node.input if n and n not in consts and unranked(types, n)), None)


def _collect_operator(op, found: list) -> "object":
    from iree.compiler import ir

    if op.name == "torch.operator":
        found.append((_node_name(op.location), ir.StringAttr(op.attributes["name"]).value.removeprefix("onnx.")))
    return ir.WalkResult.ADVANCE


def _node_name(location) -> str:
    """The importer gives each op the location `loc("<ONNX node name>")`."""
    m = re.match(r'loc\("((?:[^"\\]|\\.)*)"', str(location))
    return m.group(1) if m else ""


def read_onnx_source(data: bytes, name: str, path: str | None = None) -> tuple[bytes, str]:
    """(data, name) unchanged for MLIR; imported bytecode for an ONNX model (see `is_onnx`).

    `path` is the model's file path, if any: external tensor data is looked
    up next to it.
    """
    if not is_onnx(data, name):
        return data, name
    base_dir = os.path.dirname(os.path.abspath(path)) if path else None
    return import_onnx(data, name, base_dir, qdq_rewrites=True), name
