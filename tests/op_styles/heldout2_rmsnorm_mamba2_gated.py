"""HF Mamba2's MambaRMSNormGated: the input is gated by silu(gate) in float32, and the gated product
is RMS-normalized (pow(2).mean, rsqrt(variance + eps)), weight * normed.to(dtype). The norm is an
RMSNorm of the gated value (the gating is an elementwise product before it)."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 1e-06}, 'calls': 1}


class MambaRMSNormGated(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states, gate=None):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        if gate is not None:
            hidden_states = hidden_states * nn.functional.silu(gate.to(torch.float32))
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = MambaRMSNormGated(32)

    def forward(self, x, gate):
        return self.norm(x, gate)


def get_inputs():
    return [torch.randn(2, 8, 32), torch.randn(2, 8, 32)]
