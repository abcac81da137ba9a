"""compiler/ir_text.py: what the dispatch cache hashes (every byte of every constant) and what
super tiling's memo and the worker grouping hash (the ops and shapes alone)."""

from iree.compiler import ir

from torq.compiler.ir_text import canonical_text, structure_text


def _layer(name: str, blob_name: str, blob: str) -> str:
    return f"""
func.func @{name}(%x: tensor<4xf32>) -> tensor<4xf32> {{
  %w = arith.constant dense_resource<{blob_name}> : tensor<4xf32>
  %s = arith.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %a = arith.mulf %x, %w : tensor<4xf32>
  %b = arith.addf %a, %s : tensor<4xf32>
  return %b : tensor<4xf32>
}}
{{-#
  dialect_resources: {{ builtin: {{ {blob_name}: "0x04000000{blob}" }} }}
#-}}
"""


ONES = "0000803F" * 4
TWOS = "00000040" * 4


def _texts(*layers):
    with ir.Context() as ctx:
        modules = [ir.Module.parse(text, ctx) for text in layers]
        return [structure_text(m.operation) for m in modules], [canonical_text(m) for m in modules]


def test_two_layers_differing_in_weights_share_a_structure_not_a_content_key():
    (s1, s2), (c1, c2) = _texts(_layer("layer_1", "blk_1_w", ONES), _layer("layer_2", "blk_2_w", TWOS))
    assert s1 == s2  # names of the function and of its blob aside, same ops and shapes
    assert c1 != c2  # the cache key sees the weights' bytes
    assert "0x04000000" not in s1 and "layer_1" not in s1


def test_same_weights_under_other_names_share_a_content_key():
    (_, _), (c1, c2) = _texts(_layer("f", "a", ONES), _layer("f", "other_name", ONES))
    assert c1 == c2  # blobs named by first use: a front-end cache parse names them differently


def test_inline_constants_stay_in_the_structure():
    (s1, s2), _ = _texts(_layer("f", "a", ONES), _layer("f", "a", ONES).replace("3.0", "5.0"))
    assert s1 != s2  # a value the search may read (an inline constant) is part of the key
