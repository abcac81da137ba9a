"""The integer requantization generic that replaces a float one (compiler/requant.py).

`rescale_generic` writes, as MLIR text parsed into a template module, one
linalg.generic computing per element, in 64-bit integers (TOSA rescale's
arithmetic with a free rounding term):

    q = clamp(((a + offset_c) * multiplier_c + rounding_c) >> shift_c, qmin_c, qmax_c)

from the accumulator a, then the steps split off after it
(compiler/requant_split.py): a residual add as a rescale of the sum of two
int8 levels (the residual an int8 tensor, or an i32 one rescaled like a
first), or a lookup in an activation table. Parameters equal on every
channel are constants; the others are i32 tensors read along the channel
dim. The Torq lowering decodes the body into epilogue steps
(patterns.decode_elementwise), so it uses only ops those have.
"""

from __future__ import annotations

import numpy as np
from iree.compiler import ir

from .f32_chain import type_name
from .ir_utils import indexing_maps, iterator_types, map_dims, static_shape
from .requant_split import ActivationTable
from .requant_zero_point import prologue_lines
from .rescale_fit import Rescale
from .rescale_pairs import ProductRescale, SumRescale

PARAMS = ("offset", "multiplier", "rounding", "shift", "qmin", "qmax")


def _split_params(rescales: list[Rescale], prefix: str) -> tuple[dict, list]:
    """({param: value} equal on every channel, [(tensor name, per-channel values)])."""
    scalars, tensors = {}, []
    for p in PARAMS:
        vals = [getattr(r, p) for r in rescales]
        if len(set(vals)) == 1:
            scalars[p] = vals[0]
        else:
            tensors.append((f"{prefix}{p}", vals))
    return scalars, tensors


def _rescale_lines(v: str, scalars: dict, prefix: str, lines: list[str]) -> str:
    """Appends the rescale of i64 value `v` to `lines`; returns the name of its result."""

    def param(p):
        if p in scalars:
            lines.append(f"%{prefix}{p}64 = arith.constant {scalars[p]} : i64")
        else:
            lines.append(f"%{prefix}{p}64 = arith.extsi %in_{prefix}{p} : i32 to i64")
        return f"%{prefix}{p}64"

    if scalars.get("offset") != 0:
        lines.append(f"%{prefix}shifted = arith.addi {v}, {param('offset')} : i64")
        v = f"%{prefix}shifted"
    lines.append(f"%{prefix}scaled = arith.muli {v}, {param('multiplier')} : i64")
    v = f"%{prefix}scaled"
    if scalars.get("rounding") != 0:
        lines.append(f"%{prefix}rounded = arith.addi {v}, {param('rounding')} : i64")
        v = f"%{prefix}rounded"
    if scalars.get("shift") != 0:
        lines.append(f"%{prefix}down = arith.shrsi {v}, {param('shift')} : i64")
        v = f"%{prefix}down"
    lines.append(f"%{prefix}above = arith.maxsi {v}, {param('qmin')} : i64")
    lines.append(f"%{prefix}below = arith.minsi %{prefix}above, {param('qmax')} : i64")
    return f"%{prefix}below"


def _sum_lines(r: SumRescale, u: str, v: str, p: str = "s") -> list[str]:
    """Body lines computing the integer rescale of the sum of (`u`, `v`) (i64) into %{p}um_q."""
    return [f"%{p}u_m = arith.constant {r.mu} : i64", f"%{p}v_m = arith.constant {r.mv} : i64",
            f"%{p}_r = arith.constant {r.rounding} : i64", f"%{p}_s = arith.constant {r.shift} : i64",
            f"%{p}_lo = arith.constant {r.qmin} : i64", f"%{p}_hi = arith.constant {r.qmax} : i64",
            f"%{p}u = arith.muli {u}, %{p}u_m : i64", f"%{p}v = arith.muli {v}, %{p}v_m : i64",
            f"%{p}s = arith.addi %{p}u, %{p}v : i64", f"%{p}r = arith.addi %{p}s, %{p}_r : i64",
            f"%{p}d = arith.shrsi %{p}r, %{p}_s : i64", f"%{p}a = arith.maxsi %{p}d, %{p}_lo : i64",
            f"%{p}um_q = arith.minsi %{p}a, %{p}_hi : i64"]


