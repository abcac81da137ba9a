"""Reference models with random weights (no downloads), as torch modules.

- `mobilenet_v2(width=1.0)`: MobileNetV2 (inverted residual blocks, depthwise
  3x3 convs, ReLU6), 1000 classes.
- `mobilenet_v3()`: MobileNetV3-Large (squeeze-excite, hardswish and
  hardsigmoid), 1000 classes.
- `resnet18()`: ResNet-18 (basic blocks, max pool, global average pool, fc).
- `bert_encoder_layer(hidden=768, heads=12, ffn=3072)`: one BERT-base encoder
  layer (self-attention + GELU feed-forward, post-layer-norm); `layers=N`
  stacks N of them.
- `audio_encoder(frames=3000)`: a Whisper-tiny-style audio encoder: 80 mel
  bins through two 1-D convs (k3; the second stride 2) with GELU, sinusoidal
  positions, BERT-style layers (d 384, 6 heads, FFN 1536; `layers=2`).
- `vit(size=224)`: ViT-B/16 (16x16 patches, a class token: 197 tokens at 224,
  a prime count; d 768, 12 heads, FFN 3072, pre-layer-norm; `layers=12`).
- `waveform_frontend(samples=16000)`: a conv1d audio front end on the raw
  waveform (Moonshine / wav2vec2 style, `WaveformFrontEnd`).
- `mlp()`: a small multi-layer perceptron (benchmark baseline).

Each `make_*` returns `(model in eval mode, example input)`; sizes are
parameters so tests can use small variants and benchmarks the full ones.
`MODELS` maps the names the samples and benchmarks use to these builders.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: type | None = nn.ReLU6):
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        layers = [] if expand == 1 else [_conv_bn(cin, hidden, 1)]
        layers += [_conv_bn(hidden, hidden, 3, stride, groups=hidden), _conv_bn(hidden, cout, 1, act=None)]
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.block(x)
        return x + y if self.residual else y


def _divisible(v: float, d: int = 8) -> int:
    return max(d, int(v + d / 2) // d * d)


class MobileNetV2(nn.Module):
    # (expansion, channels, repeats, first stride), from the paper
    SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1)]

    def __init__(self, width: float = 1.0, classes: int = 1000):
        super().__init__()
        cin = _divisible(32 * width)
        last = _divisible(1280 * max(1.0, width))
        layers = [_conv_bn(3, cin, 3, 2)]
        for t, c, n, s in self.SETTINGS:
            cout = _divisible(c * width)
            for i in range(n):
                layers.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        layers.append(_conv_bn(cin, last, 1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(last, classes)

    def forward(self, x):
        return self.classifier(self.features(x).mean((2, 3)))


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, squeeze: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(channels, squeeze, 1), nn.Conv2d(squeeze, channels, 1)

    def forward(self, x):
        s = torch.relu(self.fc1(x.mean((2, 3), keepdim=True)))
        return x * nn.functional.hardsigmoid(self.fc2(s))


class MobileNetV3Block(nn.Module):
    """Inverted residual with an optional squeeze-excite and ReLU or hardswish."""

    def __init__(self, cin: int, k: int, expanded: int, cout: int, se: bool, act: type, stride: int):
        super().__init__()
        layers = [] if expanded == cin else [_conv_bn(cin, expanded, 1, act=act)]
        layers.append(_conv_bn(expanded, expanded, k, stride, groups=expanded, act=act))
        if se:
            layers.append(SqueezeExcite(expanded, _divisible(expanded / 4)))
        layers.append(_conv_bn(expanded, cout, 1, act=None))
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.block(x)
        return x + y if self.residual else y


class MobileNetV3Large(nn.Module):
    # (input, kernel, expanded, output, squeeze-excite, activation, stride), from the paper
    SETTINGS = [(16, 3, 16, 16, False, nn.ReLU, 1), (16, 3, 64, 24, False, nn.ReLU, 2),
                (24, 3, 72, 24, False, nn.ReLU, 1), (24, 5, 72, 40, True, nn.ReLU, 2),
                (40, 5, 120, 40, True, nn.ReLU, 1), (40, 5, 120, 40, True, nn.ReLU, 1),
                (40, 3, 240, 80, False, nn.Hardswish, 2), (80, 3, 200, 80, False, nn.Hardswish, 1),
                (80, 3, 184, 80, False, nn.Hardswish, 1), (80, 3, 184, 80, False, nn.Hardswish, 1),
                (80, 3, 480, 112, True, nn.Hardswish, 1), (112, 3, 672, 112, True, nn.Hardswish, 1),
                (112, 5, 672, 160, True, nn.Hardswish, 2), (160, 5, 960, 160, True, nn.Hardswish, 1),
                (160, 5, 960, 160, True, nn.Hardswish, 1)]

    def __init__(self, classes: int = 1000):
        super().__init__()
        layers = [_conv_bn(3, 16, 3, 2, act=nn.Hardswish)]
        layers += [MobileNetV3Block(*s) for s in self.SETTINGS]
        layers.append(_conv_bn(160, 960, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Linear(960, 1280), nn.Hardswish(), nn.Linear(1280, classes))

    def forward(self, x):
        return self.classifier(self.features(x).mean((2, 3)))


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(_conv_bn(cin, cout, 3, stride, act=nn.ReLU), _conv_bn(cout, cout, 3, act=None))
        self.down = None if stride == 1 and cin == cout else _conv_bn(cin, cout, 1, stride, act=None)

    def forward(self, x):
        return torch.relu(self.body(x) + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    def __init__(self, classes: int = 1000):
        super().__init__()
        layers = [_conv_bn(3, 64, 7, 2, act=nn.ReLU), nn.MaxPool2d(3, 2, 1)]
        cin = 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        return self.fc(self.features(x).mean((2, 3)))


def _self_attention(qkv: torch.Tensor, heads: int) -> torch.Tensor:
    """Multi-head scaled dot-product attention of a fused q/k/v projection [b, s, 3h]: [b, s, h]."""
    b, s, h3 = qkv.shape
    h = h3 // 3
    q, k, v = qkv.reshape(b, s, 3, heads, h // heads).permute(2, 0, 3, 1, 4)
    attn = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(h // heads), dim=-1)
    return (attn @ v).transpose(1, 2).reshape(b, s, h)


class BertEncoderLayer(nn.Module):
    def __init__(self, hidden: int = 768, heads: int = 12, ffn: int = 3072):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.norm1 = nn.LayerNorm(hidden)
        self.ff = nn.Sequential(nn.Linear(hidden, ffn), nn.GELU(), nn.Linear(ffn, hidden))
        self.norm2 = nn.LayerNorm(hidden)

    def forward(self, x):
        x = self.norm1(x + self.out(_self_attention(self.qkv(x), self.heads)))
        return self.norm2(x + self.ff(x))


class AudioEncoder(nn.Module):
    """Whisper's encoder shape: conv1d stem over mel frames, then transformer layers over
    the frames / 2 tokens (random weights; BERT-style post-norm layers)."""

    def __init__(self, frames: int, mels: int = 80, hidden: int = 384, heads: int = 6, ffn: int = 1536,
                 layers: int = 2):
        super().__init__()
        self.conv1 = nn.Conv1d(mels, hidden, 3, padding=1)
        self.conv2 = nn.Conv1d(hidden, hidden, 3, stride=2, padding=1)
        tokens = (frames + 1) // 2
        t = torch.arange(tokens, dtype=torch.float32)[:, None]
        rates = torch.exp(-math.log(10000.0) * torch.arange(hidden // 2, dtype=torch.float32) / (hidden // 2 - 1))
        self.register_buffer("positions", torch.cat([torch.sin(t * rates), torch.cos(t * rates)], 1))
        self.layers = nn.Sequential(*[BertEncoderLayer(hidden, heads, ffn) for _ in range(layers)])

    def forward(self, x):
        x = nn.functional.gelu(self.conv2(nn.functional.gelu(self.conv1(x))))
        return self.layers(x.transpose(1, 2) + self.positions)


class WaveformFrontEnd(nn.Module):
    """Moonshine's / wav2vec2's stem on the raw waveform: conv1d of one input channel (k127
    stride 64), GroupNorm(1, 64), tanh, conv1d k7 stride 3, GELU."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(1, 64, 127, stride=64, bias=False)
        self.norm = nn.GroupNorm(1, 64)
        self.conv2 = nn.Conv1d(64, 128, 7, stride=3)

    def forward(self, x):
        return nn.functional.gelu(self.conv2(torch.tanh(self.norm(self.conv1(x)))))


