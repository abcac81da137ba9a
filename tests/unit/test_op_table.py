"""The TorqHL op table (contract/ops.py): its entries are consistent, and the
shape rules agree with torch's own output shapes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from torq.contract.ops import OPS, RESULT, CycleRule, OpError


@pytest.mark.parametrize("op", list(OPS.values()), ids=lambda o: o.name)
def test_entry_is_consistent(op):
    attrs = {d.attr: d for d in op.dims}
    for role, attr, letters in op.vector:
        assert attr in attrs, f"{op.name}: vector rule reads {attr}, not a dims attr"
        assert set(letters) <= set(attrs[attr].letters)
        assert role == RESULT or 0 <= role < op.inputs
    assert all(r == RESULT or 0 <= r < op.inputs for r in op.work_roles)
    assert op.accumulator_operand == op.inputs
    if op.accumulates:  # a step's cycles count the MACs or the reads of its slice, like the untiled op's
        assert op.inputs >= 1 and op.cycles in (CycleRule.MAC_ARRAY, CycleRule.WINDOW_ON_LANES)
    if op.inputs == 0:
        assert op.cycles is CycleRule.ELEMENTS and not op.pads_input and not op.accumulates
    assert op.mlir_name == f"torq_hl.{op.name}"


def test_reduce_accumulates_only_a_sum():
    reduce = OPS["reduce"]
    assert reduce.accumulates_with({"mode": "sum", "axes": [0]})
    assert not reduce.accumulates_with({"mode": "max", "axes": [0]})
    assert not reduce.accumulates_with({"mode": "mean", "axes": [0]})  # a step's mean is not a share of the sum
    assert "mode max" in reduce.no_accumulate({"mode": "max"})
    assert OPS["matmul"].accumulates_with({}) and not OPS["depthwise_conv2d"].accumulates_with({})


@pytest.mark.parametrize("stride,dilation,pad", [((1, 1), (1, 1), None), ((2, 2), (1, 1), [1, 1, 1, 1]),
                                                 ((2, 1), (2, 3), [0, 2, 1, 0])])
def test_depthwise_shape_rule_matches_torch(stride, dilation, pad):
    c, h, w, k = 5, 13, 11, 3
    attrs = {"input_dims": "NCHW", "weight_dims": "CHW", "output_dims": "NCHW",
             "stride": list(stride), "dilation": list(dilation)}
    if pad:
        attrs["pad"] = pad
    shape, macs = OPS["depthwise_conv2d"].verify([((1, c, h, w), "bf16"), ((c, k, k), "bf16")], attrs)
    x = torch.zeros(1, c, h, w)
    if pad:
        x = F.pad(x, (pad[2], pad[3], pad[0], pad[1]))
    ref = F.conv2d(x, torch.zeros(c, 1, k, k), stride=stride, dilation=dilation, groups=c)
    assert shape == tuple(ref.shape) and macs == ref.numel() * k * k


def test_pool_and_reduce_shape_rules_match_torch():
    attrs = {"input_dims": "CHW", "output_dims": "CHW", "kernel": [3, 2], "stride": [2, 2]}
    shape, macs = OPS["maxpool2d"].verify([((4, 9, 8), "i8")], attrs)
    ref = F.max_pool2d(torch.zeros(4, 9, 8), (3, 2), (2, 2))
    assert shape == tuple(ref.shape) and macs == ref.numel() * 6
    shape, macs = OPS["reduce"].verify([((2, 3, 4), "f32")], {"mode": "mean", "axes": [0, 2]})
    assert shape == tuple(torch.zeros(2, 3, 4).mean((0, 2)).shape) and macs == 24


@pytest.mark.parametrize("op,operands,attrs,message", [
    ("avg_pool2d", [((4, 8, 8), "i8")], {"input_dims": "CHW", "output_dims": "CHW", "kernel": [2, 2]},
     "i8 operand, avg_pool2d is float only"),
    ("reduce", [((4, 8), "i8")], {"mode": "mean", "axes": [1]}, "mode mean is float only"),
    ("reduce", [((4, 8), "f32")], {"mode": "sum", "axes": [2]}, "attr axes=\\[2\\]"),
    ("maxpool2d", [((4, 3, 3), "f32")], {"input_dims": "CHW", "output_dims": "CHW", "kernel": [4, 4]},
     "window 4x4 .* larger than input 3x3"),
    ("depthwise_conv2d", [((1, 4, 8, 8), "f32")], {}, "1 operands, needs at least 2"),
    ("depthwise_conv2d", [((1, 4, 8, 8), "f32"), ((3, 3, 3), "f32")],
     {"input_dims": "NCHW", "weight_dims": "CHW", "output_dims": "NCHW"}, "input has 4 channels, weight has 3"),
    ("maxpool2d", [((4, 8, 8), "f32")], {"input_dims": "CHW", "output_dims": "HW", "kernel": [2, 2]},
     "output_dims HW drops dim C of size 4"),
])
def test_shape_rules_name_what_is_wrong(op, operands, attrs, message):
    with pytest.raises(OpError, match=message):
        OPS[op].verify(operands, attrs)


def test_ops_without_a_shape_rule_leave_checks_to_their_kernel():
    assert OPS["matmul"].verify([((2, 3), "i8"), ((3, 4), "i8")], {}) is None
    assert OPS["elementwise"].verify([], {}) is None


def test_every_epilogue_step_is_evaluated_by_the_runtime():
    """The epilogue step table (contract/program.py) and the runtime's evaluator name the same steps."""
    import numpy as np

    from torq.contract.program import EPILOGUE_STEPS
    from torq.runtime import epilogue

    ints, floats = np.array([3, -2], np.int64), np.array([0.5, 2.0], np.float32)
    for step in EPILOGUE_STEPS.values():
        if step.to == "entries":
            args, to = [np.array([0, 1], np.int64), np.array(7), np.array(9)], "i8"
        elif step.to == "none":
            args, to = [floats], ""
        elif step.to == "dtype":
            args, to = [floats], "bf16"
        else:  # width / optional: the integer form
            args, to = [ints, np.array([1, 1], np.int64)] * (step.arity // 2) or [ints], "i32"
        out = epilogue._step(step.name, args[:step.arity] if step.arity > 0 else args, to)
        assert np.asarray(out).shape == (2,), step.name
