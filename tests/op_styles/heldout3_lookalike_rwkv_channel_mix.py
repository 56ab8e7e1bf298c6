"""RWKV's channel mixing (HF RwkvFeedForward): token shift (ZeroPad2d((0, 0, 1, -1))), key and
receptance inputs interpolated with time_mix parameters, key = torch.square(torch.relu(key(k))),
value = value(key), receptance = torch.sigmoid(receptance(r)), output receptance * value. The
sigmoid gate multiplies the output after the second projection, and reads another projection's
output than the one it gates: no SiLU, no gated MLP (fused_mlp); the projections are matmuls."""

import torch
from torch import nn

EXPECTED = {'kernel_type': None, 'also': ['matmul']}


class RwkvFeedForward(nn.Module):
    def __init__(self, hidden_size=64, intermediate_size=256):
        super().__init__()
        self.time_shift = nn.ZeroPad2d((0, 0, 1, -1))
        self.time_mix_key = nn.Parameter(torch.rand(1, 1, hidden_size))
        self.time_mix_receptance = nn.Parameter(torch.rand(1, 1, hidden_size))
        self.key = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.receptance = nn.Linear(hidden_size, hidden_size, bias=False)
        self.value = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, hidden):
        shifted = self.time_shift(hidden)
        key = hidden * self.time_mix_key + shifted * (1 - self.time_mix_key)
        receptance = hidden * self.time_mix_receptance + shifted * (1 - self.time_mix_receptance)
        key = torch.square(torch.relu(self.key(key)))
        value = self.value(key)
        receptance = torch.sigmoid(self.receptance(receptance))
        return receptance * value


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.feed_forward = RwkvFeedForward()

    def forward(self, hidden):
        return self.feed_forward(hidden)


def get_inputs():
    return [torch.randn(2, 16, 64)]