def _product_lines(r: ProductRescale, u: str, v: str, p: str) -> list[str]:
    """Body lines computing the integer rescale of the product of (`u`, `v`) (i64) into %{p}q."""
    return [f"%{p}zu = arith.constant {r.zu} : i64", f"%{p}zv = arith.constant {r.zv} : i64",
            f"%{p}m = arith.constant {r.multiplier} : i64", f"%{p}r = arith.constant {r.rounding} : i64",
            f"%{p}s = arith.constant {r.shift} : i64", f"%{p}lo = arith.constant {r.qmin} : i64",
            f"%{p}hi = arith.constant {r.qmax} : i64",
            f"%{p}u = arith.subi {u}, %{p}zu : i64", f"%{p}v = arith.subi {v}, %{p}zv : i64",
            f"%{p}uv = arith.muli %{p}u, %{p}v : i64", f"%{p}scaled = arith.muli %{p}uv, %{p}m : i64",
            f"%{p}rounded = arith.addi %{p}scaled, %{p}r : i64", f"%{p}down = arith.shrsi %{p}rounded, %{p}s : i64",
            f"%{p}above = arith.maxsi %{p}down, %{p}lo : i64", f"%{p}q = arith.minsi %{p}above, %{p}hi : i64"]


def _table_lines(t: ActivationTable, level: str, q_type: str, p: str = "t_", out: str = "%q") -> list[str]:
    """Body lines looking the `level` (i64) up in the activation table into `out` (`q_type`)."""
    n = len(t.entries)
    entries = ", ".join(str(int(e)) for e in t.entries)
    return [f"%{p}first = arith.constant {-t.first} : i64", f"%{p}i64 = arith.addi {level}, %{p}first : i64",
            f"%{p}index = arith.index_cast %{p}i64 : i64 to index",
            f"%{p}table = arith.constant dense<[{entries}]> : tensor<{n}x{q_type}>",
            f"{out} = tensor.extract %{p}table[%{p}index] : tensor<{n}x{q_type}>"]


def _segment_lines(tables: list[ActivationTable], level: str, lines: list[str]) -> str:
    """Appends to `lines` the sum of the segment tables of requant_fused_activation at grid level
    `level` (i64), segment i looking up clamp(level - 255 i + 1, 0, 255); returns its name."""
    terms = []
    for i, t in enumerate(tables):
        p = f"seg{i}_"
        lines += [f"%{p}off = arith.constant {1 - 255 * i + t.first} : i64",
                  f"%{p}lo = arith.constant {t.first} : i64", f"%{p}hi = arith.constant {t.first + 255} : i64",
                  f"%{p}u = arith.addi {level}, %{p}off : i64", f"%{p}above = arith.maxsi %{p}u, %{p}lo : i64",
                  f"%{p}j = arith.minsi %{p}above, %{p}hi : i64"]
        lines += _table_lines(t, f"%{p}j", "i16", p, f"%{p}e")
        lines.append(f"%{p}e64 = arith.extsi %{p}e : i16 to i64")
        terms.append(f"%{p}e64")
    total = terms[0]
    for k, term in enumerate(terms[1:]):
        lines.append(f"%segsum{k} = arith.addi {total}, {term} : i64")
        total = f"%segsum{k}"
    return total


