"""A look-alike of a softmax: fairseq's get_normalized_probs with log_probs=True,
utils.log_softmax(logits, dim=-1) = F.log_softmax(x, dim=-1, dtype=torch.float32). Log-probabilities
are not probabilities, and no kernel type computes a log_softmax alone (a cross entropy needs the
target's pick): no target."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': None}


def log_softmax(x, dim, onnx_trace=False):
    if onnx_trace:
        return F.log_softmax(x.float(), dim=dim)
    else:
        return F.log_softmax(x, dim=dim, dtype=torch.float32)


class Model(nn.Module):
    def get_normalized_probs(self, net_output, log_probs):
        logits = net_output[0]
        if log_probs:
            return log_softmax(logits, dim=-1)
        return F.softmax(logits, dim=-1, dtype=torch.float32)

    def forward(self, logits):
        return self.get_normalized_probs((logits, None), log_probs=True)


def get_inputs():
    return [torch.randn(2, 8, 64)]
