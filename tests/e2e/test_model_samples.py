"""samples/run_model.py on the small variants of the reference models, against torch fp32.

MobileNetV2 at 64x64 compiles 55 dispatches (~20 s on the 2-core CI machine), so it
runs only with TORQ_SLOW_TESTS=1; ResNet-18 at 64x64 and the BERT-base layer at
sequence 32 run by default (~10 s each).
"""

import io
import os
import sys

import pytest
from rich.console import Console

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "samples"))
from run_model import MAC_SHARE_TARGET, main, print_run, run_model  # noqa: E402

slow = pytest.mark.skipif(os.environ.get("TORQ_SLOW_TESTS") != "1", reason="slow: set TORQ_SLOW_TESTS=1")

SMALL = [
    pytest.param("mobilenet_v2", {"size": 64}, marks=slow, id="mobilenet_v2-64"),
    pytest.param("resnet18", {"size": 64}, id="resnet18-64"),
    pytest.param("bert", {"seq": 32}, id="bert-seq32"),
    pytest.param("audio_encoder", {"seq": 200}, id="audio_encoder-200"),
]


@pytest.mark.parametrize("name,size", SMALL)
def test_small_model(name, size):
    run = run_model(name, **size)
    assert run.ok, (run.rel_l2, run.cosine)
    rep = run.report
    assert rep.total_macs > 0 and all(d.macs is not None for d in rep.dispatches)
    assert rep.npu_mac_share >= MAC_SHARE_TARGET, rep.npu_mac_share
    # Every NPU dispatch ran on the simulator; every host dispatch says why.
    assert sorted(s["name"] for s in run.stats) == sorted(d.name for d in rep.dispatches if d.executor == "torq")
    host = [d for d in rep.dispatches if d.executor == "host"]
    assert all(d.reason for d in host)
    out = io.StringIO()
    print_run(run, Console(file=out, width=200))
    text = out.getvalue()
    assert "PASS" in text and "NPU share of MACs" in text
    assert all(d.name in text and d.reason[:40] in text for d in host)


def test_unknown_model_is_one_line_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["alexnet"])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err
