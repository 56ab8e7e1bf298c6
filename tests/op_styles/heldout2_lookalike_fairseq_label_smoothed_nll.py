"""A look-alike of cross entropy: fairseq's label_smoothed_nll_loss, nll = -lprobs.gather(-1, t),
smooth = -lprobs.sum(-1), eps_i = eps / (V - 1), loss = (1 - eps - eps_i) · nll + eps_i · smooth,
summed. Its smoothing weights the other classes by eps/(V-1) and the target by 1-eps, where
F.cross_entropy's label_smoothing spreads eps/V over every class: a different loss, which no
cross-entropy call computes. No target, and no piece (the log_softmax, the sums) either."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': None}


def label_smoothed_nll_loss(lprobs, target, epsilon, ignore_index=None, reduce=True):
    if target.dim() == lprobs.dim() - 1:
        target = target.unsqueeze(-1)
    nll_loss = -lprobs.gather(dim=-1, index=target)
    smooth_loss = -lprobs.sum(dim=-1, keepdim=True)
    nll_loss = nll_loss.squeeze(-1)
    smooth_loss = smooth_loss.squeeze(-1)
    if reduce:
        nll_loss = nll_loss.sum()
        smooth_loss = smooth_loss.sum()
    eps_i = epsilon / (lprobs.size(-1) - 1)
    loss = (1.0 - epsilon - eps_i) * nll_loss + eps_i * smooth_loss
    return loss, nll_loss


class Model(nn.Module):
    def forward(self, logits, target):
        lprobs = F.log_softmax(logits, dim=-1, dtype=torch.float32)
        lprobs = lprobs.view(-1, lprobs.size(-1))
        loss, nll_loss = label_smoothed_nll_loss(lprobs, target.view(-1), 0.1)
        return loss


def get_inputs():
    return [torch.randn(2, 8, 64), torch.randint(0, 64, (2, 8))]
