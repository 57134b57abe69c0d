"""LoRA on the Llama architecture in plain PyTorch (eager), written for maporl's benchmark: every projection of every
block (q/k/v/o, gate/up/down) becomes W x + (alpha / r) B (A x) with A [r, in] Kaiming-uniform, B [out, r] zero, as
PEFT's LoraLayer computes it (written here by hand: no PEFT import); the base is frozen (requires_grad False), and
AdamW steps the adapters alone. Mode "train": one step of cross-entropy over every position of a [batch, T] batch.
Sizes as llama.py, plus rank and alpha."""
import math

import torch

import llama


class LoraLinear(torch.nn.Module):
    def __init__(self, base, r, alpha):
        super().__init__()
        self.base = base
        self.A = torch.nn.Parameter(torch.empty(r, base.in_features))
        torch.nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))
        self.B = torch.nn.Parameter(torch.zeros(base.out_features, r))
        self.scale = alpha / r

    def forward(self, x):
        return self.base(x) + (x @ self.A.t() @ self.B.t()) * self.scale


def run(spec):
    torch.manual_seed(0)
    m = llama.Llama(spec)
    for p in m.parameters():
        p.requires_grad_(False)
    r, alpha = spec["rank"], spec["alpha"]
    for b in m.blocks:
        for name in ("q", "k", "v", "o", "gate", "up", "down"):
            setattr(b, name, LoraLinear(getattr(b, name), r, alpha))
    params = [p for p in m.parameters() if p.requires_grad]
    V, B, T = spec["vocab"], spec["batch"], spec["T"]
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, V, (B, T), generator=g)
    tgt = torch.randint(0, V, (B, T), generator=g)
    opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.0)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(m(ids).view(-1, V), tgt.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    return step
