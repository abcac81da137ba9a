"""compiler/pass_managers.py: pipelines and scripts parsed once within a `reuse` scope, the same IR out."""

from iree.compiler import ir

from torq.compiler import pass_managers
from torq.compiler.pass_managers import parse_script, reuse, run_pipeline

TEXT = """func.func @f(%a: i32) -> i32 {
  %c0 = arith.constant 0 : i32
  %b = arith.addi %a, %c0 : i32
  %c = arith.addi %b, %c0 : i32
  return %c : i32
}"""


def _cleaned(ctx) -> str:
    m = ir.Module.parse(TEXT, ctx)
    run_pipeline("builtin.module(canonicalize,cse)", m.operation)
    return str(m)


def test_reused_pipeline_gives_the_same_ir(monkeypatch):
    ctx = ir.Context()
    with ctx:
        fresh = _cleaned(ctx)
        parsed = []
        real_parse = pass_managers.passmanager.PassManager.parse
        monkeypatch.setattr(pass_managers.passmanager.PassManager, "parse",
                            staticmethod(lambda text: parsed.append(text) or real_parse(text)))
        with reuse():
            assert [_cleaned(ctx) for _ in range(3)] == [fresh] * 3
        assert len(parsed) == 1  # three runs, one parse
        _cleaned(ctx)
        assert len(parsed) == 2  # outside a scope: parsed afresh
    assert "arith.addi" not in fresh


def test_scripts_shared_only_within_a_scope():
    with ir.Context():
        with reuse():
            assert parse_script("module {}") is parse_script("module {}")
            with reuse():  # a nested scope shares the outer one's cache
                assert parse_script("module {}") is parse_script("module {}")
        assert parse_script("module {}") is not parse_script("module {}")


def test_reused_values_made_once_per_scope():
    made = []

    def make():
        made.append(1)
        return [len(made)]

    with reuse():
        first = pass_managers.reused("k", make)
        assert pass_managers.reused("k", make) is first and len(made) == 1
        assert pass_managers.reused("other", make) is not first
    with reuse():  # a new scope makes it again
        assert pass_managers.reused("k", make) is not first
    assert pass_managers.reused("k", make) != pass_managers.reused("k", make)  # outside: each call
    assert len(made) == 5


def test_decoded_epilogue_shared_within_a_scope():
    from torq.compiler.patterns.model import epilogue_attr, epilogue_value
    from torq.contract.program import Epilogue, EpilogueStep, Ref

    e = Epilogue([EpilogueStep("lut", [Ref("value", 0)] + [Ref("const", const=float(k)) for k in range(4)], "i8")])
    with ir.Context(), ir.Location.unknown():
        attr = epilogue_attr(e)
        with reuse():
            a, b = epilogue_value(attr), epilogue_value(epilogue_attr(e))  # the same uniqued attribute
            assert a is b and a == e
        assert epilogue_value(attr) is not epilogue_value(attr)
