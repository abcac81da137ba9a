"""The typed `epilogue` attribute of TorqHL ops and torq_nss.compute specs
(compiler/patterns/model.py: epilogue_attr / epilogue_value) reads back the Epilogue it
was made of, exactly, also through printed and re-parsed IR: int vs float constants,
-0.0, infinities and NaN, refs to values, operands (with axes) and indexed constants."""

import math

import pytest
from iree.compiler import ir

from torq.compiler.ir_utils import CompileError
from torq.compiler.patterns.model import epilogue_attr, epilogue_value
from torq.contract.program import Epilogue, EpilogueStep, Ref

EPILOGUES = [
    Epilogue(),
    Epilogue([EpilogueStep("add", [Ref("value", 0), Ref("const", const=1.0)])], 1),
    Epilogue([EpilogueStep("mul", [Ref("operand", 2, (0, 1)), Ref("const", const=3)]),
              EpilogueStep("max", [Ref("value", 1), Ref("const", const=-0.0)], "i8"),
              EpilogueStep("min", [Ref("value", 2), Ref("const", const=math.inf)]),
              EpilogueStep("add", [Ref("value", 3), Ref("const", const=-math.inf)]),
              EpilogueStep("select", [Ref("value", 3, const=2.5), Ref("const", 4, (1,), 0.5), Ref("value", 0)])], 5),
]


def _same(a, b) -> bool:
    """Equal, with NaN equal to itself and -0.0 apart from 0.0 and ints apart from floats."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return type(a) is type(b) and a == b


def _assert_equal(got: Epilogue, want: Epilogue) -> None:
    assert got.result == want.result and len(got.steps) == len(want.steps)
    for g, w in zip(got.steps, want.steps):
        assert (g.op, g.to, len(g.args)) == (w.op, w.to, len(w.args))
        for ga, wa in zip(g.args, w.args):
            assert (ga.kind, ga.index, tuple(ga.axes)) == (wa.kind, wa.index, tuple(wa.axes))
            assert _same(ga.const, wa.const), (ga.const, wa.const)


@pytest.mark.parametrize("epilogue", EPILOGUES + [
    Epilogue([EpilogueStep("add", [Ref("value", 0), Ref("const", const=math.nan)])], 1)])
def test_round_trip_in_memory_and_through_text(epilogue):
    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = True
        attr = epilogue_attr(epilogue)
        _assert_equal(epilogue_value(attr), epilogue)
        op = ir.Operation.create("test.op", attributes={"epilogue": attr})
        reparsed = ir.Module.parse(f"module {{ {op} }}").body.operations[0].operation
        _assert_equal(epilogue_value(reparsed.attributes["epilogue"]), epilogue)


def test_a_string_epilogue_is_a_compile_error():
    with ir.Context():
        with pytest.raises(CompileError, match="dictionary"):
            epilogue_value(ir.StringAttr.get('{"steps": [], "result": 0}'))
