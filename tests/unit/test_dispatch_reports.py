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
