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
that text whose constants give the same `answers` compiles to the same
executable and reports. The layers of a dynamically quantized transformer
differ only in weights their NPU dispatches never read (the scales and
column sums go to the host tail as operands), so they share one compile
(compiler/dispatch_cache.py); a static int8 model's rescales read every scale,
so each layer still compiles its own.
"""

from __future__ import annotations

import hashlib

import numpy as np
from iree.compiler import ir

from .ir_utils import constant_value, static_shape

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


class ConstantArgs:
    """Function argument index -> its `CONSTANT_ARG` value (or None), converted on first use,
    in the argument's shape (the flow-level constant may be read through a reshape); every
    question asked of a value is recorded in `observed`."""

    def __init__(self, func: ir.Operation):
        self.shapes = [static_shape(a.type) for a in func.regions[0].blocks[0].arguments]
        self.attrs = constant_attrs(func)
        self.cache: dict[int, np.ndarray | None] = {}
        self.observed: list[tuple[int, str]] = []

    def has(self, k: int) -> bool:
        return k < len(self.attrs) and self.attrs[k] is not None

    def get(self, k: int) -> np.ndarray | None:
        if self.has(k) and (k, VALUE) not in self.observed:
            self.observed.append((k, VALUE))
        return self._value(k)

    def all_zeros(self, k: int) -> bool:
        if self.has(k) and (k, ALL_ZEROS) not in self.observed:
            self.observed.append((k, ALL_ZEROS))
        return _all_zeros(self._value(k))

    def answers(self, questions: Questions) -> str:
        """A digest of what these constants answer to `questions` (`observed` of a compile of a
        function of the same text), recording nothing: equal digests, equal answers."""
        h = hashlib.sha256()
        for k, question in questions:
            if not self.has(k):
                h.update(f"{k} absent\0".encode())
            elif question == ALL_ZEROS:
                h.update(f"{k} {_all_zeros(self._value(k))}\0".encode())
            else:
                v = self._value(k)
                h.update(f"{k} {v.dtype} {v.shape}\0".encode())
                h.update(np.ascontiguousarray(v).tobytes())
        return h.hexdigest()

    def all_values(self) -> str:
        """The answers digest of every constant's value."""
        return self.answers(tuple((k, VALUE) for k in range(len(self.attrs)) if self.has(k)))

    def _value(self, k: int) -> np.ndarray | None:
        if k not in self.cache:
            value = constant_value(self.attrs[k]) if self.has(k) else None
            shape = self.shapes[k] if k < len(self.shapes) else None
            self.cache[k] = value.reshape(shape) if value is not None and shape is not None else value
        return self.cache[k]


def _all_zeros(value: np.ndarray | None) -> bool:
    return value is not None and value.size > 0 and not value.any()