class ViTEncoderLayer(nn.Module):
    """A pre-layer-norm encoder layer, as torchvision's ViT: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, hidden: int, heads: int, ffn: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(hidden, eps=1e-6)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.norm2 = nn.LayerNorm(hidden, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(hidden, ffn), nn.GELU(), nn.Linear(ffn, hidden))

    def forward(self, x):
        x = x + self.out(_self_attention(self.qkv(self.norm1(x)), self.heads))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    """ViT-B/16's shape: patches by a stride-16 conv, a class token, learned positions,
    pre-norm layers, the head on the class token."""

    def __init__(self, size: int, patch: int = 16, hidden: int = 768, heads: int = 12, ffn: int = 3072,
                 layers: int = 12, classes: int = 1000):
        super().__init__()
        self.patches = nn.Conv2d(3, hidden, patch, stride=patch)
        self.cls = nn.Parameter(torch.randn(1, 1, hidden) * 0.02)
        self.positions = nn.Parameter(torch.randn(1, (size // patch) ** 2 + 1, hidden) * 0.02)
        self.layers = nn.Sequential(*[ViTEncoderLayer(hidden, heads, ffn) for _ in range(layers)])
        self.norm = nn.LayerNorm(hidden, eps=1e-6)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        x = self.patches(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.positions
        return self.head(self.norm(self.layers(x))[:, 0])


def _init(model: nn.Module, seed: int) -> nn.Module:
    """Random but well-scaled weights and non-trivial batch-norm statistics."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1, generator=g)
                m.running_var.uniform_(0.5, 1.5, generator=g)
                m.weight.uniform_(0.5, 1.5, generator=g)
                m.bias.uniform_(-0.1, 0.1, generator=g)
    return model.eval()


