"""Sampling baseline, written for this benchmark to mirror vLLM's native (PyTorch) sampler path
(vllm/v1/sample/ops/topk_topp_sampler.py: apply_top_k_top_p with a full sort, top-k and top-p masks, scatter
back; random_sample: softmax, exponential race q ~ Exp(1), argmax(probs / q)), plus the chosen token's log-prob
under the processed distribution and under the raw softmax, which maporl's sample returns too."""
import torch


def apply_top_k_top_p(logits, k, p):
    logits_sort, logits_idx = logits.sort(dim=-1, descending=False)
    if k is not None:
        top_k_mask = logits_sort.size(1) - k.to(torch.long)
        top_k_mask = logits_sort.gather(1, top_k_mask.unsqueeze(dim=1))
        logits_sort.masked_fill_(logits_sort < top_k_mask, -float("inf"))
    if p is not None:
        probs_sort = logits_sort.softmax(dim=-1)
        probs_sum = torch.cumsum(probs_sort, dim=-1, out=probs_sort)
        top_p_mask = probs_sum <= 1 - p.unsqueeze(dim=1)
        top_p_mask[:, -1] = False
        logits_sort.masked_fill_(top_p_mask, -float("inf"))
    return logits_sort.scatter(dim=-1, index=logits_idx, src=logits_sort)


def sample(raw, temperature, k, p, generator):
    logits = raw / temperature
    if k is not None or p is not None:
        logits = apply_top_k_top_p(logits, k, p)
    probs = logits.softmax(dim=-1)
    q = torch.empty_like(probs).exponential_(generator=generator)
    tokens = probs.div(q).argmax(dim=-1)
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    raw_logprobs = torch.log_softmax(raw, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return tokens, logprobs, raw_logprobs


def bench_logits(B, V, device="cpu"):
    """Normal(0, 2) logits with 64 tokens per row raised by 6..14: the peaked head and flat tail of an LM's
    next-token logits (the same construction as lib/bench/sampling.ts)."""
    g = torch.Generator().manual_seed(1)
    z = 2.0 * torch.randn(B, V, generator=g)
    rows = torch.arange(B).repeat_interleave(64)
    cols = torch.randint(0, V, (B * 64,), generator=g)
    z[rows, cols] += 6.0 + 8.0 * torch.rand(B * 64, generator=g)
    return z.to(device)


def run(spec):
    B, V = spec["B"], spec["V"]
    device = spec.get("device", "cpu")
    z = bench_logits(B, V, device)
    k = torch.full((B,), spec["top_k"], device=device) if spec.get("top_k") else None
    p = torch.full((B,), spec["top_p"], device=device) if spec.get("top_p") else None
    gen = torch.Generator(device=device).manual_seed(0)
    return lambda: sample(z, spec.get("temperature", 1.0), k, p, gen)
