"""sentence-transformers' mean pooling: input_mask_expanded = attention_mask.unsqueeze(-1)
.expand(token_embeddings.size()).float(); torch.sum(token_embeddings * mask, 1) /
torch.clamp(mask.sum(1), min=1e-9). Two sums over the token dim (dim 1 of [B, S, D]; a reduce target needs
2^16 elements and rows of 32: 8 x 64 tokens x 128)."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'reduce', 'params': {'axis': 1}, 'calls': 2}


def mean_pooling(model_output, attention_mask):
    token_embeddings = model_output[0]
    input_mask_expanded = attention_mask.unsqueeze(-1).expand(token_embeddings.size()).float()
    return torch.sum(token_embeddings * input_mask_expanded, 1) / torch.clamp(input_mask_expanded.sum(1), min=1e-9)


class Model(nn.Module):
    def forward(self, token_embeddings, attention_mask):
        return mean_pooling((token_embeddings,), attention_mask)


def get_inputs():
    mask = torch.ones(8, 64, dtype=torch.long)
    mask[1, 40:] = 0
    return [torch.randn(8, 64, 128), mask]
