"""A torch model quantized the way users quantize it, and the references to judge it by.

`quantize_with_ort` exports the model with `torch.onnx.export` and quantizes
it with onnxruntime's `quantize_static`: QDQ format, per-channel int8
weights, int8 activations, calibrated on a few seeded random inputs (no
downloads). `onnxruntime_output` runs the quantized model on onnxruntime;
`int8_error_figures` compares a Torq output with it and with IREE llvm-cpu on
the same imported MLIR (DESIGN §7: within one output step per layer,
whole-model relative L2 reported).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def quantize_with_ort(model, x, directory: Path, calibration: int = 4, seed: int = 1) -> Path:
    """The QDQ int8 ONNX file of `model` (input "x", output "y"), written in `directory`."""
    import onnxruntime.quantization as ort_quant

    directory = Path(directory)
    fp32, q = _export(model, x, directory), directory / "model_int8.onnx"
    shape = tuple(x.shape)

    class Calibration(ort_quant.CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(seed)
            self.data = iter([{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(calibration)])

        def get_next(self):
            return next(self.data, None)

    ort_quant.quantize_static(str(fp32), str(q), Calibration(), quant_format=ort_quant.QuantFormat.QDQ,
                              per_channel=True, activation_type=ort_quant.QuantType.QInt8,
                              weight_type=ort_quant.QuantType.QInt8)
    return q


def quantize_dynamic_with_ort(model, x, directory: Path) -> Path:
    """The model exported as `quantize_with_ort` does, quantized by onnxruntime's
    `quantize_dynamic` (its recipe for transformers): int8 weights, each MatMul's input
    quantized when the model runs (DynamicQuantizeLinear, uint8), the output f32."""
    import onnxruntime.quantization as ort_quant

    directory = Path(directory)
    fp32, q = _export(model, x, directory), directory / "model_int8_dynamic.onnx"
    ort_quant.quantize_dynamic(str(fp32), str(q), weight_type=ort_quant.QuantType.QInt8)
    return q


def _export(model, x, directory: Path) -> Path:
    """`model` exported on input `x` (named "x", its output "y") as model_fp32.onnx in `directory`."""
    import torch

    fp32 = directory / "model_fp32.onnx"
    with torch.no_grad():
        torch.onnx.export(model, (x,), str(fp32), dynamo=False, input_names=["x"], output_names=["y"],
                          opset_version=17)
    return fp32


def onnxruntime_output(path: Path, x: np.ndarray) -> np.ndarray:
    """The quantized model's output on onnxruntime (CPU)."""
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def one_input_step_moved(path: Path, x: np.ndarray, seed: int = 0) -> np.ndarray:
    """`x` with one element (chosen by `seed`) moved by the input quantization step: the
    smallest change of the quantized model's input. How far that moves llvm-cpu's own output
    is the model's sensitivity, the floor of any error between two int8 implementations that
    round one value differently."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    quantize = next(n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "x")
    moved = x.copy()
    index = tuple(int(np.random.default_rng(seed).integers(0, n)) for n in x.shape)
    moved[index] += float(inits[quantize.input[1]])
    return moved


def int8_error_figures(y: np.ndarray, cpu: np.ndarray, onnxrt: np.ndarray, steps: bool = True) -> dict:
    """Relative L2 of `y` vs llvm-cpu and vs onnxruntime (and of llvm-cpu vs onnxruntime), and,
    with `steps` (a quantized output, dequantized), how many output elements are 0, 1, 2, ...
    output steps from llvm-cpu's (the step: the distance between the output's levels)."""
    from cnn import error_figures

    figures = {"rel_l2_cpu": error_figures(y, cpu)[0], "rel_l2_ort": error_figures(y, onnxrt)[0],
               "cpu_vs_ort": error_figures(cpu, onnxrt)[0]}
    if not steps:  # an f32 output has no levels to count steps between
        return figures
    levels = np.unique(cpu)
    step = float(np.diff(levels).min()) if len(levels) > 1 else 1.0
    off = np.rint(np.abs(y - cpu) / step).astype(np.int64)
    return figures | {"step_histogram": np.bincount(off.ravel()).tolist()}
