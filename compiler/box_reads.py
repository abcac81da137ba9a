"""Static boxes of a dispatch input and how a tensor function reads them: a box
read as a copy `linalg.generic` (`box_read_generic`), a strided box folded
into the generics that read it (`fold_strided_box_read`) or, for other readers,
made a unit-stride box of the input passed reshaped (`StrideSplit`)."""

from __future__ import annotations

from dataclasses import dataclass

from iree.compiler import ir

from .ir_utils import int_array, iterator_types, static_shape
from .patterns import Unsupported


def binding_tensor(binding_type: ir.Type) -> tuple[str, ir.Type]:
    """(access, tensor type) of a dispatch binding type."""
    s = str(binding_type)  # !iree_tensor_ext.dispatch.tensor<readonly:tensor<...>>
    inner = s[s.index("<") + 1: -1]
    access, _, tensor = inner.partition(":")
    return access, ir.Type.parse(tensor)


@dataclass
class Box:
    """A static box of a tensor: `sizes` elements at `offsets`, every `strides`-th per dim."""
    offsets: list[int]
    sizes: list[int]
    strides: list[int]

    @property
    def strided(self) -> bool:
        return any(st != 1 for st, sz in zip(self.strides, self.sizes) if sz > 1)


def is_whole(op: ir.Operation, shape: tuple[int, ...]) -> bool:
    """Whether the `dispatch.tensor.load` / `store` `op` reads or writes all of a tensor of `shape`
    (static, at 0, unit strides; its own type may still drop unit dims)."""
    box = static_box(op)
    return box is not None and not any(box.offsets) and all(s == 1 for s in box.strides) \
        and tuple(box.sizes) == tuple(shape)


def argument_index(dispatch: ir.Operation, i: int) -> int:
    """The operand index of argument `i` of a `flow.dispatch.workgroups` (its operands start
    with the workload, which a dispatch of static shapes has not: an index operand's has)."""
    return ir.DenseI32ArrayAttr(dispatch.attributes["operandSegmentSizes"])[0] + i


def dispatch_arguments(dispatch: ir.Operation) -> list[ir.Value]:
    """The arguments of a `flow.dispatch.workgroups`, without its workload."""
    sizes = ir.DenseI32ArrayAttr(dispatch.attributes["operandSegmentSizes"])
    return list(dispatch.operands)[sizes[0]:sizes[0] + sizes[1]]


def static_box(op: ir.Operation) -> Box | None:
    """The static box a `dispatch.tensor.load` / `store` reads or writes, or None if dynamic."""
    try:
        offsets = int_array(op.attributes["static_offsets"])
        strides = int_array(op.attributes["static_strides"])
        sizes = int_array(op.attributes["static_sizes"])
    except KeyError:
        return None
    if any(o < 0 for o in offsets) or any(s < 1 for s in strides) or any(s < 0 for s in sizes) \
            or len(op.operands) > 2:
        return None  # negative values are the dynamic sentinel; more operands are dynamic values
    return Box(offsets, sizes, strides)


def box_map(source: ir.Type, box: Box, result: ir.Type) -> ir.AffineMap | None:
    """The map from `result` indices to the `source` indices of `box`, or None.

    The result may drop unit dims of the box (a rank-reducing load); they
    are matched from the left, as `tensor.extract_slice` infers them. Each
    kept dim is read at `stride * d + offset`, each dropped one at its
    constant offset. None when the box is no such read or leaves the source.
    """
    src, res = static_shape(source), static_shape(result)
    n = len(src) if src is not None else -1
    if src is None or res is None or not len(box.offsets) == len(box.sizes) == len(box.strides) == n:
        return None
    if any(s and o + (s - 1) * st >= d for o, s, st, d in zip(box.offsets, box.sizes, box.strides, src)):
        return None
    exprs, j = [], 0
    for o, s, st in zip(box.offsets, box.sizes, box.strides):
        if j < len(res) and s == res[j]:
            e = ir.AffineExpr.get_dim(j)
            if st != 1 and s > 1:
                e = ir.AffineExpr.get_mul(e, ir.AffineExpr.get_constant(st))
            exprs.append(ir.AffineExpr.get_add(e, ir.AffineExpr.get_constant(o)) if o else e)
            j += 1
        elif s == 1:
            exprs.append(ir.AffineExpr.get_constant(o))
        else:
            return None
    if j != len(res):
        return None
    return ir.AffineMap.get(len(res), 0, exprs)


def generic_can_read(source: ir.Type, box: Box, result: ir.Type) -> bool:
    """Whether a box read generic can express `box`: linalg takes a loop's range from
    any operand dim its map reads as a plain `d`, so a box that starts at 0 and stops
    short of the source's end on a kept dim has no valid generic (the verifier would
    take the source's size for the loop's)."""
    src, res = static_shape(source), static_shape(result)
    j = 0
    for o, s, st, d in zip(box.offsets, box.sizes, box.strides, src):
        if j < len(res) and s == res[j]:
            if o == 0 and (st == 1 or s == 1) and s < d:  # read as a plain d (a stride makes it `st * d`)
                return False
            j += 1
    return True


def box_read_generic(source: ir.Value, box: Box, result: ir.Type) -> ir.Value:
    """A copy generic reading the unit-stride `box` (`box_map`) of `source`, at the insertion point."""
    return copy_generic(source, box_map(source.type, box, result), result)


