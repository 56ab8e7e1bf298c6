"""DETR's PostProcess (facebookresearch/detr, models/detr.py; HF post_process_object_detection):
prob = F.softmax(out_logits, -1) over the classes (91 + no-object), then scores, labels =
prob[..., :-1].max(-1), both kept. The softmax is one call; the max (whose indices are read) may
be a reduce target of its own."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'softmax', 'params': {}, 'calls': 1, 'also': ['reduce']}


class PostProcess(nn.Module):
    @torch.no_grad()
    def forward(self, out_logits, out_bbox):
        prob = F.softmax(out_logits, -1)
        scores, labels = prob[..., :-1].max(-1)
        return scores, labels, out_bbox


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.postprocess = PostProcess()

    def forward(self, out_logits, out_bbox):
        return self.postprocess(out_logits, out_bbox)


def get_inputs():
    return [torch.randn(8, 100, 92), torch.rand(8, 100, 4)]