def stage_lines(stages, names: dict, lines: list[str], tensors: list, prefix: str = "s") -> str:
    """Appends the integer arithmetic of `stages` (requant_elementwise.Stage) to `lines`, reading
    each leaf by its i64 name in `names` (extended with each stage's value); per-channel
    parameters are appended to `tensors` as (name, values). Returns the last value's name."""
    for k, st in enumerate(stages):
        p = f"{prefix}{k}_"
        leaves = [names[v] for v in st.leaves]
        if st.kind == "identity":
            names[st.value] = leaves[0]
        elif st.kind == "rescale":
            scalars, ts = _split_params(st.rescales, p)
            tensors += ts
            names[st.value] = _rescale_lines(leaves[0], scalars, p, lines)
        elif st.kind == "table":
            q_type = st.table_type or type_name(st.value.type)
            lines += _table_lines(st.table, leaves[0], q_type, p, f"%{p}q")
            lines.append(f"%{p}level = arith.extsi %{p}q : {q_type} to i64")
            names[st.value] = f"%{p}level"
        elif st.kind == "sum":
            lines += _sum_lines(st.pair.rescale, leaves[0], leaves[1], p)
            names[st.value] = f"%{p}um_q"
        else:
            lines += _product_lines(st.pair.rescale, leaves[0], leaves[1], p)
            names[st.value] = f"%{p}q"
    return names[stages[-1].value]


def rescale_generic(plan) -> str:
    """A module whose function @rescale holds the integer requantization of `plan` (a
    requant._Plan): arguments the accumulator and, with a residual add, the residual."""
    op = plan.op
    acc_t = op.operands[plan.acc_index].type
    shape = static_shape(op.results[0].type)
    out_t = f"tensor<{'x'.join(map(str, shape))}x{plan.q_type}>"
    rank = len(shape)
    # The output as the float op wrote it: a permutation of its loops, which the channel dims
    # (result dims) are mapped through (_channel_loops). The accumulator and a residual are
    # read as the float op read them.
    ident = str(ir.AffineMapAttr.get(indexing_maps(op)[-1]))
    acc_map = str(ir.AffineMapAttr.get(indexing_maps(op)[plan.acc_index]))
    res_map = str(ir.AffineMapAttr.get(indexing_maps(op)[plan.residual_index])) if plan.residual_index >= 0 else ""
    scalars, tensors = _split_params(plan.rescales, "")
    res = plan.residual_index >= 0
    res_t = str(op.operands[plan.residual_index].type) if res else ""
    res_elt = str(ir.RankedTensorType(op.operands[plan.residual_index].type).element_type) if res else ""
    res_scalars: dict = {}
    if plan.residual_rescales is not None:
        res_scalars, res_tensors = _split_params(plan.residual_rescales, "r_")
        tensors += res_tensors
    corr = plan.correction.operands if plan.correction else []
    body = "\n    ".join(_rescale_body(plan, scalars, res_scalars, tensors, res_elt))
    # Per-channel parameters: i32 tensors over the channel dims, read along them.
    p_ins, p_consts, _ = _param_ins(tensors, *_channel_loops(op, plan.chan), rank)
    param_t = p_ins[0][1] if p_ins else ""
    chan_map = p_ins[0][2] if p_ins else ""
    consts = "\n".join(p_consts)
    corr_t = [str(op.operands[i].type) for i in corr]
    corr_maps = [str(ir.AffineMapAttr.get(indexing_maps(op)[i])) for i in corr]
    ins = ", ".join(["%acc"] + ["%res"] * res + [f"%zt{j}" for j in range(len(corr))] + [f"%{p}" for p, _ in tensors])
    in_types = ", ".join([str(acc_t)] + [res_t] * res + corr_t + [param_t] * len(tensors))
    maps = ", ".join([acc_map] + [res_map] * res + corr_maps + [chan_map] * len(tensors) + [ident])
    args = ", ".join(["%a: i32"] + [f"%r: {res_elt}"] * res + [f"%z{j}: i32" for j in range(len(corr))] +
                     [f"%in_{p}: i32" for p, _ in tensors] + [f"%out: {plan.q_type}"])
    parallel = ", ".join(['"parallel"'] * rank)
    res_arg = f", %res: {res_t}" if res else ""
    res_arg += "".join(f", %zt{j}: {t}" for j, t in enumerate(corr_t))
    return f"""
func.func @rescale(%acc: {acc_t}{res_arg}) -> {out_t} {{
{consts}
  %e = tensor.empty() : {out_t}
  %g = linalg.generic {{indexing_maps = [{maps}], iterator_types = [{parallel}]}}
      ins({ins} : {in_types}) outs(%e : {out_t}) {{
  ^bb0({args}):
    {body}
  }} -> {out_t}
  return %g : {out_t}
}}"""


