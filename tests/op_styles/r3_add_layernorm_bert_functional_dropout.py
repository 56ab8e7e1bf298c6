"""BertSelfOutput with functional dropout: `h = F.dropout(self.dense(h), p=0.1,
training=self.training)` (eval: the identity), then `self.LayerNorm(h + input_tensor)`."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'add_layernorm', 'params': {'eps': 1e-12}, 'calls': 1,
            'also': ['matmul']}


class BertSelfOutput(nn.Module):
    def __init__(self, hidden_size=768):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=1e-12)
        self.hidden_dropout_prob = 0.1

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dense(hidden_states)
        hidden_states = F.dropout(hidden_states, p=self.hidden_dropout_prob,
                                  training=self.training)
        return self.LayerNorm(hidden_states + input_tensor)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.output = BertSelfOutput()

    def forward(self, hidden_states, input_tensor):
        return self.output(hidden_states, input_tensor)


def get_inputs():
    return [torch.randn(2, 128, 768), torch.randn(2, 128, 768)]
