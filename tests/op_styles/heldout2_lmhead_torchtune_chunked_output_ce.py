"""torchtune's chunked output loss: TransformerDecoder with num_output_chunks = 2 applies the
bias-free output projection to each of h.chunk(2, dim=1), and CEWithChunkedOutputLoss sums
F.cross_entropy(logits_chunk.float(), labels_chunk, ignore_index=-100, reduction="sum") over the
chunks, divided by the count of labels != ignore_index. Each chunk is an LM head feeding a summed
cross entropy: two linear_cross_entropy calls, their reduction noted "sum"."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'linear_cross_entropy', 'params': {'reduction': 'sum'}, 'calls': 2}


class CEWithChunkedOutputLoss(nn.Module):
    def __init__(self, num_output_chunks=2, ignore_index=-100):
        super().__init__()
        self.num_output_chunks = num_output_chunks
        self.ignore_index = ignore_index

    def compute_cross_entropy(self, logits, labels):
        return F.cross_entropy(logits.float(), labels, ignore_index=self.ignore_index, reduction="sum")

    def forward(self, logits, labels):
        total_elements = (labels != self.ignore_index).sum()
        labels = [target_chunk.reshape(-1) for target_chunk in labels.chunk(self.num_output_chunks, dim=1)]
        logits = [logit_chunk.reshape(-1, logit_chunk.size(-1)) for logit_chunk in logits]
        total_loss = 0.0
        for logits_chunk, labels_chunk in zip(logits, labels):
            total_loss += self.compute_cross_entropy(logits_chunk, labels_chunk)
        return total_loss / total_elements


class Model(nn.Module):
    def __init__(self, dim=32, vocab=64):
        super().__init__()
        self.num_output_chunks = 2
        self.output = nn.Linear(dim, vocab, bias=False)
        self.loss_fn = CEWithChunkedOutputLoss(self.num_output_chunks)

    def forward(self, h, labels):
        output = [self.output(chunk) for chunk in h.chunk(self.num_output_chunks, dim=1)]
        return self.loss_fn(output, labels)


def get_inputs():
    return [torch.randn(2, 8, 32), torch.randint(0, 64, (2, 8))]