def _rescale_body(plan, scalars: dict, res_scalars: dict, tensors: list, res_elt: str) -> list[str]:
    """The body of `rescale_generic`'s generic: the accumulator (its zero-point correction
    first) rescaled, the later stages, the residual add, the table or the narrowing."""
    op = plan.op
    corr = plan.correction.operands if plan.correction else []
    lines: list[str] = []
    acc = prologue_lines(plan.correction, op, "%a", {i: f"%z{j}" for j, i in enumerate(corr)}, lines) \
        if corr else "%a"
    lines.append(f"%a64 = arith.extsi {acc} : i32 to i64")
    residual = f"%r64 = arith.extsi %r : {res_elt} to i64"
    acc = "%a64"
    if plan.accumulator_residual is not None:  # the residual in accumulator units, added first
        lines.append(residual)
        r_level = _rescale_lines("%r64", res_scalars, "r_", lines) if plan.residual_rescales is not None else "%r64"
        h_scalars, h_tensors = _split_params(plan.accumulator_residual, "h_")
        tensors += h_tensors
        lines.append(f"%ah64 = arith.addi %a64, {_rescale_lines(r_level, h_scalars, 'h_', lines)} : i64")
        acc = "%ah64"
    level = _rescale_lines(acc, scalars, "", lines)
    if plan.rest_other is not None:  # the stages read the residual: no add of their own
        lines.append(residual)
    if plan.rest_stages:  # they precede the residual add, or read the residual (requant._plan)
        leaves = {plan.rest_leaf: level} | ({plan.rest_other: "%r64"} if plan.rest_other is not None else {})
        level = stage_lines(plan.rest_stages, leaves, lines, tensors, "then")
    if plan.sum_rescale is not None:
        lines.append(residual)
        r_level = _rescale_lines("%r64", res_scalars, "r_", lines) if plan.residual_rescales is not None else "%r64"
        lines += _sum_lines(plan.sum_rescale, level, r_level)
        level = "%sum_q"
    if plan.activation_tables is not None:  # the grid level's segments looked up and summed
        total = _segment_lines(plan.activation_tables, level, lines)
        if plan.activation_floor is not None:  # above the grid, the floored linear rescale decides
            f_scalars, f_tensors = _split_params(plan.activation_floor, "f_")
            tensors += f_tensors
            lines.append(f"%floored = arith.minsi {total}, {_rescale_lines(acc, f_scalars, 'f_', lines)} : i64")
            total = "%floored"
        lines.append(f"%q = arith.trunci {total} : i64 to {plan.q_type}")
    elif plan.table is not None:
        lines += _table_lines(plan.table, level, plan.q_type)
    else:
        lines.append(f"%q = arith.trunci {level} : i64 to {plan.q_type}")
    lines.append(f"linalg.yield %q : {plan.q_type}")
    return lines


def _generic_text(result: str, ins: list[tuple[str, str, str]], init: str, out_t: str, out_map: str,
                  iterators: list[str], block_args: list[str], lines: list[str]) -> str:
    """`result = linalg.generic` over `ins` [(value, type, map)] into `init`, with body `lines`."""
    maps = ", ".join([m for _, _, m in ins] + [out_map])
    its = ", ".join(f'"{i}"' for i in iterators)
    body = "\n    ".join(lines)
    return f"""  {result} = linalg.generic {{indexing_maps = [{maps}], iterator_types = [{its}]}}
      ins({", ".join(v for v, _, _ in ins)} : {", ".join(t for _, t, _ in ins)}) outs({init} : {out_t}) {{
  ^bb0({", ".join(block_args)}):
    {body}
  }} -> {out_t}"""