def make_mobilenet_v2(size: int = 224, width: float = 1.0, seed: int = 0):
    torch.manual_seed(seed)
    return _init(MobileNetV2(width), seed), torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(seed))


def make_mobilenet_v3(size: int = 224, seed: int = 0):
    torch.manual_seed(seed)
    return _init(MobileNetV3Large(), seed), torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(seed))


def make_resnet18(size: int = 224, seed: int = 0):
    torch.manual_seed(seed)
    return _init(ResNet18(), seed), torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(seed))


def make_bert_encoder_layer(seq: int = 128, hidden: int = 768, heads: int = 12, ffn: int = 3072, layers: int = 1,
                            seed: int = 0):
    torch.manual_seed(seed)
    stack = [BertEncoderLayer(hidden, heads, ffn) for _ in range(layers)]
    model = _init(stack[0] if layers == 1 else nn.Sequential(*stack), seed)
    return model, torch.randn(1, seq, hidden, generator=torch.Generator().manual_seed(seed))


def make_audio_encoder(frames: int = 3000, layers: int = 2, seed: int = 0):
    torch.manual_seed(seed)
    return _init(AudioEncoder(frames, layers=layers), seed), \
        torch.randn(1, 80, frames, generator=torch.Generator().manual_seed(seed))


def make_vit(size: int = 224, layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072,
             seed: int = 0):
    torch.manual_seed(seed)
    return _init(ViT(size, hidden=hidden, heads=heads, ffn=ffn, layers=layers), seed), \
        torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(seed))


def make_waveform_frontend(samples: int = 16000, seed: int = 0):
    torch.manual_seed(seed)
    return _init(WaveformFrontEnd(), seed), torch.randn(1, 1, samples, generator=torch.Generator().manual_seed(seed))


def make_mlp(batch: int = 8, features: int = 784, hidden: int = 1024, classes: int = 10, seed: int = 0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                          nn.Linear(hidden, classes))
    return model.eval(), torch.randn(batch, features, generator=torch.Generator().manual_seed(seed))


MODELS = {"mobilenet_v2": make_mobilenet_v2, "mobilenet_v3": make_mobilenet_v3, "resnet18": make_resnet18, "bert": make_bert_encoder_layer,
          "audio_encoder": make_audio_encoder, "vit": make_vit, "mlp": make_mlp}
