"""ir_utils.record_attr / record_value: plain records as typed attributes (torq.program,
torq.distribution), through the printed form and back."""

import pytest
from iree.compiler import ir

from torq.compiler.ir_utils import record_attr, record_value
from torq.contract.hw import TorqHw


def test_records_round_trip_through_printed_ir():
    record = {"name": "prog", "tiles": 3, "lram_peak": 300, "hw": TorqHw().to_dict(),
              "bodies": [{"tiles": 1, "form": "split", "split": True}], "empty": []}
    with ir.Context(), ir.Location.unknown():
        attr = record_attr(record)
        assert isinstance(attr, ir.DictAttr)
        assert record_value(attr) == record
        again = record_value(ir.Attribute.parse(str(attr)))
    assert again == record
    assert type(again["hw"]["dma_efficiency"]) is float and type(again["tiles"]) is int
    assert type(again["bodies"][0]["split"]) is bool


def test_values_without_a_typed_form_are_refused():
    with ir.Context(), ir.Location.unknown():
        with pytest.raises(TypeError, match="NoneType"):
            record_attr({"x": None})
