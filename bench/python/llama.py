"""The Llama architecture in plain PyTorch (eager), written for maporl's benchmark from transformers' LlamaForCausalLM
semantics (RMSNorm, rotate-half rotary embeddings, grouped-query causal attention, SwiGLU, tied or untied head),
random weights, float32, on spec["device"] ("cpu" or "cuda"). Modes (spec["mode"]):
- "generate": greedy generation of `new` tokens for `batch` prompts of `prompt` tokens with a KV cache, token by
  token in a Python loop (as a plain PyTorch decoding loop does);
- "train": one full fine-tuning AdamW step (cross-entropy over every position) on a [batch, T] batch.
Sizes: vocab, hidden, layers, heads, kv_heads, intermediate, tie."""
import math

import torch


class Block(torch.nn.Module):
    def __init__(self, C, H, KV, I):
        super().__init__()
        hd = C // H
        self.H, self.KV, self.hd = H, KV, hd
        self.n1, self.n2 = torch.nn.Parameter(torch.ones(C)), torch.nn.Parameter(torch.ones(C))
        self.q = torch.nn.Linear(C, H * hd, bias=False)
        self.k = torch.nn.Linear(C, KV * hd, bias=False)
        self.v = torch.nn.Linear(C, KV * hd, bias=False)
        self.o = torch.nn.Linear(H * hd, C, bias=False)
        self.gate = torch.nn.Linear(C, I, bias=False)
        self.up = torch.nn.Linear(C, I, bias=False)
        self.down = torch.nn.Linear(I, C, bias=False)

    @staticmethod
    def rms(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))

    def forward(self, x, cos, sin, cache=None):
        B, T, C = x.shape
        h = self.rms(x, self.n1)
        q = self.q(h).view(B, T, self.H, self.hd).transpose(1, 2)
        k = self.k(h).view(B, T, self.KV, self.hd).transpose(1, 2)
        v = self.v(h).view(B, T, self.KV, self.hd).transpose(1, 2)

        def rot(t):
            a, b = t[..., : self.hd // 2], t[..., self.hd // 2:]
            return t * cos + torch.cat((-b, a), -1) * sin
        q, k = rot(q), rot(k)
        if cache is not None:
            if "k" in cache:
                k, v = torch.cat([cache["k"], k], 2), torch.cat([cache["v"], v], 2)
            cache["k"], cache["v"] = k, v
        rep = self.H // self.KV
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.hd)
        Tk = k.shape[2]
        mask = torch.ones(T, Tk, dtype=torch.bool, device=x.device).tril(Tk - T)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, self.H * self.hd)
        x = x + self.o(y)
        h = self.rms(x, self.n2)
        return x + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))


class Llama(torch.nn.Module):
    def __init__(self, spec):
        super().__init__()
        V, C, L = spec["vocab"], spec["hidden"], spec["layers"]
        self.emb = torch.nn.Embedding(V, C)
        self.blocks = torch.nn.ModuleList([Block(C, spec["heads"], spec["kv_heads"], spec["intermediate"]) for _ in range(L)])
        self.norm = torch.nn.Parameter(torch.ones(C))
        self.head = torch.nn.Linear(C, V, bias=False)
        if spec.get("tie", True):
            self.head.weight = self.emb.weight
        hd = C // spec["heads"]
        inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        ang = torch.arange(spec.get("context", 2048), dtype=torch.float32)[:, None] * inv[None, :]
        emb = torch.cat((ang, ang), -1)
        self.cos, self.sin = emb.cos(), emb.sin()

    def forward(self, ids, pos0=0, caches=None):
        T = ids.shape[1]
        x = self.emb(ids)
        cos, sin = self.cos[pos0:pos0 + T], self.sin[pos0:pos0 + T]
        for i, b in enumerate(self.blocks):
            x = b(x, cos, sin, None if caches is None else caches[i])
        return self.head(Block.rms(x, self.norm))


def run(spec):
    torch.manual_seed(0)
    dev = torch.device(spec.get("device", "cpu"))  # "cuda": the model, its rotary tables and the batches on the GPU
    m = Llama(spec).to(dev)
    m.cos, m.sin = m.cos.to(dev), m.sin.to(dev)
    V, B = spec["vocab"], spec["batch"]
    g = torch.Generator().manual_seed(1)
    if spec.get("mode") == "generate":
        m.eval()
        prompts = torch.randint(0, V, (B, spec["prompt"]), generator=g).to(dev)

        def gen():
            with torch.no_grad():
                caches = [{} for _ in m.blocks]
                z = m(prompts, 0, caches)[:, -1]
                pos = prompts.shape[1]
                for _ in range(spec["new"]):
                    nxt = z.argmax(-1, keepdim=True)
                    z = m(nxt, pos, caches)[:, -1]
                    pos += 1
        return gen
    T = spec["T"]
    ids = torch.randint(0, V, (B, T), generator=g).to(dev)
    tgt = torch.randint(0, V, (B, T), generator=g).to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-5, betas=(0.9, 0.95), weight_decay=0.0)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(m(ids).view(-1, V), tgt.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
    return step
