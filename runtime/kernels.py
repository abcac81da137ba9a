"""Numpy reference kernels of the Torq slice ops, as the simulator runs them.

Contract (semantics from the op table, contract/ops.py, and contract/program.py):
- Values are computed in a "compute domain": float32 for float dtypes (bf16,
  f16, f32), int64 for integer dtypes. bf16 operands are widened exactly to
  f32; integer operands to int64.
- `conv2d`, `matmul` and `depthwise_conv2d` return their principal result:
  float32 accumulated in f32 for float operands, or the i32 accumulator
  (wrapping like a 32-bit register) held in int64 for integer operands; both
  operands must be float, or both integer. `maxpool2d` (exact max),
  `avg_pool2d` (f32 window sum / window size, float only) and `reduce`
  (sum / mean / max) take one principal operand; each kernel also returns
  the count the `macs` field must hold (MACs, or elements read for pooling
  and reductions).
- With attr `accumulate` = 1 (a step of a tiled reduction), `conv2d` and
  `matmul` add operand 2, `reduce` (mode sum) operand 1, the running f32 / i32
  accumulator, to their principal result (`accumulate`); the i32 sum wraps
  like the register.
- The epilogue (`eval_epilogue`, integer and table steps) is runtime/epilogue.py.
- `store` converts a value to the result dtype: floats round to nearest even
  (ml_dtypes), integers round half to even and saturate (defensive clip).
- Speed never changes a result: `run_principal` may take an `OperandCache`
  (conv2d keeps a batch-1 input's window matrix in it while the input's
  bytes are unchanged) and batch-1 convolutions contract without the unit N
  dim (the same matrix product on the same data).
Errors are `KernelError` (a ValueError); the simulator adds the command index.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

import ml_dtypes
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from torq.contract.ops import ACCUMULATE, MATMUL_LETTERS, OPS, REDUCE_MODES, names_dims, reduce_result_axes
from torq.contract.program import INT_DTYPES

NP_DTYPES: dict[str, np.dtype] = {
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f16": np.dtype("<f2"),
    "f32": np.dtype("<f4"),
    "i8": np.dtype("i1"),
    "i16": np.dtype("<i2"),
    "i32": np.dtype("<i4"),
    "i1": np.dtype(np.bool_),  # a boolean mask operand, one byte per element
    "i64": np.dtype("<i8"),  # gather indices (DMA only)
}


class KernelError(ValueError):
    """An op the kernels cannot run as described (bad attrs, shapes, dtypes)."""


def to_domain(a: np.ndarray) -> np.ndarray:
    """Widens an NPU-typed array to its compute domain (float32 or int64)."""
    return a.astype(_DOMAIN.get(a.dtype) or _domain_of(a.dtype))


_DOMAIN: dict[np.dtype, type] = {}  # dtype -> its compute domain (np.issubdtype is slow per call)
_INTEGER: dict[np.dtype, bool] = {}  # dtype -> np.issubdtype(dtype, np.integer)


def _domain_of(dtype: np.dtype) -> type:
    domain = np.int64 if is_integer(dtype) or dtype == np.bool_ else np.float32  # i1: 0 / 1
    _DOMAIN[dtype] = domain
    return domain


def is_integer(dtype: np.dtype) -> bool:
    """np.issubdtype(dtype, np.integer), remembered per dtype."""
    integer = _INTEGER.get(dtype)
    if integer is None:
        integer = _INTEGER[dtype] = bool(np.issubdtype(dtype, np.integer))
    return integer


def int_limits(dtype: str) -> tuple[int, int]:
    info = np.iinfo(NP_DTYPES[dtype])
    return int(info.min), int(info.max)


def store(value: np.ndarray, dtype: str) -> np.ndarray:
    """Converts a compute-domain value to `dtype` the way the slice stores it."""
    if dtype in INT_DTYPES:
        if not np.issubdtype(value.dtype, np.integer):
            value = np.rint(value.astype(np.float64))
        lo, hi = int_limits(dtype)
        return np.clip(value, lo, hi).astype(NP_DTYPES[dtype])
    return value.astype(np.float32, copy=False).astype(NP_DTYPES[dtype])


def _pair(attrs: dict, key: str, op: str = "conv2d", default=(1, 1)) -> tuple[int, int]:
    v = attrs.get(key, default)
    if not isinstance(v, (list, tuple)) or len(v) != 2 or not all(isinstance(x, int) and x > 0 for x in v):
        raise KernelError(f"{op} attr {key} must be two positive ints, got {v!r}")
    return int(v[0]), int(v[1])


def _dims(attrs: dict, key: str, letters: str, rank: int, optional: str = "") -> str:
    d = attrs.get(key)
    if not names_dims(d, letters, optional, rank):
        raise KernelError(f"attr {key}={d!r} does not name the {rank} dims of the operand (letters {letters})")
    return d


def _pad_spec(x: np.ndarray, dims: str, attrs: dict, op: str) -> tuple[tuple, Any] | None:
    """The checked attr `pad` of `x` (laid out per `dims`): (np.pad widths, fill value), or None."""
    pad = attrs.get("pad")
    if pad is None:
        return None
    if (not isinstance(pad, (list, tuple)) or len(pad) != 4
            or not all(isinstance(p, (int, np.integer)) and p >= 0 for p in pad)):
        raise KernelError(f"{op} attr pad must be four non-negative ints [top, bottom, left, right], got {pad!r}")
    widths = [(0, 0)] * x.ndim
    if "H" in dims:  # a 1-D conv has no H: top and bottom must be 0
        widths[dims.index("H")] = (int(pad[0]), int(pad[1]))
    elif pad[0] or pad[1]:
        raise KernelError(f"{op} attr pad {list(pad)} pads H, which input_dims {dims} does not have")
    widths[dims.index("W")] = (int(pad[2]), int(pad[3]))
    value = attrs.get("pad_value", 0)
    if not isinstance(value, (int, float, np.number)):
        raise KernelError(f"{op} attr pad_value must be a number, got {value!r}")
    if np.issubdtype(x.dtype, np.integer):
        info = np.iinfo(x.dtype)
        if float(value) != int(value) or not info.min <= int(value) <= info.max:
            raise KernelError(f"{op} attr pad_value {value!r} is not a {x.dtype} value")
    fill = np.asarray(value).astype(x.dtype)
    if not np.issubdtype(x.dtype, np.integer) and not (np.isnan(fill) or float(fill) == float(value)):
        raise KernelError(f"{op} attr pad_value {value!r} is not a {x.dtype} value")
    return tuple(widths), fill


def _apply_pad(x: np.ndarray, spec: tuple[tuple, Any] | None) -> np.ndarray:
    return x if spec is None else np.pad(x, spec[0], constant_values=spec[1])


def _padded(x: np.ndarray, dims: str, attrs: dict, op: str) -> np.ndarray:
    """`x` (laid out per `dims`) with the attr `pad` [top, bottom, left, right] applied
    to its H and W dims: the rows and columns the op reads outside its operand hold
    attr `pad_value` (default 0), which must be representable in the operand dtype."""
    return _apply_pad(x, _pad_spec(x, dims, attrs, op))


def _same_kind(a: np.ndarray, b: np.ndarray, op: str) -> bool:
    """True if both operands are integer, False if both are float (else a KernelError)."""
    ia, ib = is_integer(a.dtype), is_integer(b.dtype)
    if ia != ib:
        raise KernelError(f"{op} mixes integer and float operands ({a.dtype}, {b.dtype})")
    return ia


def _accumulate_domain(a: np.ndarray, b: np.ndarray, op: str) -> tuple[np.ndarray, np.ndarray, bool]:
    integer = _same_kind(a, b, op)
    return to_domain(a), to_domain(b), integer


def _finish_acc(acc: np.ndarray, integer: bool) -> np.ndarray:
    # Integer accumulators are 32-bit registers: wrap, then widen for the epilogue.
    return acc.astype(np.int32).astype(np.int64) if integer else acc.astype(np.float32)


class OperandCache:
    """Arrays derived from LRAM operands (a convolution's window matrix), kept while
    the operand's bytes stay unchanged.

    Tiled programs often run one input against many weight tiles (output-channel
    tiles); the window matrix is the same for each. Entries are keyed by the
    operand's address, layout and what was derived; the owner of the memory calls
    `written(lo, hi)` for every write to addresses [lo, hi), which drops the
    entries that read any of them. At most `max_bytes` are kept (oldest dropped).
    """

    def __init__(self, max_bytes: int = 256 << 20) -> None:
        self.max_bytes = max_bytes
        self.entries: dict[tuple, tuple[int, int, np.ndarray]] = {}  # key -> (lo, hi, value), oldest first

    def get(self, operand: np.ndarray, what: tuple, build: Callable[[], np.ndarray]) -> np.ndarray:
        lo = operand.__array_interface__["data"][0]
        key = (lo, operand.shape, operand.strides, operand.dtype.str, what)
        entry = self.entries.get(key)
        if entry is not None:
            return entry[2]
        value = build()
        if value.nbytes <= self.max_bytes:
            total = value.nbytes + sum(e[2].nbytes for e in self.entries.values())
            while total > self.max_bytes:
                total -= self.entries.pop(next(iter(self.entries)))[2].nbytes
            # A conservative byte range of the operand: [lo - span, lo + span + itemsize).
            span = sum((n - 1) * abs(st) for n, st in zip(operand.shape, operand.strides)) if operand.size else 0
            self.entries[key] = (lo - span, lo + span + operand.itemsize, value)
        return value

    def written(self, lo: int, hi: int) -> None:
        """Bytes [lo, hi) changed: forget what was derived from any of them."""
        if self.entries:
            stale = [k for k, (a, b, _) in self.entries.items() if a < hi and lo < b]
            for k in stale:
                del self.entries[k]


def conv2d(x: np.ndarray, w: np.ndarray, attrs: dict, cache: OperandCache | None = None) -> tuple[np.ndarray, int]:
    """out[n,o,y,x] = sum_{c,i,j} in[n,c,y*sh+i*dh,x*sw+j*dw] * w[o,c,i,j]; returns (out, macs).

    `out` is laid out per attr output_dims. With a G (group) letter in
    input_dims the convolution is grouped, and a weight without H and W is a
    1x1 kernel (both handled by `grouped_conv2d`). With a `cache`, the window
    matrix of a batch-1 input is reused across calls on unchanged bytes.
    """
    in_d, w_d = attrs.get("input_dims"), attrs.get("weight_dims")
    if isinstance(in_d, str) and isinstance(w_d, str) and ("G" in in_d or "H" not in in_d
                                                           or not {"H", "W"} & set(w_d)):
        return grouped_conv2d(x, w, attrs)
    in_dims = _dims(attrs, "input_dims", "NCHW", x.ndim, optional="N")
    w_dims = _dims(attrs, "weight_dims", "OCHW", w.ndim)
    pad = _pad_spec(x, in_dims, attrs, "conv2d")
    sh, sw = _pair(attrs, "stride")
    dh, dw = _pair(attrs, "dilation")
    integer = _same_kind(x, w, "conv2d")
    canon_in = "NCHW" if "N" in in_dims else "CHW"
    ws = to_domain(w).transpose([w_dims.index(c) for c in "OCHW"])
    size = dict(zip(in_dims, x.shape))
    if pad is not None:
        (top, bottom), (left, right) = pad[0][in_dims.index("H")], pad[0][in_dims.index("W")]
        size["H"] += top + bottom
        size["W"] += left + right
    n, c, h, wd = size.get("N", 1), size["C"], size["H"], size["W"]
    _, wc, kh, kw = ws.shape
    ekh, ekw = _conv_window(c, wc, kh, kw, dh, dw, h, wd)

    def padded_input() -> np.ndarray:
        xs = to_domain(_apply_pad(x, pad)).transpose([in_dims.index(c) for c in canon_in])
        return xs if "N" in in_dims else xs[None]

    if n == 1 and c * kh * kw > 1:
        # Batch 1: the same contraction without the unit N dim. np.einsum contracts the
        # window matrix (C*kh*kw, OY*OX) (C order: c, i, j, then y, x) with the weights
        # in one matrix product; it is built here (once per input with a cache) and
        # einsum takes it as a view, so the product is the same call on the same data.
        oy, ox = (h - ekh) // sh + 1, (wd - ekw) // sw + 1

        def window_matrix() -> np.ndarray:
            win = sliding_window_view(padded_input()[0], (ekh, ekw), axis=(1, 2))[:, ::sh, ::sw, ::dh, ::dw]
            return win.transpose(0, 3, 4, 1, 2).reshape(c * kh * kw, oy * ox)

        what = ("conv2d_windows", in_dims, None if pad is None else (pad[0], pad[1].tobytes()), sh, sw, dh, dw, kh, kw)
        cols = cache.get(x, what, window_matrix) if cache is not None else window_matrix()
        win = cols.reshape(c, kh, kw, oy, ox).transpose(0, 3, 4, 1, 2)
        acc = np.einsum("cyxij,ocij->oyx", win, ws, optimize=True)[None]
    else:
        win = sliding_window_view(padded_input(), (ekh, ekw), axis=(2, 3))[:, :, ::sh, ::sw, ::dh, ::dw]
        acc = np.einsum("ncyxij,ocij->noyx", win, ws, optimize=True)
    acc = _conv_output_layout(acc, attrs, in_dims, n)
    macs = int(np.prod(acc.shape, dtype=np.int64)) * c * kh * kw
    return _finish_acc(acc, integer), macs


def _conv_window(c: int, wc: int, kh: int, kw: int, dh: int, dw: int, h: int, wd: int) -> tuple[int, int]:
    """The dilated kernel's extent (ekh, ekw), checked against the channels and the input."""
    if wc != c:
        raise KernelError(f"conv2d input has {c} channels, weight has {wc}")
    if kh < 1 or kw < 1:
        raise KernelError(f"conv2d kernel {kh}x{kw} is empty")
    ekh, ekw = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    if ekh > h or ekw > wd:
        raise KernelError(f"conv2d window {ekh}x{ekw} larger than input {h}x{wd}")
    return ekh, ekw


def _conv_output_layout(acc: np.ndarray, attrs: dict, in_dims: str, n: int) -> np.ndarray:
    """The N x O x H x W accumulator laid out per attr output_dims (without N: batch 1 only)."""
    out_dims = _dims(attrs, "output_dims", "NOHW", acc.ndim - ("N" not in in_dims), optional="N")
    if "N" not in out_dims:
        if "N" in in_dims and n != 1:
            raise KernelError(f"conv2d output_dims {out_dims} drops a batch of {n}")
        acc, canon_out = acc[0], "OHW"
    else:
        canon_out = "NOHW"
    return acc.transpose([canon_out.index(d) for d in out_dims])


def matmul(lhs: np.ndarray, rhs: np.ndarray, attrs: dict) -> tuple[np.ndarray, int]:
    """einsum over B,M,N,K (K reduced) per lhs_dims/rhs_dims/output_dims; returns (out, macs)."""
    dims = (attrs.get("lhs_dims"), attrs.get("rhs_dims"), attrs.get("output_dims"))
    if not all(isinstance(d, str) for d in dims):
        _matmul_spec.__wrapped__(*dims, lhs.shape, rhs.shape)  # raises the KernelError
    equation, k = _matmul_spec(*dims, lhs.shape, rhs.shape)
    integer = _same_kind(lhs, rhs, "matmul")
    acc = _contract(equation, to_domain(lhs), to_domain(rhs))
    return _finish_acc(acc, integer), math.prod(acc.shape) * k


@functools.lru_cache(maxsize=4096)
def _matmul_spec(l_dims: Any, r_dims: Any, o_dims: Any, lhs_shape: tuple, rhs_shape: tuple) -> tuple[str, int]:
    """The checked dims of a matmul: (einsum equation, K). A function of the attrs and
    operand shapes only, so computed once per distinct command (errors are not cached)."""
    for k, d, s in zip(("lhs_dims", "rhs_dims", "output_dims"), (l_dims, r_dims, o_dims), (lhs_shape, rhs_shape, None)):
        ok = isinstance(d, str) and set(d) <= set(MATMUL_LETTERS) and len(set(d)) == len(d)
        if not ok or (s is not None and len(d) != len(s)):
            raise KernelError(f"matmul attr {k}={d!r} does not name the dims of its operand (letters "
                              f"{MATMUL_LETTERS})")
    if "K" in o_dims or "K" not in l_dims or "K" not in r_dims or not set(o_dims) <= set(l_dims) | set(r_dims):
        raise KernelError(f"matmul dims {l_dims},{r_dims}->{o_dims} are not a contraction over K")
    sizes: dict[str, int] = {}
    for d, s in ((l_dims, lhs_shape), (r_dims, rhs_shape)):
        for letter, size in zip(d, s):
            if sizes.setdefault(letter, size) != size:
                raise KernelError(f"matmul dim {letter} is {sizes[letter]} in one operand and {size} in the other")
    return f"{l_dims.lower()},{r_dims.lower()}->{o_dims.lower()}", sizes["K"]


def _contract(equation: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`np.einsum(equation, a, b, optimize=True)`, bit for bit, without its per-call path search.

    For two operands numpy's einsum always takes the path (0, 1) and hands the pair to
    `bmm_einsum` as (b, a) with the subscripts swapped (numpy >= 2.4); calling it so is the
    same computation. Without `bmm_einsum` (another numpy) this is np.einsum itself
    (tests/runtime/test_simulator_speed.py checks the two agree).
    """
    if _bmm_einsum is None:
        return np.einsum(equation, a, b, optimize=True)
    inputs, out = equation.split("->")
    left, right = inputs.split(",")
    return _bmm_einsum(f"{right},{left}->{out}", b, a)


try:
    from numpy._core.einsumfunc import bmm_einsum as _bmm_einsum
except ImportError:  # numpy < 2.4: einsum contracts pairs otherwise
    _bmm_einsum = None


# --------------------------------------------------------------------------
# Depthwise / grouped convolution, pooling and reductions


def _letters(attrs: dict, key: str, letters: str, optional: str, op: str, rank: int | None = None) -> str:
    """A dims string: distinct letters of `letters`, all but `optional` present."""
    d = attrs.get(key)
    if not names_dims(d, letters, optional, rank):
        what = f"the {rank} dims of the operand" if rank is not None else "its dims"
        raise KernelError(f"{op} attr {key}={d!r} does not name {what} (letters {letters}, "
                          f"optional {optional or 'none'})")
    return d


def _canon(a: np.ndarray, dims: str, canon: str) -> np.ndarray:
    """`a` (laid out per `dims`) in the order of `canon`; absent letters become unit dims."""
    present = [c for c in canon if c in dims]
    a = a.transpose([dims.index(c) for c in present])
    return a.reshape([a.shape[present.index(c)] if c in dims else 1 for c in canon])


def _uncanon(acc: np.ndarray, canon: str, out_dims: str, op: str) -> np.ndarray:
    """`acc` (laid out per `canon`) in the layout `out_dims`; dropped letters must be unit dims."""
    for i, c in enumerate(canon):
        if c not in out_dims and acc.shape[i] != 1:
            raise KernelError(f"{op} output_dims {out_dims} drops dim {c} of size {acc.shape[i]}")
    present = [c for c in canon if c in out_dims]
    acc = acc.reshape([acc.shape[canon.index(c)] for c in present])
    return acc.transpose([present.index(c) for c in out_dims])


def _windows(xs: np.ndarray, kh: int, kw: int, stride: tuple[int, int], dilation: tuple[int, int],
             op: str) -> np.ndarray:
    """Sliding windows over the last two dims: shape (..., OH, OW, kh, kw)."""
    (sh, sw), (dh, dw) = stride, dilation
    h, w = xs.shape[-2:]
    if kh < 1 or kw < 1:
        raise KernelError(f"{op} kernel {kh}x{kw} is empty")
    ekh, ekw = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    if ekh > h or ekw > w:
        raise KernelError(f"{op} window {ekh}x{ekw} larger than input {h}x{w}")
    return sliding_window_view(xs, (ekh, ekw), axis=(-2, -1))[..., ::sh, ::sw, ::dh, ::dw]


def depthwise_conv2d(x: np.ndarray, w: np.ndarray, attrs: dict) -> tuple[np.ndarray, int]:
    """out[n,c,y,x] = sum_{i,j} in[n,c,y*sh+i*dh,x*sw+j*dw] * w[c,i,j]; returns (out, macs).

    input_dims over N,C,H,W (N optional), weight_dims over C,H,W, output_dims
    over N,C,H,W (N only if the batch is 1 or the input has N). MACs =
    output elements * kh * kw.
    """
    op = "depthwise_conv2d"
    in_dims = _letters(attrs, "input_dims", "NCHW", "N", op, x.ndim)
    w_dims = _letters(attrs, "weight_dims", "CHW", "", op, w.ndim)
    out_dims = _letters(attrs, "output_dims", "NCHW", "N", op)
    x = _padded(x, in_dims, attrs, op)
    stride, dilation = _pair(attrs, "stride", op), _pair(attrs, "dilation", op)
    xs, ws, integer = _accumulate_domain(x, w, op)
    xs, ws = _canon(xs, in_dims, "NCHW"), _canon(ws, w_dims, "CHW")
    c, (wc, kh, kw) = xs.shape[1], ws.shape
    if wc != c:
        raise KernelError(f"{op} input has {c} channels, weight has {wc}")
    if xs.shape[0] == 1:  # the same contraction without the unit N dim: one copy fewer
        acc = np.einsum("cyxij,cij->cyx", _windows(xs[0], kh, kw, stride, dilation, op), ws, optimize=True)[None]
    else:
        acc = np.einsum("ncyxij,cij->ncyx", _windows(xs, kh, kw, stride, dilation, op), ws, optimize=True)
    macs = int(np.prod(acc.shape, dtype=np.int64)) * kh * kw
    return _finish_acc(_uncanon(acc, "NCHW", out_dims, op), integer), macs


def grouped_conv2d(x: np.ndarray, w: np.ndarray, attrs: dict) -> tuple[np.ndarray, int]:
    """conv2d with groups: out[n,g,o,y,x] = sum_{c,i,j} in[n,g,c,y*sh+i*dh,x*sw+j*dw] * w[g,o,c,i,j].

    input_dims over N,G,C,H,W; weight_dims over G,O,C,H,W; output_dims over
    N,G,O,H,W. N is optional. G is in all three or in none; without G, C and
    O are required (a plain conv2d). With G, C (channels per group) may be
    absent from both input and weight (one channel per group: a depthwise
    conv with a channel multiplier O), and O (outputs per group) from both
    weight and output. The weight may lack both H and W: a 1x1 kernel. A 1-D
    conv (IREE folds a unit H away) has no H in any of the three, and without G
    may lack C (one input channel).
    MACs = output elements * C * kh * kw.
    """
    op = "conv2d"
    in_dims = _letters(attrs, "input_dims", "NGCHW", "NGCH", op, x.ndim)
    w_dims = _letters(attrs, "weight_dims", "GOCHW", "GOCHW", op, w.ndim)
    out_dims = _letters(attrs, "output_dims", "NGOHW", "NGOH", op)
    grouped = "G" in in_dims
    one_d = "H" not in in_dims  # a 1-D conv: the weight has W (or no kernel dims), never H
    consistent = (("G" in w_dims) == grouped == ("G" in out_dims) and ("C" in in_dims) == ("C" in w_dims)
                  and ("O" in w_dims) == ("O" in out_dims) and ("H" in in_dims) == ("H" in out_dims)
                  and (("H" not in w_dims) if one_d else ("H" in w_dims) == ("W" in w_dims))
                  and (grouped or ("O" in w_dims and ("C" in in_dims or one_d))))
    if not consistent:
        raise KernelError(f"{op} dims {in_dims},{w_dims}->{out_dims}: G must be in all three or none; C in "
                          "input and weight or in neither, O in weight and output or in neither (both "
                          "required without G, but C in a 1-D conv); H and W in the weight together or not at all, or "
                          "only W in a 1-D conv (no H in input and output)")
    x = _padded(x, in_dims, attrs, op)
    stride, dilation = _pair(attrs, "stride", op), _pair(attrs, "dilation", op)
    xs, ws, integer = _accumulate_domain(x, w, op)
    xs, ws = _canon(xs, in_dims, "NGCHW"), _canon(ws, w_dims, "GOCHW")
    (g, c), (wg, _, wc, kh, kw) = xs.shape[1:3], ws.shape
    if (wg, wc) != (g, c):
        raise KernelError(f"{op} input has {g} groups of {c} channels, weight has {wg} groups of {wc}")
    if xs.shape[0] == 1:  # the same contraction without the unit N dim: one copy fewer
        acc = np.einsum("gcyxij,gocij->goyx", _windows(xs[0], kh, kw, stride, dilation, op), ws,
                        optimize=True)[None]
    else:
        acc = np.einsum("ngcyxij,gocij->ngoyx", _windows(xs, kh, kw, stride, dilation, op), ws, optimize=True)
    macs = int(np.prod(acc.shape, dtype=np.int64)) * c * kh * kw
    return _finish_acc(_uncanon(acc, "NGOHW", out_dims, op), integer), macs


def _pool_windows(x: np.ndarray, attrs: dict, op: str) -> tuple[np.ndarray, str, bool]:
    in_dims = _letters(attrs, "input_dims", "NCHW", "NC", op, x.ndim)
    x = _padded(x, in_dims, attrs, op)
    out_dims = _letters(attrs, "output_dims", "NCHW", "NC", op)
    kh, kw = _pair(attrs, "kernel", op, default=None)
    stride, dilation = _pair(attrs, "stride", op), _pair(attrs, "dilation", op)
    xs = _canon(to_domain(x), in_dims, "NCHW")
    return _windows(xs, kh, kw, stride, dilation, op), out_dims, np.issubdtype(x.dtype, np.integer)


def maxpool2d(x: np.ndarray, attrs: dict) -> tuple[np.ndarray, int]:
    """out[n,c,y,x] = max_{i,j} in[n,c,y*sh+i*dh,x*sw+j*dw]; returns (out, window elements).

    input_dims/output_dims over N,C,H,W (N, C optional); kernel [kh, kw],
    stride, dilation. No padding: padding (with -inf or the integer minimum)
    is materialised before the op. The count is output elements * kh * kw.
    """
    op = "maxpool2d"
    win, out_dims, integer = _pool_windows(x, attrs, op)
    acc = win.max(axis=(-2, -1))
    n = int(np.prod(acc.shape, dtype=np.int64)) * win.shape[-2] * win.shape[-1]
    return _finish_acc(_uncanon(acc, "NCHW", out_dims, op), integer), n


def avg_pool2d(x: np.ndarray, attrs: dict) -> tuple[np.ndarray, int]:
    """out[n,c,y,x] = (sum_{i,j} in[n,c,y*sh+i*dh,x*sw+j*dw]) / (kh*kw), in f32.

    Attrs as `maxpool2d`. The divisor is always the window size: padding is
    materialised (zeros) before the op, so this is average pooling with
    count_include_pad=True. Float operands only. Count as `maxpool2d`.
    """
    op = "avg_pool2d"
    win, out_dims, integer = _pool_windows(x, attrs, op)
    if integer:
        raise KernelError(f"{op} of integer operands is not defined (float only)")
    kh, kw = win.shape[-2:]
    acc = win.sum(axis=(-2, -1), dtype=np.float32) / np.float32(kh * kw)
    n = int(np.prod(acc.shape, dtype=np.int64)) * kh * kw
    return _uncanon(acc.astype(np.float32), "NCHW", out_dims, op), n


def reduce(x: np.ndarray, attrs: dict) -> tuple[np.ndarray, int]:
    """Reduces operand dims `axes` (attr, distinct) with `mode` (sum | mean | max).

    The result keeps the other dims, in order or in attr result_axes' order.
    sum/mean accumulate in f32 (mean divides the sum by the number of reduced
    elements once), or in the i32 accumulator for integers (mean is float
    only); max is exact. The count is the operand's element count.
    """
    op = "reduce"
    mode, axes = attrs.get("mode"), attrs.get("axes")
    if mode not in REDUCE_MODES:
        raise KernelError(f"{op} attr mode={mode!r} is not one of {', '.join(REDUCE_MODES)}")
    if (not isinstance(axes, (list, tuple)) or not axes or len(set(axes)) != len(axes)
            or not all(isinstance(a, int) and 0 <= a < x.ndim for a in axes)):
        raise KernelError(f"{op} attr axes={axes!r} must be distinct dims of the rank-{x.ndim} operand")
    integer = np.issubdtype(x.dtype, np.integer)
    xs, axes = to_domain(x), tuple(int(a) for a in axes)
    if mode == "max":
        acc = xs.max(axis=axes)
    elif integer:
        if mode == "mean":
            raise KernelError(f"{op} mode mean of integer operands is not defined (float only)")
        acc = xs.sum(axis=axes)
    else:
        acc = xs.sum(axis=axes, dtype=np.float32)
        if mode == "mean":
            acc = acc / np.float32(math.prod(x.shape[a] for a in axes))
    kept = [k for k in range(x.ndim) if k not in axes]
    order = reduce_result_axes(attrs, x.ndim)
    if sorted(order) != kept:
        raise KernelError(f"{op} attr result_axes={order!r} must order the operand's dims other than {list(axes)}")
    acc = np.asarray(acc)
    if order != kept:
        acc = np.ascontiguousarray(np.transpose(acc, [kept.index(k) for k in order]))
    return _finish_acc(acc, integer), int(x.size)


# --------------------------------------------------------------------------
# The principal computation of each op of the op table (contract/ops.py) that
# has principal operands (a test keeps the two in step).
#
# A kernel takes the op's LRAM operands (principal operands first, epilogue
# operands after), its attrs and an optional `OperandCache`, and returns
# (principal result, macs). Ops without a principal value ("elementwise") are
# not listed: their result is the epilogue alone.

PrincipalKernel = Callable[[list[np.ndarray], dict, "OperandCache | None"], tuple[np.ndarray, int]]


def _binary(fn: Callable[..., tuple[np.ndarray, int]], cached: bool = False) -> PrincipalKernel:
    def kernel(ops: list[np.ndarray], attrs: dict, cache: OperandCache | None = None) -> tuple[np.ndarray, int]:
        if len(ops) < 2:
            raise KernelError(f"needs 2 operands, has {len(ops)}")
        return fn(ops[0], ops[1], attrs, cache) if cached else fn(ops[0], ops[1], attrs)
    return kernel


def _unary(fn: Callable[[np.ndarray, dict], tuple[np.ndarray, int]]) -> PrincipalKernel:
    def kernel(ops: list[np.ndarray], attrs: dict, cache: OperandCache | None = None) -> tuple[np.ndarray, int]:
        if len(ops) < 1:
            raise KernelError("needs 1 operand, has 0")
        return fn(ops[0], attrs)
    return kernel


PRINCIPAL_KERNELS: dict[str, PrincipalKernel] = {
    "conv2d": _binary(conv2d, cached=True),
    "matmul": _binary(matmul),
    "depthwise_conv2d": _binary(depthwise_conv2d),
    "maxpool2d": _unary(maxpool2d),
    "avg_pool2d": _unary(avg_pool2d),
    "reduce": _unary(reduce),
}


def run_principal(op: str, ops: list[np.ndarray], attrs: dict,
                  cache: OperandCache | None = None) -> tuple[np.ndarray | None, int]:
    """The principal value and MACs of Compute `op` (None, 0 for elementwise).

    `cache` (optional) keeps arrays derived from operands across calls; its owner
    reports every write to the operands' memory (`OperandCache.written`).
    """
    if op not in OPS:
        raise KernelError(f"unknown compute op {op!r}")
    if OPS[op].inputs == 0:
        return None, 0
    principal, macs = PRINCIPAL_KERNELS[op](ops, attrs, cache)
    if attrs.get(ACCUMULATE):
        principal = accumulate(op, principal, ops, attrs)
    return principal, macs


def accumulate(op: str, principal: np.ndarray, ops: list[np.ndarray], attrs: dict) -> np.ndarray:
    """A step of a tiled reduction (attr `accumulate` = 1, contract/ops.py): its principal value
    (contraction, sum) plus the running sum in operand `accumulator_operand`, an f32 (float
    inputs) or i32 (integer inputs, wrapping like the 32-bit register) tensor of the result's shape."""
    if not OPS[op].accumulates:
        raise KernelError(f"attr accumulate on {op}, only {' and '.join(o.name for o in OPS.values() if o.accumulates)} "
                          f"accumulate")
    if not OPS[op].accumulates_with(attrs):
        raise KernelError(f"attr accumulate on {op} with {OPS[op].no_accumulate(attrs)}")
    at = OPS[op].accumulator_operand
    if len(ops) <= at:
        raise KernelError(f"accumulate needs an accumulator operand {at}, has {len(ops)} operands")
    acc = ops[at]
    integer = np.issubdtype(principal.dtype, np.integer)
    want = NP_DTYPES["i32"] if integer else NP_DTYPES["f32"]
    if acc.dtype != want or acc.shape != principal.shape:
        raise KernelError(f"accumulator {acc.shape} {acc.dtype}, the step computes {principal.shape} "
                          f"and accumulates in {want}")
    return _finish_acc(principal + to_domain(acc), integer)
