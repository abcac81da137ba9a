"""Where each value of a Torq function lives in DDR, for torq-build-nss-program: a tensor
(an argument, a result, a constant of the executable, or scratch) and a box of it. A
`tensor.extract_slice` is a box of its source's box; a padded view (`torq.pad`) a box
that may reach past its source's edges (the part inside is `valid`, the consuming op
applies the rest as its `pad`)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from iree.compiler import ir

from torq.contract.program import TensorDesc

from .ir_utils import CompileError, constant_of, element_type, int_array, mlir_dtype, static_shape


def _np_dtype(dtype: str):
    import ml_dtypes

    return {"bf16": ml_dtypes.bfloat16, "f32": np.float32, "i8": np.int8, "i16": np.int16,
            "i32": np.int32, "i1": np.bool_}[dtype]


class SliceFacts(NamedTuple):
    """A slice op's attributes and values (`DdrViews._slice_facts`)."""
    static_offsets: list[int]  # a dynamic one stands as a value below -2^62
    sizes: list[int]
    dynamic_offsets: tuple[ir.Value, ...]
    operands: tuple[ir.Value, ...]  # an extract's source / an insert's source and destination first
    result: ir.Value
    result_shape: tuple[int, ...]
    strides: tuple[int, ...]


class DdrViews:
    """The DDR side of `NssBuilder`: its `tensors`, `tensor_of` (value -> tensor), `views`
    (box of a tensor), `view_dims` (a rank-reducing slice's dims in its tensor),
    `view_strides` (a strided slice's step per tensor dim: only a DMA-in reads it), `valid`
    (a padded view's real data) and `slice_attrs` (each slice op's attrs, read once); and
    `index` (compile-time index values) from the builder."""

    def _new_tensor(self, kind, t, host_t, arg_index=-1, data=b"") -> int:
        idx = len(self.tensors)
        self.tensors.append(TensorDesc(idx, kind, static_shape(t), mlir_dtype(element_type(t)),
                                       mlir_dtype(element_type(host_t)), arg_index, data))
        return idx

    def ddr(self, v: ir.Value, strided: bool = False) -> tuple[int, tuple, tuple]:
        """DDR box (tensor, offsets, sizes) that value `v` reads; a strided box (`view_strides`)
        only where the caller takes its strides (`strided`)."""
        if v in self.views:
            if not strided and v in self.view_strides:
                raise CompileError("a strided box of a DDR tensor is read other than by a DMA-in")
            return self.views[v]
        if v not in self.tensor_of:
            c = constant_of(v)
            if c is not None:
                dtype = mlir_dtype(element_type(v.type))
                data = np.asarray(c).astype(_np_dtype(dtype)).tobytes()
                self.tensor_of[v] = self._new_tensor("constant", v.type, v.type, -1, data)
            else:
                self.tensor_of[v] = self._new_tensor("scratch", v.type, v.type)
        shape = static_shape(v.type)
        return self.tensor_of[v], (0,) * len(shape), shape

    # -- index arithmetic -------------------------------------------------------

    def _slice_params(self, facts: SliceFacts) -> tuple[list[int], list[int]]:
        """(offsets, sizes) of a slice op (`_slice_facts`) at the current index values."""
        k = 0
        offsets = []
        for x in facts.static_offsets:
            if x < -(1 << 62):
                offsets.append(self.index(facts.dynamic_offsets[k]))
                k += 1
            else:
                offsets.append(x)
        return offsets, facts.sizes

    def _slice_facts(self, op, first_dynamic: int) -> SliceFacts:
        """What a slice op (extract or insert; its dynamic offsets from operand `first_dynamic`)
        reads from the IR, once per op: a tile loop runs the same op thousands of times, and
        each read of an operand makes a new Python object to hash."""
        facts = self.slice_attrs.get(op)
        if facts is None:
            sizes = int_array(op.attributes["static_sizes"])
            if any(s < 0 for s in sizes):
                raise CompileError("dynamic tile sizes are not supported")
            operands, result = tuple(op.operands), op.results[0]
            facts = self.slice_attrs[op] = SliceFacts(int_array(op.attributes["static_offsets"]), sizes,
                                                      operands[first_dynamic:], operands, result,
                                                      static_shape(result.type),
                                                      tuple(int_array(op.attributes["static_strides"])))
        return facts

    # -- execution ------------------------------------------------------------------

    def _slice_view(self, op: ir.Operation) -> None:
        """The DDR box a `tensor.extract_slice` reads: its offsets and sizes (in its source's
        rank) placed on the dims of the DDR tensor its source's dims are (a rank-reducing
        slice drops unit dims: `view_dims` keeps which tensor dims its result's are)."""
        facts = self._slice_facts(op, 1)
        source, res, shape = facts.operands[0], facts.result, facts.result_shape
        tensor, base, base_sizes = self.ddr(source, strided=True)
        offsets, sizes = self._slice_params(facts)
        dims = self.view_dims.get(source, range(len(base)))
        steps = list(self.view_strides.get(source, (1,) * len(base)))
        box_off, box_sizes = list(base), list(base_sizes)
        for i, t in zip(range(len(offsets)), dims):
            box_off[t], box_sizes[t] = base[t] + offsets[i] * steps[t], sizes[i]
            steps[t] *= facts.strides[i] if sizes[i] > 1 else 1
        self.views[res] = (tensor, tuple(box_off), tuple(box_sizes))
        if any(st != 1 for st in steps):
            if source in self.valid:
                raise CompileError(f"{op.name}: a strided box of a padded view")
            self.view_strides[res] = tuple(steps)
        kept = []
        for i, s in enumerate(sizes):
            if len(kept) < len(shape) and s == shape[len(kept)]:
                kept.append(dims[i])
        if len(kept) != len(base):
            self.view_dims[res] = kept
        if source in self.valid:
            self.valid[res] = self.valid[source]

    def _pad_view(self, op: ir.Operation) -> None:
        """The padded tensor as a view of its source's DDR tensor reaching past its edges."""
        source, res = op.operands[0], op.results[0]
        tensor, base, sizes = self.ddr(source)
        if source in self.valid:
            raise CompileError("padding of a padded tensor")
        low = int_array(op.attributes["low"])
        value = op.attributes["value"]
        value = ir.IntegerAttr(value).value if isinstance(value, ir.IntegerAttr) else ir.FloatAttr(value).value
        dims = list(self.view_dims.get(source, range(len(base))))
        box_off, box_sizes = list(base), list(sizes)
        for i, (t, n) in enumerate(zip(dims, static_shape(res.type))):
            box_off[t], box_sizes[t] = base[t] - low[i], n
        self.views[res] = (tensor, tuple(box_off), tuple(box_sizes))
        if len(dims) != len(base):
            self.view_dims[res] = dims
        self.valid[res] = (tuple(base), tuple(sizes), value)

    def _clipped(self, v: ir.Value, op: ir.Operation, k: int):
        """(tensor, offsets, sizes, (pad attr, pad value) or None, operand shape or None) of the
        DMA box operand k of `op` reads (the shape: of the part inside a padded view); a strided
        box's strides are `view_strides[v]`."""
        tensor, off, sizes = self.ddr(v, strided=True)
        if v not in self.valid:
            return tensor, off, sizes, None, None
        lo_v, size_v, value = self.valid[v]
        new_off, new_sizes, low, high = [], [], [], []
        for o, s, vo, vs in zip(off, sizes, lo_v, size_v):
            a, b = max(o, vo), min(o + s, vo + vs)
            if b <= a:
                raise CompileError(f"{op.name}: a tile reads only padding")
            new_off.append(a)
            new_sizes.append(b - a)
            low.append(a - o)
            high.append(o + s - b)
        if not any(low) and not any(high):
            return tensor, tuple(new_off), tuple(new_sizes), None, None
        # the operand's dims among the tensor's (a rank-reducing slice drops unit dims)
        own = list(self.view_dims.get(v, range(len(off))))
        low, high, shape = [low[t] for t in own], [high[t] for t in own], tuple(new_sizes[t] for t in own)
        dims = ir.StringAttr(op.attributes["input_dims"]).value if "input_dims" in op.attributes else ""
        padded = [d for d in range(len(low)) if low[d] or high[d]]
        if k != 0 or "W" not in dims or any(dims[d] not in "HW" for d in padded):
            raise CompileError(f"{op.name}: operand {k} reads padding the op cannot apply")
        w = dims.index("W")
        top_bottom = [low[dims.index("H")], high[dims.index("H")]] if "H" in dims else [0, 0]  # a 1-D conv: W only
        return tensor, tuple(new_off), tuple(new_sizes), (top_bottom + [low[w], high[w]], value), shape
