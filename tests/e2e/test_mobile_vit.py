"""End to end: a MobileViT block and MobileViTv2's unfold (issue 15 item 6), torch ->
torq.compile -> simulator, against torch fp32, every dispatch on the NPU.

The MobileViT block is timm's `MobileVitBlock` written out in plain torch (timm is no
test dependency): local convs, the unfold of the feature map into 2x2 patches
([B, C, H, W] -> [B * 4, N, C] by reshapes and transposes), a transformer layer over the
tokens of each patch position, the fold back and the fusion conv over the concat with
the input. IREE presents its attention over patches x heads (two batch dims) with the
heads transposed back beside the tokens, and the layer norms reading the patches
channel-outermost: before the matmul pattern took two dims per role and a reduce could
write its result transposed, timm's mobilevit_xxs kept 12 dispatches (19% of its MACs)
on the host.

MobileViTv2 unfolds right after a 1x1 conv: IREE writes the conv's result in the
unfolded order, a contraction over channels with four dims of the lhs's role (patch row,
patch column, patch grid row and column): 3.3% of mobilevitv2_050's MACs stayed on the
host until a matmul role could hold four M dims.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch_reference import run_against_torch

PATCH = 2


class TransformerLayer(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.SiLU(), nn.Linear(2 * dim, dim))

    def forward(self, x):  # [B, N, C]
        b, n, c = x.shape
        h = self.norm1(x)
        q, k, v = self.qkv(h).reshape(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, c))
        return x + self.mlp(self.norm2(x))


class MobileVitBlock(nn.Module):
    def __init__(self, channels: int = 16, dim: int = 32, heads: int = 2):
        super().__init__()
        self.conv_kxk = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv_1x1 = nn.Conv2d(channels, dim, 1, bias=False)
        self.transformer = TransformerLayer(dim, heads)
        self.norm = nn.LayerNorm(dim)
        self.conv_proj = nn.Conv2d(dim, channels, 1)
        self.conv_fusion = nn.Conv2d(2 * channels, channels, 3, padding=1)

    def forward(self, x):
        shortcut = x
        x = self.conv_1x1(F.silu(self.conv_kxk(x)))
        b, c, hh, ww = x.shape
        nh, nw = hh // PATCH, ww // PATCH
        x = x.reshape(b * c * nh, PATCH, nw, PATCH).transpose(1, 2)
        x = x.reshape(b, c, nh * nw, PATCH * PATCH).transpose(1, 3).reshape(b * PATCH * PATCH, nh * nw, c)
        x = self.norm(self.transformer(x))
        x = x.contiguous().view(b, PATCH * PATCH, nh * nw, c)
        x = x.transpose(1, 3).reshape(b * c * nh, nw, PATCH, PATCH)
        x = x.transpose(1, 2).reshape(b, c, hh, ww)
        return self.conv_fusion(torch.cat((shortcut, self.conv_proj(x)), 1))


def test_mobile_vit_block_all_on_the_npu():
    torch.manual_seed(0)
    x = torch.randn(1, 16, 16, 16, generator=torch.Generator().manual_seed(1))
    run = run_against_torch(MobileVitBlock(), x)
    assert run.cm.report.npu_mac_share == 1.0


class ProjectAndUnfold(nn.Module):
    """MobileViTv2's 1x1 projection and unfold: [B, C, H, W] -> [B, D, P, N]."""

    def __init__(self, channels: int = 32, dim: int = 16):
        super().__init__()
        self.conv_1x1 = nn.Conv2d(channels, dim, 1, bias=False)

    def forward(self, x):
        x = self.conv_1x1(x)
        b, c, hh, ww = x.shape
        nh, nw = hh // PATCH, ww // PATCH
        x = x.reshape(b, c, nh, PATCH, nw, PATCH).permute(0, 1, 3, 5, 2, 4)
        return x.reshape(b, c, PATCH * PATCH, nh * nw)


def test_mobile_vit_v2_unfold_all_on_the_npu():
    torch.manual_seed(0)
    run = run_against_torch(ProjectAndUnfold(), torch.randn(1, 32, 16, 16, generator=torch.Generator().manual_seed(3)))
    assert run.cm.report.npu_mac_share == 1.0
