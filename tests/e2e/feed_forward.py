"""The small model the dynamic-quantization tests quantize (onnxruntime's quantize_dynamic,
torch's PT2E dynamic configs, torchao's quantize_)."""

import torch


class FeedForward(torch.nn.Module):
    """A transformer's feed-forward block on (batch, tokens, features) activations: 64 -> 96
    -> GELU -> 32."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(64, 96)
        self.fc2 = torch.nn.Linear(96, 32)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)))
