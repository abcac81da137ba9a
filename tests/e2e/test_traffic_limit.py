"""Super tiling prices the candidates it compares by DDR traffic only against the least so
far (compiler/tiling/search.py `_least_traffic_first`): a candidate's program is built
until its DMAs move more bytes than that (build_nss_program's `dma_limit`) and no
further. Left out, it moves more than a kept one, so the choice is the one pricing every
candidate in full makes: the same executable and tiling records with and without the limit."""

import io

import torq
from torq.compiler import nss_dma_limit
from torq.compiler.tiling import cost, search


def _compile(mlir: str, monkeypatch, limit: bool, dump: str) -> tuple[bytes, list[dict], int]:
    """(.vmfb, tiling records, candidates stopped at the limit) of an in-process compile."""
    search._CHOICES.clear()
    stopped = []
    real_build = cost.build_program

    def build(func, options, dma_limit=None):
        try:
            return real_build(func, options, dma_limit if limit else None)
        except nss_dma_limit.DmaLimitExceeded:
            stopped.append(1)
            raise
    monkeypatch.setattr(cost, "build_program", build)  # what the cost oracle's lowered_program calls
    cm = torq.compile(mlir, remarks=io.StringIO(),
                      flags=("--torq-no-cache", "--torq-jobs=1", "--torq-hw=SL2610:lram_kb=32",
                             f"--torq-dump-tiling={dump}"))
    records = [r for dispatch in cm.report.tiling for r in dispatch["roots"]]
    return cm.vmfb, records, len(stopped)


def test_limit_changes_no_choice(two_bert_layers, monkeypatch, tmp_path):
    # At 32 KiB of LRAM the layers' matmuls tile in 2-D or along K, several candidates priced by traffic.
    vmfb, records, stopped = _compile(two_bert_layers, monkeypatch, True, str(tmp_path / "limit.json"))
    full, full_records, none_stopped = _compile(two_bert_layers, monkeypatch, False, str(tmp_path / "full.json"))
    assert stopped > 0, "no candidate was stopped at the limit: the test checks nothing"
    assert none_stopped == 0
    assert vmfb == full
    assert records == full_records
