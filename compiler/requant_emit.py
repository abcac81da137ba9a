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

from iree.compiler import ir

from .ir_utils import indexing_maps, static_shape
from .requant_split import ActivationTable
from .rescale_fit import Rescale, SumRescale

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


def _sum_lines(r: SumRescale, u: str, v: str) -> list[str]:
    """Body lines computing the residual add's integer rescale of (`u`, `v`) (i64) into %sum_q."""
    return [f"%su_m = arith.constant {r.mu} : i64", f"%sv_m = arith.constant {r.mv} : i64",
            f"%s_r = arith.constant {r.rounding} : i64", f"%s_s = arith.constant {r.shift} : i64",
            f"%s_lo = arith.constant {r.qmin} : i64", f"%s_hi = arith.constant {r.qmax} : i64",
            f"%su = arith.muli {u}, %su_m : i64", f"%sv = arith.muli {v}, %sv_m : i64",
            "%ss = arith.addi %su, %sv : i64", "%sr = arith.addi %ss, %s_r : i64",
            "%sd = arith.shrsi %sr, %s_s : i64", "%sa = arith.maxsi %sd, %s_lo : i64",
            "%sum_q = arith.minsi %sa, %s_hi : i64"]


def _table_lines(t: ActivationTable, level: str, q_type: str) -> list[str]:
    """Body lines looking the stage-1 `level` (i64) up in the activation table into %q."""
    n = len(t.entries)
    entries = ", ".join(str(int(e)) for e in t.entries)
    return [f"%t_first = arith.constant {-t.first} : i64", f"%t_i64 = arith.addi {level}, %t_first : i64",
            "%t_index = arith.index_cast %t_i64 : i64 to index",
            f"%t_table = arith.constant dense<[{entries}]> : tensor<{n}x{q_type}>",
            f"%q = tensor.extract %t_table[%t_index] : tensor<{n}x{q_type}>"]


def rescale_generic(plan) -> str:
    """A module whose function @rescale holds the integer requantization of `plan` (a
    requant._Plan): arguments the accumulator and, with a residual add, the residual."""
    op = plan.op
    acc_t = op.operands[plan.acc_index].type
    shape = static_shape(op.results[0].type)
    out_t = f"tensor<{'x'.join(map(str, shape))}x{plan.q_type}>"
    rank = len(shape)
    dims = ", ".join(f"d{k}" for k in range(rank))
    ident = f"affine_map<({dims}) -> ({dims})>"
    acc_map = str(ir.AffineMapAttr.get(indexing_maps(op)[plan.acc_index]))  # read as the float op read it
    scalars, tensors = _split_params(plan.rescales, "")
    res = plan.residual_index >= 0
    res_t = str(op.operands[plan.residual_index].type) if res else ""
    res_elt = str(ir.RankedTensorType(op.operands[plan.residual_index].type).element_type) if res else ""
    res_scalars: dict = {}
    if plan.residual_rescales is not None:
        res_scalars, res_tensors = _split_params(plan.residual_rescales, "r_")
        tensors += res_tensors
    n = len(plan.rescales)
    chan_map = f"affine_map<({dims}) -> (d{plan.chan})>" if plan.chan is not None else ""
    consts = "\n".join(f"  %{p} = arith.constant dense<{vals}> : tensor<{n}xi32>" for p, vals in tensors)
    ins = ", ".join(["%acc"] + ["%res"] * res + [f"%{p}" for p, _ in tensors])
    in_types = ", ".join([str(acc_t)] + [res_t] * res + [f"tensor<{n}xi32>"] * len(tensors))
    maps = ", ".join([acc_map] + [ident] * res + [chan_map] * len(tensors) + [ident])
    args = ", ".join(["%a: i32"] + [f"%r: {res_elt}"] * res + [f"%in_{p}: i32" for p, _ in tensors] +
                     [f"%out: {plan.q_type}"])
    lines = ["%a64 = arith.extsi %a : i32 to i64"]
    level = _rescale_lines("%a64", scalars, "", lines)
    if res:
        lines.append(f"%r64 = arith.extsi %r : {res_elt} to i64")
        r_level = _rescale_lines("%r64", res_scalars, "r_", lines) if plan.residual_rescales is not None else "%r64"
        lines += _sum_lines(plan.sum_rescale, level, r_level)
        level = "%sum_q"
    if plan.table is not None:
        lines += _table_lines(plan.table, level, plan.q_type)
    else:
        lines.append(f"%q = arith.trunci {level} : i64 to {plan.q_type}")
    lines.append(f"linalg.yield %q : {plan.q_type}")
    body = "\n    ".join(lines)
    parallel = ", ".join(['"parallel"'] * rank)
    res_arg = f", %res: {res_t}" if res else ""
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
