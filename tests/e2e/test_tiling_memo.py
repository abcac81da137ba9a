"""Super tiling searches a root's tiling once per process for all the roots of the same
ops and shapes (compiler/tiling/search.py: `choose_tile_sizes` keeps its choices by
`_choice_key`, which leaves the weights' bytes out). The choice depends on shapes
alone, so two layers that differ in their weights must compile to the same bytes
with and without the memo, and the second layer must not be searched again."""

import io

import torq
from torq.compiler.tiling import search


def _compile(mlir: str, monkeypatch, memo: bool, dump: str) -> tuple[bytes, list[dict], int]:
    """(.vmfb, tiling records, searches run) of an in-process compile with the memo on or off."""
    search._CHOICES.clear()
    monkeypatch.setattr(search, "CHOICES_KEPT", search.CHOICES_KEPT if memo else 0)
    runs = []
    real = search._search
    monkeypatch.setattr(search, "_search", lambda *a: runs.append(1) or real(*a))
    cm = torq.compile(mlir, remarks=io.StringIO(),
                      flags=("--torq-no-cache", "--torq-jobs=1", "--torq-hw=SL2610:lram_kb=64",
                             f"--torq-dump-tiling={dump}"))
    monkeypatch.setattr(search, "_search", real)
    records = [r for dispatch in cm.report.tiling for r in dispatch["roots"]]
    return cm.vmfb, records, len(runs)


def test_layers_searched_once_and_compiled_alike(two_bert_layers, monkeypatch, tmp_path):
    # At 64 KiB of LRAM (conftest.two_bert_layers), so that their matmuls need tiling.
    vmfb, records, searches = _compile(two_bert_layers, monkeypatch, True, str(tmp_path / "memo.json"))
    fresh, fresh_records, fresh_searches = _compile(two_bert_layers, monkeypatch, False, str(tmp_path / "fresh.json"))
    assert vmfb == fresh
    # The second layer's roots take the first layer's choices: at most about half are searched.
    assert fresh_searches >= 2 * (searches - 1), (searches, fresh_searches)
    assert searches < fresh_searches
    assert any(r["tiles"] > 1 for r in fresh_records), "no root needed tiling: the test checks nothing"
    assert records == fresh_records  # locations included: a reused choice names its own root
