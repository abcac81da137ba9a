"""Torq lowering patterns: one matcher per pattern, used in two modes.

Modules, by family: `model` (Unsupported, Contraction, Gather, Match, the
epilogue's typed attr), `contraction` (convs and matmuls), `reduction`
(pooling, reductions, gathering reductions, `classify_principal`),
`elementwise` (bodies decoded into epilogue steps), `inits` (fills and
broadcast accumulators), `padding` (padding folded into its consumers,
copies) and `groups` (`match_group`).

`torq-mark-patterns-for-super-tiling` runs the matchers in *mark* mode (tag
the ops of each group with `torq-fuse-group` / `torq-fuse-group-id`);
`torq-lower-to-torq-hl` runs the same matchers in *rewrite* mode (replace the
group with one TorqHL op). Because both modes share `match_group`, marking and
lowering cannot disagree.

Groups (principal op first):
- conv2d: a convolution-shaped `linalg.generic` (+ the `linalg.fill` of its
  accumulator, + an optional elementwise epilogue generic that is its only user:
  bias, batch-norm scale/shift, ReLU/ReLU6/clamp, residual add, ...); also
  grouped convolutions (a channel dim shared by input, weight and output next
  to per-group input and/or output channels), whose bias IREE may put in the
  accumulator (a broadcast init becomes an epilogue add), and 1x1
  convolutions that are no matmul (two or three spatial/batch dims);
- depthwise_conv2d: a conv whose only channel dim is shared by input, weight
  and output (torch Conv2d(groups=C), TOSA depthwise_conv2d with multiplier 1),
  same fill and epilogue;
- matmul: a matmul-shaped generic (B?, M, N, K; up to two dims each of B and
  N, four of M: patches x heads, unfolded patches), same fill and epilogue;
  an epilogue that reads the result transposed (attention's P V followed by
  a head transpose) is folded by writing the result in that order (the
  matmul's output_dims);
- maxpool2d / avg_pool2d: a pooling generic (input read at `out * stride + k
  * dilation`, a shape-only window operand, body `max(out, in)` or
  `out + in`) with a -inf / integer-min or zero fill; average pooling must
  divide by the window size in its epilogue (folded into the op);
- reduce: a reduction over plain dims (sum / max; mean when the epilogue
  divides by the reduced count; its result may keep the other dims in another
  order, a transpose IREE fused into the reduction), whose body may first
  compute the value it accumulates (an elementwise prologue: IREE fuses a
  residual add + ReLU into a global mean), or torch-mlir's adaptive average
  pooling form that gathers a box of a tensor with `tensor.extract`;
- elementwise: a standalone elementwise generic (add/sub/mul/max/min/clamp...).
A select in an elementwise body takes a comparison or an i1 operand (a
boolean mask, as torch's `where(mask, -inf, 0)`) as its condition.
Elementwise bodies (epilogues, prologues, standalone ops) may use the
transcendental functions exp, log, tanh, erf, rsqrt and sqrt (table lookup
steps, see contract/program.py) and x ** n for a small constant n (math.fpowi,
as multiplications): GELU (both torch forms), sigmoid, SiLU and the layer
norm scale lower this way; softmax arrives decomposed (see pipeline.py) into
max and sum reductions and elementwise ops. A box read (`box_read`: a copy of
part of an input, made by dispatch extraction) computes nothing and belongs to
the group that reads it. A `tensor.pad` whose users are all conv / pooling
inputs padded on their window dims, or the function's results
(`padding_fold`), belongs to no group: torq-fold-padding turns it into a view
(`PAD_VIEW`) whose padding the consuming op applies, or which the NSS program
writes out (the source box, then the border filled with the pad value).
A row gather (`row_gather`: an embedding lookup, rows of a table chosen by
runtime indices) computes nothing either. Results no group computes must be
such copies (`data_movement_reason`): an argument, a box of one, a padding of
either, or a row gather the dispatch returns; the NSS program makes them with
DMAs alone. Anything else is `Unsupported` with a reason, and the
dispatch stays on host.
MACs (the `macs` of a group): multiply-accumulates for convolutions and
matmuls; window elements read for pooling; input elements read for reduce.
"""

from __future__ import annotations

from .contraction import classify_contraction, linear_terms
from .elementwise import decode_elementwise, is_identity_like
from .groups import box_read, epilogue_of, init_steps, is_elementwise, match_group, prologue_of
from .inits import fill_value, is_zero_fill
from .model import (
                    FUSE_GROUP,
                    FUSE_GROUP_ID,
                    Contraction,
                    Gather,
                    Match,
                    Unsupported,
                    epilogue_attr,
                    epilogue_value,
)
from .padding import (
    PAD_VIEW,
    Padding,
    assembled_boxes,
    assembled_parts,
    data_movement_ops,
    data_movement_reason,
    padding_fold,
)
from .reduction import classify_gather_reduction, classify_principal, classify_reduction
from .row_gather import GATHER_VIEW, RowGather, gathered_box, row_gather

__all__ = ["FUSE_GROUP", "FUSE_GROUP_ID", "GATHER_VIEW", "PAD_VIEW", "gathered_box", "Contraction", "assembled_boxes", "assembled_parts", "Gather", "Match", "Padding", "RowGather", "Unsupported",
           "box_read", "classify_contraction", "classify_gather_reduction", "classify_principal",
           "classify_reduction", "data_movement_ops", "data_movement_reason", "decode_elementwise", "epilogue_attr",
           "epilogue_of", "epilogue_value", "fill_value", "init_steps", "is_elementwise", "is_identity_like",
           "is_zero_fill", "linear_terms", "match_group", "padding_fold", "prologue_of", "row_gather"]
