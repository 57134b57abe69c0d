"""The embedded policy's architecture in PyTorch, written for this benchmark (the same layout as native/model/gpt.cpp:
token + position embeddings, pre-LayerNorm blocks with causal multi-head attention and a tanh-GELU MLP, final
LayerNorm, LM head tied to the token embedding). Two kernels:
- gpt_train: one AdamW training step (cross-entropy) on a [batch, context] batch;
- gpt_generate: greedy generation of `new` tokens for `batch` prompts with a KV cache, token by token (an eager
  Python loop, as a plain PyTorch implementation does).
spec["device"]: "cpu" (default) or "cuda" (the model and batches on the GPU, for scripts/device-check.sh);
spec["tf32"]: TF32 matmuls on CUDA (default false)."""
import math

import torch


class Block(torch.nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(C), torch.nn.LayerNorm(C)
        self.attn, self.proj = torch.nn.Linear(C, 3 * C), torch.nn.Linear(C, C)
        self.fc, self.fcp = torch.nn.Linear(C, 4 * C), torch.nn.Linear(4 * C, C)
        self.H = H

    def forward(self, x, cache=None):
        B, T, C = x.shape
        H = self.H
        q, k, v = self.attn(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        if cache is not None:
            if "k" in cache:
                k, v = torch.cat([cache["k"], k], 2), torch.cat([cache["v"], v], 2)
            cache["k"], cache["v"] = k, v
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
        Tk = k.shape[2]
        mask = torch.ones(T, Tk, dtype=torch.bool, device=x.device).tril(Tk - T)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fcp(torch.nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self, V, T, L, C, H):
        super().__init__()
        self.wte, self.wpe = torch.nn.Embedding(V, C), torch.nn.Embedding(T, C)
        self.h = torch.nn.ModuleList([Block(C, H) for _ in range(L)])
        self.lnf = torch.nn.LayerNorm(C)

    def forward(self, idx, start=0, caches=None):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(start, start + T, device=idx.device))
        for i, b in enumerate(self.h):
            x = b(x, None if caches is None else caches[i])
        return self.lnf(x) @ self.wte.weight.T


def run(spec):
    V, T, L, C, H, B = spec["vocab"], spec["context"], spec["layers"], spec["dModel"], spec["heads"], spec["batch"]
    dev = spec.get("device", "cpu")
    # spec["tf32"]: PyTorch's TF32 matmuls (torch.backends.cuda.matmul.allow_tf32), to compare with maporl's 'high'.
    torch.backends.cuda.matmul.allow_tf32 = bool(spec.get("tf32", False))
    torch.manual_seed(0)
    m = GPT(V, T, L, C, H).to(dev)
    if spec.get("mode") == "generate":
        prompt = torch.randint(0, V, (B, spec["prompt"]), device=dev)
        new = spec["new"]

        @torch.no_grad()
        def gen():
            caches = [{} for _ in range(L)]
            logits = m(prompt, 0, caches)
            tok = logits[:, -1].argmax(-1, keepdim=True)
            for i in range(new - 1):
                logits = m(tok, prompt.shape[1] + i, caches)
                tok = logits[:, -1].argmax(-1, keepdim=True)
            return tok
        return gen
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4)
    idx = torch.randint(0, V, (B, T), device=dev)
    tgt = torch.randint(0, V, (B, T), device=dev)

    def step():
        loss = torch.nn.functional.cross_entropy(m(idx).view(-1, V), tgt.view(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step
