"""PaLM's z-loss beside a logsumexp cross entropy: lse = torch.logsumexp(logits, -1);
loss = (lse - logits.gather(..)).mean() + 1e-4 * (lse ** 2).mean(). The z-loss reads the
cross entropy's logsumexp, which a cross-entropy kernel (it returns the loss alone) does not give:
replacing the cross entropy would leave the logsumexp to be computed again. Truthfully nothing
here is one kernel type's call: no target, and no piece of it (the logsumexp, the means) either."""

import torch
from torch import nn

EXPECTED = {'kernel_type': None}


class Model(nn.Module):
    def __init__(self, z_loss=1e-4):
        super().__init__()
        self.z_loss = z_loss

    def forward(self, logits, labels):
        lse = torch.logsumexp(logits, dim=-1)
        target_logits = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
        loss = (lse - target_logits).mean()
        return loss + self.z_loss * (lse ** 2).mean()


def get_inputs():
    return [torch.randn(256, 1024), torch.randint(0, 1024, (256,))]
