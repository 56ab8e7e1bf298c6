"""StarCoder2's MLP (HF Starcoder2MLP): c_fc, the act from ACT2FN["gelu_pytorch_tanh"] (HF's
PytorchGELUTanh: nn.functional.gelu(input, approximate="tanh")), c_proj, residual dropout."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'gelu', 'params': {'approximate': 'tanh'}, 'calls': 1, 'also': ['matmul']}


class PytorchGELUTanh(nn.Module):
    def forward(self, input):
        return nn.functional.gelu(input, approximate="tanh")


class Starcoder2MLP(nn.Module):
    def __init__(self, embed_dim=64, intermediate_size=256):
        super().__init__()
        self.c_fc = nn.Linear(embed_dim, intermediate_size, bias=True)
        self.c_proj = nn.Linear(intermediate_size, embed_dim, bias=True)
        self.act = PytorchGELUTanh()
        self.residual_dropout = 0.0

    def forward(self, hidden_states):
        hidden_states = self.c_fc(hidden_states)
        hidden_states = self.act(hidden_states)
        hidden_states = self.c_proj(hidden_states)
        return nn.functional.dropout(hidden_states, p=self.residual_dropout, training=self.training)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = Starcoder2MLP()

    def forward(self, hidden_states):
        return self.mlp(hidden_states)


def get_inputs():
    return [torch.randn(2, 16, 64)]
