"""Group-advantage baseline mirroring verl's grpo_vectorized (verl/utils/groupwise.py group_mean_std as
docs/conventions.md describes it): dense group ids via torch.unique, fp32 sums with index_add_, var = (s2 - s1^2/n)/(n-1),
std = sqrt(max(var, 1e-6)), singleton -> (0, 1), A = (s - mean)/(std + 1e-6). Written for this benchmark."""
import torch


def grpo_vectorized(scores, index, eps=1e-6):
    with torch.no_grad():
        uniq, gidx = torch.unique(index, return_inverse=True)
        G = uniq.numel()
        ones = torch.ones_like(scores)
        n = torch.zeros(G, device=scores.device).index_add_(0, gidx, ones)
        s1 = torch.zeros(G, device=scores.device).index_add_(0, gidx, scores)
        s2 = torch.zeros(G, device=scores.device).index_add_(0, gidx, scores * scores)
        mean = s1 / n.clamp_min(1)
        var = (s2 - s1 * s1 / n.clamp_min(1)) / (n - 1).clamp_min(1)
        std = torch.sqrt(var.clamp_min(1e-6))
        single = n <= 1
        mean = torch.where(single, torch.zeros_like(mean), mean)
        std = torch.where(single, torch.ones_like(std), std)
        return (scores - mean[gidx]) / (std[gidx] + eps)


def run(spec):
    N, G = spec["N"], spec["G"]
    g = torch.Generator().manual_seed(1)
    scores = torch.rand(N, generator=g)
    if spec.get("layout", "adjacent") == "adjacent":
        index = torch.arange(N) // G  # verl's layout: the G responses of a prompt are adjacent
    else:
        index = torch.randperm(N, generator=g) // G  # groups of G, not contiguous
    device = spec.get("device", "cpu")
    scores, index = scores.to(device), index.to(device)
    return lambda: grpo_vectorized(scores, index)