def copy_generic(source: ir.Value, read_map: ir.AffineMap, result: ir.Type) -> ir.Value:
    """A copy generic writing `result` (identity map) from `source` read through `read_map`,
    at the insertion point."""
    res = static_shape(result)
    elt = ir.RankedTensorType(result).element_type
    dims = ", ".join(f"d{k}" for k in range(len(res)))
    parallel = ", ".join(['"parallel"'] * len(res))
    template = ir.Module.parse(f"""
func.func @box(%src: {source.type}) -> {result} {{
  %e = tensor.empty() : {result}
  %r = linalg.generic {{indexing_maps = [{ir.AffineMapAttr.get(read_map)},
                                         affine_map<({dims}) -> ({dims})>],
                        iterator_types = [{parallel}]}}
      ins(%src : {source.type}) outs(%e : {result}) {{
  ^bb0(%in: {elt}, %out: {elt}):
    linalg.yield %in : {elt}
  }} -> {result}
  return %r : {result}
}}""")
    empty, copy = [o.operation for o in template.body.operations[0].regions[0].blocks[0].operations][:2]
    empty = empty.clone()
    copy = copy.clone()
    copy.operands[0] = source
    copy.operands[1] = empty.results[0]
    return copy.results[0]


def _generic_inputs_reading(value: ir.Value) -> list[tuple[ir.Operation, int]] | None:
    """(user, operand index) of every use of `value`, if each is an input of a
    `linalg.generic`; None otherwise."""
    out = []
    for use in value.uses:
        user = use.owner
        if isinstance(user, ir.Block) or user.name != "linalg.generic":
            return None
        n_ins = list(ir.DenseI32ArrayAttr(user.attributes["operandSegmentSizes"]))[0]
        if use.operand_number >= n_ins:
            return None
        out.append((user, use.operand_number))
    return out


def check_strided_readers(value: ir.Value) -> None:
    """Refuses (Unsupported) a strided box load that cannot fold into its readers."""
    if _generic_inputs_reading(value) is None:
        users = sorted({u.owner.name for u in value.uses if not isinstance(u.owner, ir.Block)})
        raise Unsupported(f"dispatch loads a strided part of an input that {', '.join(users) or 'a block'} "
                          f"reads (only a linalg.generic input takes the stride into its indexing map)")


def fold_strided_box_read(value: ir.Value, source: ir.Value, box_map: ir.AffineMap) -> None:
    """Make every generic reading `value` (a box of `source` at `box_map`) read `source` itself.

    The reader's indexing map of that input becomes `box_map` composed with
    it: a 1x1 convolution map `(o, y, x, c) -> (c, y, x)` over the box
    `(c, y, x) -> (c, 2 * y, 2 * x)` gives `(o, y, x, c) -> (c, 2 * y, 2 * x)`,
    the map of a 1x1 convolution with stride 2. The readers were checked by
    `check_strided_readers`.
    """
    readers = _generic_inputs_reading(value)
    assert readers is not None
    for user, k in readers:  # all uses collected before any is changed
        maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(user.attributes["indexing_maps"])]
        m = maps[k]
        maps[k] = ir.AffineMap.get(m.n_dims, m.n_symbols, [e.compose(m) for e in box_map.results])
        user.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(x) for x in maps])
        user.operands[k] = source


def folds_into_readers(value: ir.Value) -> bool:
    """Whether a strided box load folds into its readers (`fold_strided_box_read`): each an
    input of a generic with a reduction loop (a convolution reading every 2nd pixel); an
    elementwise generic reads a box as a box (`StrideSplit`)."""
    readers = _generic_inputs_reading(value)
    return readers is not None and all("reduction" in iterator_types(user) for user, _ in readers)


@dataclass(frozen=True)
class StrideSplit:
    """An input read with stride s along some dims, passed reshaped so that each such dim of
    extent n becomes (n / s, s): a box read every s-th element from offset o is then the
    unit-stride box at (o // s, o % s) of sizes (size, 1), which a DMA reads like any box
    (GPT-J's interleaved rotary reads x[..., 0::2] and x[..., 1::2])."""
    strides: tuple[tuple[int, int], ...]  # (dim, stride), ascending dims

    def shape(self, shape: tuple[int, ...]) -> list[int]:
        split = dict(self.strides)
        out: list[int] = []
        for i, n in enumerate(shape):
            out += [n // split[i], split[i]] if i in split else [n]
        return out

    def tensor_type(self, t: ir.Type) -> ir.Type:
        return ir.RankedTensorType.get(self.shape(static_shape(t)), ir.RankedTensorType(t).element_type)

    def box(self, box: Box) -> Box:
        split = dict(self.strides)
        offsets, sizes = [], []
        for i, (o, n) in enumerate(zip(box.offsets, box.sizes)):
            if i in split:
                offsets += [o // split[i], o % split[i]]
                sizes += [n, 1]
            else:
                offsets.append(o)
                sizes.append(n)
        return Box(offsets, sizes, [1] * len(sizes))


def stride_split(source: ir.Type, loads: list[tuple[Box, ir.Type]]) -> StrideSplit | None:
    """The reshape of `source` that makes each of its loads (box, result type) a unit-stride
    box, or None: every load reads a strided dim at one stride (or one element of it), the
    stride divides the dim, each box stays within it and each result is a box of the
    reshaped input (`box_map`)."""
    shape = static_shape(source)
    strides: dict[int, int] = {}
    for box, _ in loads:
        for i, (st, n) in enumerate(zip(box.strides, box.sizes)):
            if n > 1 and st != 1 and strides.setdefault(i, st) != st:
                return None
    if not strides or any(shape[i] % st for i, st in strides.items()):
        return None
    split = StrideSplit(tuple(sorted(strides.items())))
    for box, result in loads:
        if any(box.sizes[i] > 1 and box.strides[i] != st or box.offsets[i] // st + box.sizes[i] > shape[i] // st
               for i, st in strides.items()):
            return None
        if box_map(split.tensor_type(source), split.box(box), result) is None:
            return None
    return split
