import os
import sys
import warnings

import pytest

warnings.filterwarnings("ignore", category=FutureWarning)


@pytest.fixture(scope="session")
def two_bert_layers() -> str:
    """Two BERT-style layers (hidden 256, FFN 1024, 32 tokens) whose weights differ, exported
    to MLIR once for the tests that compile them at a small LRAM, where their matmuls need
    tiling with several candidates (test_tiling_memo, test_traffic_limit)."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "samples"))
    from models import make_bert_encoder_layer
    from run_model import export_mlir

    model, x = make_bert_encoder_layer(seq=32, hidden=256, heads=4, ffn=1024, layers=2)
    return export_mlir(model, x)