def _param_ins(tensors: list, chan_loops: list[int], grid: list[int], rank: int) -> tuple[list, list[str], list[str]]:
    """(ins, module-level constant lines, block args) of per-channel parameter tensors: i32
    tensors of shape `grid` read along the loops `chan_loops`."""
    dims = ", ".join(f"d{k}" for k in range(rank))
    ins, consts, args = [], [], []
    for name, vals in tensors:
        t = f"tensor<{''.join(f'{n}x' for n in grid)}i32>"
        consts.append(f"  %{name} = arith.constant dense<{np.reshape(vals, grid).tolist()}> : {t}")
        ins.append((f"%{name}", t, f"affine_map<({dims}) -> ({', '.join(f'd{k}' for k in chan_loops)})>"))
        args.append(f"%in_{name}: i32")
    return ins, consts, args


def _channel_loops(op: ir.Operation, chan: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """(the loops the result dims `chan` of `op` are written along, their extents)."""
    out_loops = map_dims(indexing_maps(op)[-1])
    shape = static_shape(op.results[0].type)
    return [out_loops[d] for d in chan], [shape[d] for d in chan]


def _leaf_lines(variables: list[ir.Value], block_values: list[ir.Value], names: dict) -> tuple[list[str], list[str]]:
    """(block args, lines) reading each variable input as %x<k> and naming its i64 value."""
    args, lines = [], []
    for k, (v, b) in enumerate(zip(variables, block_values)):
        elt = str(ir.RankedTensorType(v.type).element_type)
        args.append(f"%x{k}: {elt}")
        lines.append(f"%x{k}_64 = arith.extsi %x{k} : {elt} to i64")
        names[b] = f"%x{k}_64"
    return args, lines


def elementwise_function(op: ir.Operation, variables: list[int], stages, chan: tuple[int, ...],
                         correction: tuple | None = None) -> str:
    """A module whose function @int8 computes generic `op` (E in compiler/requant_elementwise.py)
    as `stages`, from the inputs `variables` (operand indices, the function's arguments); with
    `correction` (requant_zero_point.separate_correction), a' is computed first, in i32."""
    maps = indexing_maps(op)
    out_t = str(op.results[0].type)
    q_type = str(ir.RankedTensorType(op.results[0].type).element_type)
    rank = maps[-1].n_dims
    block = op.regions[0].blocks[0]
    names: dict = {}
    args, lines = _leaf_lines([op.operands[i] for i in variables], [block.arguments[i] for i in variables], names)
    if correction is not None:
        acc_index, corr = correction
        arg_of = {i: f"%x{k}" for k, i in enumerate(variables)}
        corrected = prologue_lines(corr, op, arg_of[acc_index], {i: arg_of[i] for i in corr.operands}, lines)
        lines.append(f"%corrected64 = arith.extsi {corrected} : i32 to i64")
        names[corr.corrected] = "%corrected64"
    tensors: list = []
    level = stage_lines(stages, names, lines, tensors)
    lines += [f"%q = arith.trunci {level} : i64 to {q_type}", f"linalg.yield %q : {q_type}"]
    p_ins, consts, p_args = _param_ins(tensors, *_channel_loops(op, chan), rank)
    ins = [(f"%v{k}", str(op.operands[i].type), str(ir.AffineMapAttr.get(maps[i]))) for k, i in enumerate(variables)]
    its = iterator_types(op)
    generic = _generic_text("%g", ins + p_ins, "%e", out_t, str(ir.AffineMapAttr.get(maps[-1])), its,
                            args + p_args + [f"%out: {q_type}"], lines)
    sig = ", ".join(f"%v{k}: {op.operands[i].type}" for k, i in enumerate(variables))
    return "\n".join([f"func.func @int8({sig}) -> {out_t} {{", *consts, f"  %e = tensor.empty() : {out_t}",
                      generic, f"  return %g : {out_t}", "}"])


def pooling_function(red: ir.Operation, variables: list[int], pooled, red_chan: tuple[int, ...],
                     quant: ir.Operation, sum_index: int, stages, quant_chan: tuple[int, ...]) -> str:
    """A module whose function @int8 computes the f32 sum reduction `red` and the quantize
    `quant` of its result (R in compiler/requant_elementwise.py): an i32 sum of the int8
    level `pooled` (a requant_elementwise.PooledSum) from the inputs `variables` of `red`,
    then `stages` on that sum."""
    r_maps, q_maps = indexing_maps(red), indexing_maps(quant)
    sum_t = str(ir.RankedTensorType.get(static_shape(red.results[0].type), ir.IntegerType.get_signless(32)))
    out_t = str(quant.results[0].type)
    q_type = str(ir.RankedTensorType(quant.results[0].type).element_type)
    block = red.regions[0].blocks[0]
    names: dict = {}
    args, lines = _leaf_lines([red.operands[i] for i in variables], [block.arguments[i] for i in variables], names)
    tensors: list = []
    level = stage_lines(pooled.stages, names, lines, tensors, "p") if pooled.stages else names[pooled.level]
    lines += [f"%w = arith.trunci {level} : i64 to i32", "%sum = arith.addi %acc, %w : i32", "linalg.yield %sum : i32"]
    r_ins, consts, p_args = _param_ins(tensors, *_channel_loops(red, red_chan), r_maps[-1].n_dims)
    ins = [(f"%v{k}", str(red.operands[i].type), str(ir.AffineMapAttr.get(r_maps[i]))) for k, i in enumerate(variables)]
    its = iterator_types(red)
    reduction = _generic_text("%s", ins + r_ins, "%init", sum_t, str(ir.AffineMapAttr.get(r_maps[-1])), its,
                              args + p_args + ["%acc: i32"], lines)
    names, lines, tensors = {quant.regions[0].blocks[0].arguments[sum_index]: "%S64"}, \
        ["%S64 = arith.extsi %S : i32 to i64"], []
    level = stage_lines(stages, names, lines, tensors)
    lines += [f"%q = arith.trunci {level} : i64 to {q_type}", f"linalg.yield %q : {q_type}"]
    q_ins, q_consts, q_args = _param_ins(tensors, *_channel_loops(quant, quant_chan), q_maps[-1].n_dims)
    its = iterator_types(quant)
    quantize = _generic_text("%g", [("%s", sum_t, str(ir.AffineMapAttr.get(q_maps[sum_index])))] + q_ins, "%e",
                             out_t, str(ir.AffineMapAttr.get(q_maps[-1])), its,
                             ["%S: i32"] + q_args + [f"%out: {q_type}"], lines)
    sig = ", ".join(f"%v{k}: {red.operands[i].type}" for k, i in enumerate(variables))
    return "\n".join([f"func.func @int8({sig}) -> {out_t} {{", *consts, *q_consts, "  %zero = arith.constant 0 : i32",
                      f"  %se = tensor.empty() : {sum_t}",
                      f"  %init = linalg.fill ins(%zero : i32) outs(%se : {sum_t}) -> {sum_t}", reduction,
                      f"  %e = tensor.empty() : {out_t}", quantize, f"  return %g : {out_t}", "}"])


def permuted_copy(src_t: ir.Type, result_t: ir.Type, read: ir.AffineMap, write: ir.AffineMap) -> str:
    """A module whose function @copy writes its i32 argument (`src_t`) read through `read` into
    the layout of `result_t` through `write` (an accumulator the NPU writes transposed, for the
    host's dequantize tail, which reads it as it is)."""
    shape = static_shape(result_t)
    out_t = f"tensor<{'x'.join(map(str, shape))}xi32>"
    parallel = ", ".join(['"parallel"'] * read.n_dims)
    return f"""
func.func @copy(%acc: {src_t}) -> {out_t} {{
  %e = tensor.empty() : {out_t}
  %g = linalg.generic {{indexing_maps = [{ir.AffineMapAttr.get(read)}, {ir.AffineMapAttr.get(write)}],
                       iterator_types = [{parallel}]}} ins(%acc : {src_t}) outs(%e : {out_t}) {{
  ^bb0(%a: i32, %o: i32):
    linalg.yield %a : i32
  }} -> {out_t}
  return %g : {out_t}
}}"""
