"""What a dispatch compile reads of its flow-level constants, and the answers it got.

Dispatch extraction attaches the value of each argument that is a flow-level
constant (`CONSTANT_ARG`: weights, biases, per-channel scales) to a function
that converts an integer to float; torq-lower-requantization consumes the
attribute, and `ConstantArgs` is the only way the pipeline reads it. It asks
three kinds of question: whether argument k is a constant (`has`: its
presence, part of the function's text the dispatch cache hashes), its value
(`get`: the question `VALUE`) and whether it is all zeros (`all_zeros`: the
question `ALL_ZEROS`, a folded zero point). It records the last two in order
(`observed`).

So a compile is a function of the function's text with the constants' values
taken out and of the answers to the questions it asked: another function of
that text whose constants give the same `digest` compiles to the same
executable and reports. The layers of a dynamically quantized transformer
differ only in weights their NPU dispatches never read (the scales and
column sums go to the host tail as operands), so they share one compile
(compiler/dispatch_cache.py); a static int8 model's rescales read every scale,
so each layer still compiles its own.
"""

from __future__ import annotations

import hashlib
import uuid

import numpy as np
from iree.compiler import ir

from .ir_utils import CompileError, constant_value, static_shape, sync_function_type

# Argument attribute (input): the argument's known value, dense or dense_resource elements.
CONSTANT_ARG = "torq.constant"
# The questions a compile asks of a constant argument's value.
VALUE, ALL_ZEROS = "value", "all zeros"
# (argument number, question), in the order a compile asked them.
Questions = tuple[tuple[int, str], ...]


def constant_attrs(func: ir.Operation) -> list[ir.Attribute | None]:
    """Per argument of `func`, its `CONSTANT_ARG` value or None."""
    if "arg_attrs" not in func.attributes:
        return []
    return [ir.DictAttr(d)[CONSTANT_ARG] if CONSTANT_ARG in ir.DictAttr(d) else None
            for d in ir.ArrayAttr(func.attributes["arg_attrs"])]


def set_constant_attrs(func: ir.Operation, attrs: list[ir.Attribute | None]) -> None:
    """Gives argument k of `func` the `CONSTANT_ARG` `attrs[k]` (none where None), replacing
    any argument attributes (dispatch extraction's, before anything else sets them)."""
    func.attributes["arg_attrs"] = ir.ArrayAttr.get(
        [ir.DictAttr.get({CONSTANT_ARG: a} if a is not None else {}) for a in attrs])


def append_constant_arguments(func: ir.Operation, values: list[ir.DenseElementsAttr]) -> list[ir.Value]:
    """New arguments of `func`, appended, one per value of `values` (of its type), each
    carrying it as `CONSTANT_ARG`; the function type follows. The call makes them
    (`ExtractedDispatch.hoisted_constants`)."""
    block = func.regions[0].blocks[0]
    n = len(block.arguments)
    before = (constant_attrs(func) + [None] * n)[:n]
    args = [block.add_argument(v.type, func.location) for v in values]
    set_constant_attrs(func, before + list(values))
    sync_function_type(func)
    return args


def mask_constant_values(func: ir.Operation) -> None:
    """Replaces each `CONSTANT_ARG` value of `func` by a string naming its type, leaving every
    other argument attribute as it is: the text the dispatch cache hashes."""
    if "arg_attrs" not in func.attributes:
        return
    masked = []
    for d in map(ir.DictAttr, ir.ArrayAttr(func.attributes["arg_attrs"])):
        entries = {named.name: named.attr for named in d}
        if CONSTANT_ARG in entries:
            entries[CONSTANT_ARG] = ir.StringAttr.get(f"constant {entries[CONSTANT_ARG].type}")
        masked.append(ir.DictAttr.get(entries))
    func.attributes["arg_attrs"] = ir.ArrayAttr.get(masked)


def is_all_zeros(value: np.ndarray | None) -> bool:
    """Whether `value` is a non-empty array of zeros (the answer to `ALL_ZEROS`)."""
    return value is not None and value.size > 0 and not value.any()


class ConstantArgs:
    """Function argument index -> its `CONSTANT_ARG` value (or None), converted on first use,
    in the argument's shape (the flow-level constant may be read through a reshape); every
    question asked of a value is recorded in `observed`."""

    def __init__(self, func: ir.Operation):
        self.shapes = [static_shape(a.type) for a in func.regions[0].blocks[0].arguments]
        self.attrs = constant_attrs(func)
        self.cache: dict[int, np.ndarray | None] = {}
        self.observed: list[tuple[int, str]] = []
        self._values_digest: str | None = None

    def has(self, k: int) -> bool:
        return k < len(self.attrs) and self.attrs[k] is not None

    def get(self, k: int) -> np.ndarray | None:
        if self.has(k) and (k, VALUE) not in self.observed:
            self.observed.append((k, VALUE))
        return self._value(k)

    def all_zeros(self, k: int) -> bool:
        if self.has(k) and (k, ALL_ZEROS) not in self.observed:
            self.observed.append((k, ALL_ZEROS))
        return is_all_zeros(self._value(k))

    def digest(self, questions: Questions) -> str:
        """A digest of what these constants answer to `questions` (`observed` of a compile of a
        function of the same text), recording nothing: equal digests, equal answers. A value
        numpy cannot hold (a bf16 blob) answers with a digest of its own, equal to nothing."""
        h = hashlib.sha256()
        for k, question in questions:
            try:
                value = self._value(k)
            except CompileError:
                h.update(f"{k} unreadable {uuid.uuid4()}\0".encode())
                continue
            if value is None:
                h.update(f"{k} absent\0".encode())
            elif question == ALL_ZEROS:
                h.update(f"{k} {is_all_zeros(value)}\0".encode())
            else:
                h.update(f"{k} {value.dtype} {value.shape}\0".encode())
                h.update(np.ascontiguousarray(value).tobytes())
        return h.hexdigest()

    def values_digest(self) -> str:
        """The digest of every constant's value (computed once)."""
        if self._values_digest is None:
            self._values_digest = self.digest(tuple((k, VALUE) for k in range(len(self.attrs)) if self.has(k)))
        return self._values_digest

    def _value(self, k: int) -> np.ndarray | None:
        if k not in self.cache:
            value = constant_value(self.attrs[k]) if self.has(k) else None
            shape = self.shapes[k] if k < len(self.shapes) else None
            self.cache[k] = value.reshape(shape) if value is not None and shape is not None else value
        return self.cache[k]
