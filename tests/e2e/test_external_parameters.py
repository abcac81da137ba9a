"""A model whose weights are external (iree-turbine's `externalize_module_parameters` +
`save_module_parameters`, as LLMs are deployed with IREE) compiles for Torq and runs with
its parameter archive: `torq.compile(..., parameters=)`, `torq.load(..., parameters=)` and
`torq-run-module --parameters=[scope=]FILE`, against torch; without the archive, or under
the wrong scope, the error says what to pass."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import torq

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "samples"))
from cnn import error_figures, within_limits  # noqa: E402

BIN = os.path.dirname(sys.executable)


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    """(compiled module, archive, input, torch's output) of a two-layer MLP with external weights."""
    import iree.turbine.aot as aot

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32))
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model(x).numpy()
    aot.externalize_module_parameters(model)
    archive = tmp_path_factory.mktemp("params") / "mlp.irpa"
    aot.save_module_parameters(str(archive), model)
    cm = torq.compile(aot.export(model, x), remarks=io.StringIO(), parameters=f"model={archive}")
    return cm, archive, x.numpy(), ref


def test_compile_and_run_with_the_archive(mlp):
    cm, _, x, ref = mlp
    assert all(d.executor == "torq" for d in cm.report.dispatches if d.name.startswith("main_"))
    assert within_limits(*error_figures(np.asarray(cm(x)), ref))


def test_load_takes_iree_style_and_mapping_parameters(mlp):
    cm, archive, x, _ = mlp
    expected = np.asarray(cm(x))
    for parameters in ([f"model={archive}"], {"model": archive}):
        with torq.load(cm.vmfb, parameters=parameters) as m:
            assert np.array_equal(m.main(x), expected)


@pytest.mark.parametrize("parameters, message", [
    (None, r"reads external parameters: pass their archive, --parameters=\[scope=\]FILE.irpa"),
    ("weights={archive}", "pass the archive under scope 'model': --parameters=model=FILE.irpa"),
    ("model=/nonexistent/w.irpa", "cannot read parameter archive /nonexistent/w.irpa: no such file"),
])
def test_missing_or_misnamed_archive_says_what_to_pass(mlp, parameters, message):
    cm, archive, _, _ = mlp
    with pytest.raises(torq.TorqRuntimeError, match=message):
        torq.load(cm.vmfb, parameters=parameters.format(archive=archive) if parameters else None)


def test_run_module_cli_takes_parameters(mlp, tmp_path):
    cm, archive, x, ref = mlp
    vmfb, inp, out = tmp_path / "m.vmfb", tmp_path / "x.npy", tmp_path / "y.npy"
    cm.save(vmfb)
    np.save(inp, x)
    run = [os.path.join(BIN, "torq-run-module"), f"--module={vmfb}", f"--input=@{inp}"]
    done = subprocess.run(run + [f"--parameters=model={archive}", f"--output=@{out}"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert within_limits(*error_figures(np.load(out), ref))
    missing = subprocess.run(run, capture_output=True, text=True)
    assert missing.returncode != 0 and "--parameters=[scope=]FILE.irpa" in missing.stderr
    assert "Traceback" not in missing.stderr
