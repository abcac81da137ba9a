"""Convolutions and matmuls: affine-map analysis of a multiply-accumulate
`linalg.generic` into a `Contraction` (conv2d, grouped / depthwise conv,
1x1 conv, matmul)."""

from __future__ import annotations

from iree.compiler import ir

from torq.contract.ops import MATMUL_ROLE_LETTERS

from ..ir_utils import indexing_maps, n_inputs, region_ops, static_shape
from ..ir_utils import iterator_types as _iterators
from ..ir_utils import loop_ranges as _loop_ranges
from .model import Contraction

# --- affine map analysis -------------------------------------------------------

def dim_of(e: ir.AffineExpr) -> int | None:
    return ir.AffineDimExpr(e).position if isinstance(e, ir.AffineDimExpr) else None


def linear_terms(e: ir.AffineExpr) -> list[tuple[int, int]] | None:
    """`e` as a list of (dim, coefficient) if it is a positive linear sum of dims."""
    if isinstance(e, ir.AffineDimExpr):
        return [(ir.AffineDimExpr(e).position, 1)]
    if isinstance(e, ir.AffineAddExpr):
        a = ir.AffineAddExpr(e)
        lhs, rhs = linear_terms(a.lhs), linear_terms(a.rhs)
        return None if lhs is None or rhs is None else lhs + rhs
    if isinstance(e, ir.AffineMulExpr):
        m = ir.AffineMulExpr(e)
        for x, c in ((m.lhs, m.rhs), (m.rhs, m.lhs)):
            if isinstance(c, ir.AffineConstantExpr) and isinstance(x, ir.AffineDimExpr):
                return [(ir.AffineDimExpr(x).position, ir.AffineConstantExpr(c).value)]
    return None


def is_mul_add_body(op: ir.Operation) -> bool:
    """Body is `out + a*b`, optionally with sign-preserving casts of a and b first. Not with a
    zero extension (`arith.extui`: a uint8 operand, torchao's u8 x s8 `_int_mm`): the NPU's
    MACs multiply signed integers, so that product would be computed wrongly."""
    names = [o.name for o in region_ops(op)]
    core = [n for n in names if n not in ("arith.extsi", "arith.extf", "arith.sitofp")]
    return core in (["arith.mulf", "arith.addf", "linalg.yield"], ["arith.muli", "arith.addi", "linalg.yield"])


def classify_contraction(op: ir.Operation) -> Contraction | None:
    """Conv2d / matmul structure of a linalg.generic, or None if not one."""
    if op.name != "linalg.generic" or n_inputs(op) != 2 or "reduction" not in _iterators(op):
        return None
    if not is_mul_add_body(op):
        return None
    maps = indexing_maps(op)
    its = _iterators(op)
    in_map, w_map, out_map = maps
    out_dims = [dim_of(e) for e in out_map.results]
    w_dims = [dim_of(e) for e in w_map.results]
    if None in out_dims or None in w_dims:
        return None
    in_terms = [linear_terms(e) for e in in_map.results]
    if any(t is None for t in in_terms):
        return None
    shapes = [static_shape(v.type) for v in op.operands]
    if any(s is None for s in shapes):
        return None
    ranges = _loop_ranges(op)
    spatial = [t for t in in_terms if len(t) > 1]
    if spatial:
        return _classify_conv(its, in_terms, w_dims, out_dims, ranges)
    in_dims = [t[0][0] for t in in_terms]
    steps = {t[0][0]: t[0][1] for t in in_terms}  # an input dim read at `step * loop`: a strided 1x1 conv
    plain = all(c == 1 for c in steps.values())
    matmul = _classify_matmul(its, in_dims, w_dims, out_dims, ranges, 1) if plain else None
    if matmul is not None:
        return matmul
    # A 1x1 conv over C x H x W (two M dims to a matmul) stays a conv; other contractions
    # with several dims in a role are matmuls.
    conv = _classify_pointwise_conv(its, in_dims, w_dims, out_dims, ranges, steps)
    if conv is not None or not plain:
        return conv
    return _classify_matmul(its, in_dims, w_dims, out_dims, ranges, max(map(len, MATMUL_ROLE_LETTERS.values())))


def window_pair(terms, its, roles) -> tuple[int, int, int, int] | None:
    """A sliding-window input index `out*stride + k*dilation` as (out dim, stride,
    window dim, dilation): one parallel and one reduction dim, neither seen yet."""
    (a, ca), (b, cb) = terms
    if its[a] == "reduction" and its[b] == "parallel":
        (a, ca), (b, cb) = (b, cb), (a, ca)
    if not (its[a] == "parallel" and its[b] == "reduction") or a in roles or b in roles:
        return None
    return a, ca, b, cb


