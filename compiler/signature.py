"""Records each public function's tensor signature in the module's reflection.

Contract:
- `attach_signatures(module_op)` runs on the input module right after parsing
  (torch-dialect, linalg/builtin-tensor or TOSA MLIR; before IREE's input
  conversion, while argument types are still tensors). For every public
  `func.func` / `util.func` with a body it reads `function_type` and adds the
  entry `"torq.signature"` to the function's `iree.reflection` dictionary
  (kept entries already there). IREE copies `iree.reflection` into the .vmfb
  function's reflection map, where the runtime reads it
  (`torq.runtime.api.function_signature`) to check inputs before a call.
- The value is compact JSON: `{"v":1,"inputs":[...],"results":[...]}`, one
  entry per value: a tensor as IREE-style text `"1x3x8x8xf32"` (dynamic
  dims `?`; element types in IREE's spelling: `f32`, `bf16`, `i8`, `ui8`,
  `i1`, ...; torch's signed `si64` becomes signless `i64`, which is what the
  compiled module imports), or `null` for a value that is not a ranked tensor
  (scalar, `!hal.buffer_view`, unranked or unknown types).
- An argument the function writes in place (a torch-dialect `!torch.tensor`,
  the non-value tensor iree-turbine exports for an input the model mutates:
  IREE writes the result into the argument's buffer, `hal.tensor.alias`) is
  listed in `"mutated"` (argument indices; the key is absent when none is).
  The runtime copies such an argument's buffer back into the caller's array
  after the call, as torch mutates the caller's tensor.
- A function whose values are all non-tensors gets no entry (nothing to
  check). Returns the names of the functions that got one.
"""

from __future__ import annotations

import json
import re

from iree.compiler import ir

KEY = "torq.signature"
VERSION = 1
_FUNC_OPS = ("func.func", "util.func")

_BUILTIN = re.compile(r"tensor<((?:[0-9?]+x)*)([A-Za-z][^,>]*?)\s*(?:,.*)?>")
_TORCH = re.compile(r"!torch\.v?tensor<\[([^\]]*)\]\s*,\s*([^>]+?)\s*>")


def _element(name: str, torch: bool) -> str:
    name = name.strip()
    if torch and re.fullmatch(r"si(8|16|32|64)", name):
        return name[1:]  # torch's signed ints are signless in the compiled module
    return name


def type_text(t: ir.Type | str) -> str | None:
    """IREE-style `1x?x8xf32` for a ranked builtin or torch value tensor type; else None."""
    s = str(t).strip()
    m = _BUILTIN.fullmatch(s)
    if m:
        dims = [d for d in m.group(1).split("x") if d]
        return "x".join([*dims, _element(m.group(2), False)])
    m = _TORCH.fullmatch(s)
    if m:
        dims = []
        for d in (p.strip() for p in m.group(1).split(",") if p.strip()):
            if d in ("?", "-1"):
                dims.append("?")
            elif d.isdigit():
                dims.append(d)
            else:
                return None
        return "x".join([*dims, _element(m.group(2), True)])
    return None


def signature_json(inputs: list[ir.Type], results: list[ir.Type]) -> str | None:
    ins = [type_text(t) for t in inputs]
    outs = [type_text(t) for t in results]
    if all(v is None for v in ins + outs):
        return None
    record = {"v": VERSION, "inputs": ins, "results": outs}
    mutated = [i for i, t in enumerate(inputs) if str(t).startswith("!torch.tensor<")]
    if mutated:
        record["mutated"] = mutated
    return json.dumps(record, separators=(",", ":"))


def _is_public_definition(op: ir.Operation) -> bool:
    attrs = op.attributes
    if "sym_visibility" in attrs and ir.StringAttr(attrs["sym_visibility"]).value != "public":
        return False
    return len(op.regions) > 0 and len(op.regions[0].blocks) > 0


def attach_signatures(module_op: ir.Operation) -> list[str]:
    """Adds `torq.signature` to `iree.reflection` of each public function; see module docstring."""
    done = []
    with module_op.context:
        for block in module_op.regions[0].blocks:
            for child in block.operations:
                op = child.operation
                if op.name not in _FUNC_OPS or "function_type" not in op.attributes:
                    continue
                if not _is_public_definition(op):
                    continue
                try:
                    ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
                    text = signature_json(list(ftype.inputs), list(ftype.results))
                except (ValueError, TypeError):
                    continue  # not a plain function type: no signature (the runtime falls back)
                if text is None:
                    continue
                entries = {}
                if "iree.reflection" in op.attributes:
                    old = ir.DictAttr(op.attributes["iree.reflection"])
                    entries = {old[i].name: old[i].attr for i in range(len(old))}
                entries[KEY] = ir.StringAttr.get(text)
                op.attributes["iree.reflection"] = ir.DictAttr.get(entries)
                done.append(ir.StringAttr(op.attributes["sym_name"]).value)
    return done


def attach_to_invocation(inv):
    """Attaches signatures to the module `inv` (an `iree.compiler.api.Invocation`) parsed.

    The module is exported from the invocation, edited in place and imported
    back; returns the invocation to continue with.
    """
    module_op = inv.export_module()
    attach_signatures(module_op)
    inv.import_module(module_op)
    return inv
