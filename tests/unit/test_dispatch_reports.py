"""ExtractedDispatch.apply_reports takes a dispatch's pass reports whatever function name they
carry: a dispatch whose body equals an earlier one gets that compile (the in-compile and
on-disk dispatch cache), reported under the earlier dispatch's name. Taking the reports by
this dispatch's name lost its in-place operands there (Hugging Face Phi's second layer:
"executable takes 2 inputs ... called with 1")."""

from __future__ import annotations

import pytest

from torq.compiler.dispatch_extraction import ExtractedDispatch
from torq.compiler.ir_utils import CompileError
from torq.compiler.passes import mark_in_place_updates


def test_reports_of_a_cache_hit_under_another_name():
    ex = ExtractedDispatch(func=None, name="main_dispatch_20", input_operands=[0], result_updates=[(1, [0, 0])])
    ex.apply_reports({mark_in_place_updates.NAME: {"main_dispatch_5": [0]}})
    assert ex.in_place == [0]


def test_no_report_leaves_the_defaults():
    ex = ExtractedDispatch(func=None, name="d", input_operands=[0, 2], result_updates=[(-1, None)])
    ex.apply_reports({})
    assert ex.in_place == [] and ex.input_operands == [0, 2]


def test_a_report_for_two_functions_is_refused():
    ex = ExtractedDispatch(func=None, name="d", input_operands=[0], result_updates=[(-1, None)])
    with pytest.raises(CompileError, match="reported for 2 functions"):
        ex.apply_reports({mark_in_place_updates.NAME: {"a": [0], "b": [0]}})


def test_in_place_results_are_dispatch_results_when_the_host_computes_one():
    """torq-lower-requantization removed function result 1 (the host computes it from result
    0): the function's in-place result 1 is the dispatch's result 2."""
    from torq.compiler.passes import lower_requantization

    ex = ExtractedDispatch(func=None, name="d", input_operands=[0],
                           result_updates=[(-1, None), (-1, None), (1, [0, 0])])
    lowering = lower_requantization.RequantReport([0], kept_results=[0, 2])
    ex.apply_reports({lower_requantization.NAME: {"d": lowering}, mark_in_place_updates.NAME: {"d": [1]}})
    assert ex.function_results == [0, 2] and ex.in_place == [2]


def test_result_updates_follow_the_results_left():
    from iree.compiler import ir

    with ir.Context():
        module = ir.Module.parse("""
func.func @f() attributes {torq.result_updates = [{result = 0 : i64, offsets = array<i64: 0>},
                                                  {result = 1 : i64, offsets = array<i64: 1>},
                                                  {result = 2 : i64, offsets = array<i64: 2>}]} {
  return
}""")
        func = module.body.operations[0].operation
        mark_in_place_updates.drop_result_updates(func, [0, 2])
        entries = [ir.DictAttr(e) for e in ir.ArrayAttr(func.attributes[mark_in_place_updates.RESULT_UPDATES])]
        assert [(ir.IntegerAttr(e["result"]).value, list(ir.DenseI64ArrayAttr(e["offsets"]))) for e in entries] == \
            [(0, [0]), (1, [2])]