def _classify_conv(its, in_terms, w_dims, out_dims, ranges) -> Contraction | None:
    """Roles of the loop dims of a conv-shaped mul-add generic.

    Input dims read by a single loop dim are N (parallel, in the output, not
    in the weight), C (reduction, in the weight, not in the output) or G
    (parallel, in weight and output: the channel of a depthwise conv, the
    group of a grouped one); input dims read by `out * stride + k * dilation`
    are the spatial H and W. Weight dims are C, G, H, W (the kernel dims) or
    O (parallel, in the output only). Without G this is conv2d (C and O
    required); with G only it is depthwise_conv2d (G named C in its dims); G
    with C and/or O is a grouped conv2d (dims with a G letter).
    """
    read = _input_roles(its, in_terms, w_dims, out_dims)
    if read is None:
        return None
    letters_in, spatial_pairs, roles = read
    (oh, sh, kh, dh), (ow, sw, kw, dw) = spatial_pairs
    w_letters = _weight_letters(its, w_dims, out_dims, roles)
    if w_letters is None:
        return None
    out_letters = [roles.get(d) for d in out_dims]
    if any(l not in ("N", "G", "O", "H", "W") for l in out_letters) or len(set(out_letters)) != len(out_letters):
        return None
    if set(roles) != set(range(len(its))):
        return None  # a loop dim with no role
    grouped = "G" in roles.values()
    has_c, has_o = "C" in roles.values(), "O" in roles.values()
    # Without C: one input channel (a 1-D audio front end's first conv reads the waveform).
    if not grouped and not (has_o and (has_c or kh is None)):
        return None
    out_elems = 1
    for d in out_dims:
        out_elems *= ranges[d]
    c_size = next((ranges[d] for d, r in roles.items() if r == "C"), 1)
    macs = out_elems * c_size * (ranges[kh] if kh is not None else 1) * ranges[kw]
    # A 1-D depthwise conv stays a grouped conv2d (G alone): depthwise_conv2d windows H x W.
    kind = "depthwise_conv2d" if grouped and not has_c and not has_o and kh is not None else "conv2d"
    if kind == "depthwise_conv2d":  # the group dim is the channel: name it C
        letters_in, w_letters, out_letters = ([("C" if l == "G" else l) for l in ls]
                                              for ls in (letters_in, w_letters, out_letters))
    attrs = {"input_dims": "".join(letters_in), "weight_dims": "".join(w_letters),
             "output_dims": "".join(out_letters), "stride": [sh, sw], "dilation": [dh, dw]}
    return Contraction(kind, attrs, macs)


def _input_roles(its, in_terms, w_dims, out_dims) -> tuple[list[str], list, dict] | None:
    """(the input's dim letters, its two spatial pairs (out dim, stride, kernel dim, dilation),
    the role of each loop dim seen) of `_classify_conv`'s input map, or None. A single
    window is a 1-D conv's W, with a None H pair before it."""
    letters_in, spatial_pairs, roles = [], [], {}
    for t in in_terms:
        if len(t) == 1:
            d, c = t[0]
            letter = _plain_input_letter(its[d], d in w_dims, d in out_dims) if c == 1 else None
            if letter is None or letter in roles.values():
                return None
            roles[d] = letter
            letters_in.append(letter)
        elif len(t) == 2:
            pair = window_pair(t, its, roles)
            if pair is None or len(spatial_pairs) == 2:
                return None
            a, _, b, _ = pair
            spatial_pairs.append(pair)
            letter = "HW"[len(spatial_pairs) - 1]
            roles[a], roles[b] = letter, "k" + letter
            letters_in.append(letter)
        else:
            return None
    if len(spatial_pairs) == 1:  # a 1-D conv (IREE folds a unit H away): its one window is W
        ((a, _, b, _),) = spatial_pairs
        roles[a], roles[b] = "W", "kW"
        letters_in = [("W" if letter == "H" else letter) for letter in letters_in]
        spatial_pairs = [(None, 1, None, 1)] + spatial_pairs
    return (letters_in, spatial_pairs, roles) if len(spatial_pairs) == 2 else None


def _plain_input_letter(iterator: str, in_weight: bool, in_output: bool) -> str | None:
    """C (reduced, read by the weight), N (parallel, output only) or G (parallel, in both)."""
    if iterator == "reduction" and in_weight and not in_output:
        return "C"
    if iterator == "parallel" and in_output:
        return "G" if in_weight else "N"
    return None


