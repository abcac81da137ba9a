"""In-place outputs (`TensorDesc.aliases`) and executable format versions.

An output that aliases an input starts as that input and the program's
DMA-outs overwrite boxes of it: the simulator must return the input's host
values everywhere else, exactly (also f32 values bf16 cannot hold), and count
no DMA byte for the aliasing. Version 1 executables (written before in-place
outputs existed; `data/conv_tiled_relu6_v1.torqx` was serialized by that
writer from `conv_tiled_program(relu6=True)`) still load and run.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from nss_builders import ProgramBuilder, bf16_round, conv_tiled_program, conv_weights

from torq.contract.executable import ExecutableError, parse_executable, serialize_program
from torq.contract.hw import TorqHw
from torq.runtime.simulator import Simulator, SimulatorError

OLD_BLOB = Path(__file__).parent / "data" / "conv_tiled_relu6_v1.torqx"


def _version(blob: bytes) -> int:
    """Program.version (the first field of the root table)."""
    root = struct.unpack_from("<I", blob, 0)[0]
    vtable = root - struct.unpack_from("<i", blob, root)[0]
    return struct.unpack_from("<I", blob, root + struct.unpack_from("<H", blob, vtable + 4)[0])[0]


def box_update_program(dtype: str = "bf16", host: str = "f32"):
    """x (2, 8) is written into the box [1:3, 4:12] of y, which updates input d (4, 16) in place."""
    pb = ProgramBuilder(f"box_update_{dtype}")
    x = pb.input((2, 8), dtype, host)
    d = pb.input((4, 16), dtype, host)
    y = pb.output((4, 16), dtype, host)
    pb.tensors[y].aliases = pb.tensors[d].arg_index
    b = pb.dma_in(x)
    pb.dma_out(b, y, (1, 4), (2, 8))
    return pb.build()


def test_old_format_executable_loads_and_runs():
    blob = OLD_BLOB.read_bytes()
    assert _version(blob) == 1
    p = parse_executable(blob)
    assert p == conv_tiled_program(relu6=True)
    assert all(t.aliases == -1 for t in p.tensors)
    new = serialize_program(p)
    assert _version(new) == 2 and parse_executable(new) == p
    # It computes the conv it describes (torch on the bf16 values the NPU sees).
    x = np.random.default_rng(3).normal(size=(1, 4, 10, 10)).astype(np.float32)
    (y,), _ = Simulator(TorqHw.from_dict(p.hw)).run(p, [x])
    w, b = conv_weights()
    ref = torch.clamp(F.conv2d(torch.from_numpy(bf16_round(x)), torch.from_numpy(w), torch.from_numpy(b)), 0, 6)
    np.testing.assert_allclose(y, bf16_round(ref.numpy()), rtol=1e-2, atol=1e-2)


def test_in_place_output_keeps_the_rest_of_its_input_exactly():
    p = parse_executable(serialize_program(box_update_program()))
    assert p.outputs()[0].aliases == 1
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 8)).astype(np.float32)
    d = rng.normal(size=(4, 16)).astype(np.float32)  # f32 values bf16 cannot hold
    d_before = d.copy()
    (y,), stats = Simulator(TorqHw()).run(p, [x, d])
    expected = d.copy()
    expected[1:3, 4:12] = bf16_round(x)
    np.testing.assert_array_equal(y, expected)
    np.testing.assert_array_equal(d, d_before)  # the caller's input is not written
    # Only the box moves: the aliasing costs no DMA byte; compulsory bytes are x and the box.
    assert stats.dma_bytes_in == stats.dma_bytes_out == 2 * 8 * 2
    assert stats.compulsory_bytes == 2 * (2 * 8 * 2)


def test_in_place_int8_output():
    p = box_update_program("i8", "i8")
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, (2, 8)).astype(np.int8)
    d = rng.integers(-128, 128, (4, 16)).astype(np.int8)
    (y,), _ = Simulator(TorqHw()).run(p, [x, d])
    expected = d.copy()
    expected[1:3, 4:12] = x
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize("mutate,message", [
    (lambda p: setattr(p.tensors[2], "aliases", 5), "aliases input 5, which does not exist"),
    (lambda p: setattr(p.tensors[2], "aliases", 0), r"aliases input 0 of another shape or dtype \(\(2, 8\) bf16\)"),
    (lambda p: setattr(p.tensors[0], "aliases", 1), "tensor 0 of kind input aliases input 1"),
])
def test_bad_aliases_are_refused(mutate, message):
    p = box_update_program()
    mutate(p)
    with pytest.raises(ExecutableError, match=message):
        parse_executable(serialize_program(p, check=False))
    with pytest.raises(SimulatorError, match=message):
        Simulator(TorqHw()).prepare(p)


def test_output_without_alias_must_be_written_whole():
    p = box_update_program()
    p.tensors[2].aliases = -1
    with pytest.raises(ExecutableError, match="output tensor 2 has 128 bytes but DmaOut commands write at most 32"):
        serialize_program(p)