def _weight_letters(its, w_dims, out_dims, roles: dict) -> list[str] | None:
    """The weight's dim letters (C, G, the kernel's H and W, or O: parallel, in the output
    only, named in `roles` here), or None."""
    w_letters = []
    for d in w_dims:
        r = roles.get(d)
        if r in ("C", "G"):
            w_letters.append(r)
        elif r in ("kH", "kW"):
            w_letters.append(r[1])
        elif r is None and its[d] == "parallel" and d in out_dims and "O" not in w_letters:
            roles[d] = "O"
            w_letters.append("O")
        else:
            return None
    return w_letters


def _classify_pointwise_conv(its, in_dims, w_dims, out_dims, ranges, steps: dict[int, int]) -> Contraction | None:
    """A 1x1 convolution that is no matmul: the input keeps two (H, W) or three
    (N, H, W) dims the weight does not have, e.g. C x H x W * O x C -> O x H x W.
    Lowered as conv2d whose weight has no kernel dims; the input reads H and W
    at `step * loop` (`steps`, per loop dim): the conv's stride. Only H and W
    may be strided."""
    if len(set(in_dims)) != len(in_dims) or len(set(w_dims)) != len(w_dims):
        return None
    roles, free = {}, []
    for d in in_dims:
        in_w, in_o = d in w_dims, d in out_dims
        if its[d] == "reduction" and in_w and not in_o:
            roles[d] = "C"
        elif its[d] == "parallel" and in_w and in_o:
            roles[d] = "G"
        elif its[d] == "parallel" and in_o and not in_w:
            free.append(d)
        else:
            return None
    if len(free) not in (2, 3) or list(roles.values()).count("C") != 1:
        return None
    roles.update(zip(free, "NHW" if len(free) == 3 else "HW"))
    for d in w_dims:
        if d not in roles:
            if its[d] != "parallel" or d not in out_dims or "O" in roles.values():
                return None
            roles[d] = "O"
    if "O" not in roles.values() or set(roles) != set(range(len(its))):
        return None
    out_letters = "".join(roles[d] for d in out_dims)
    if set(out_letters) != {r for r in roles.values() if r != "C"}:
        return None
    out_elems = 1
    for d in out_dims:
        out_elems *= ranges[d]
    c = next(ranges[d] for d, r in roles.items() if r == "C")
    stride = {roles[d]: steps.get(d, 1) for d in roles}
    if any(k not in ("H", "W") and v != 1 for k, v in stride.items()):
        return None
    attrs = {"input_dims": "".join(roles[d] for d in in_dims), "weight_dims": "".join(roles[d] for d in w_dims),
             "output_dims": out_letters, "stride": [stride["H"], stride["W"]], "dilation": [1, 1]}
    return Contraction("conv2d", attrs, out_elems * c)


def _classify_matmul(its, in_dims, w_dims, out_dims, ranges, per_role: int) -> Contraction | None:
    """Roles of the loop dims of a matmul-shaped generic: one reduction K; B in both inputs,
    M in the lhs only, N in the rhs only (each in the output). A role may hold up to
    `per_role` dims, at most its letters in `MATMUL_ROLE_LETTERS` (MobileViT's patches x
    heads, MobileViTv2's unfolded patches); the primary letter goes to the innermost dim
    (the output's last of the role: the one the vector layout prefers)."""
    red = [d for d, it in enumerate(its) if it == "reduction"]
    if len(red) != 1:
        return None
    k = red[0]

    def role(d):
        if d == k:
            return "K"
        in_a, in_b = d in in_dims, d in w_dims
        if in_a and in_b:
            return "B"
        return "M" if in_a else "N" if in_b else "?"

    if any(role(d) == "?" for d in out_dims) or len(set(out_dims)) != len(out_dims):
        return None
    letters = {k: "K"}
    for r in "BMN":
        dims = [d for d in out_dims if role(d) == r]
        if len(dims) > min(per_role, len(MATMUL_ROLE_LETTERS[r])):
            return None
        letters.update(zip(reversed(dims), MATMUL_ROLE_LETTERS[r]))
    if any(d not in letters for ds in (in_dims, w_dims) for d in ds):
        return None  # a dim read by one input only and not written: no matmul
    la, lb, lo = ("".join(letters[d] for d in ds) for ds in (in_dims, w_dims, out_dims))
    for s in (la, lb, lo):
        if len(set(s)) != len(s):
            return None
    if "K" not in la or "K" not in lb or "K" in lo:
        return None
    out_elems = 1
    for d in out_dims:
        out_elems *= ranges[d]
    return Contraction("matmul", {"lhs_dims": la, "rhs_dims": lb, "output_dims": lo},
                       out_elems * ranges[k])
