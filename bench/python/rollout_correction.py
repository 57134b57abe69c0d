"""Rollout correction baseline: verl's rollout_corr_helper.py as it runs in a trainer step, in torch: token-level
truncated importance weights (rollout_is='token', threshold 2: exp(clamp(old - rollout, -20, 20)).clamp(max=2) * mask)
and the metrics maporl's kernel reports with them (the IS weights' mean, std, max, min, fractions above / below the
band and effective sample size; KL and k3 KL; token and sequence chi-square; training and rollout perplexities and
their log differences). Written for this
benchmark from the formulas of test/reference/rolloutCorrection.ref.ts."""
import torch

from common import token_batch

SAFETY = 20.0


def masked_mean(x, mask, dim=None):
    if dim is None:
        return (x * mask).sum() / mask.sum()
    return (x * mask).sum(dim) / mask.sum(dim)


def rollout_correction(old, roll, mask, threshold=2.0):
    with torch.no_grad():
        log_ratio = old - roll
        safe = torch.clamp(log_ratio, -SAFETY, SAFETY)
        rho = torch.exp(safe)
        weights = rho.clamp(max=threshold) * mask
        lo = 1.0 / threshold
        on = mask > 0
        clipped = rho.clamp(lo, threshold)  # verl's std and effective sample size are of the clamped weights
        m = masked_mean(clipped, mask)
        metrics = {
            "is_mean": masked_mean(rho, mask),
            "is_std": torch.sqrt(torch.clamp(masked_mean(clipped**2, mask) - m**2, min=0.0)),
            "is_max": rho[on].max(),
            "is_min": rho[on].min(),
            "is_fraction_high": masked_mean((rho > threshold).float(), mask),
            "is_fraction_low": masked_mean((rho < lo).float(), mask),
        }
        metrics["is_ess"] = 1.0 / masked_mean((clipped / (m + 1e-8)) ** 2, mask)
        metrics["kl"] = masked_mean(roll - old, mask)
        metrics["k3_kl"] = masked_mean(torch.exp(log_ratio) - log_ratio - 1, mask)
        metrics["chi2_token"] = masked_mean(rho**2, mask) - 1
        seq = torch.exp(2 * torch.clamp((log_ratio * mask).sum(-1), -SAFETY, SAFETY))
        metrics["chi2_seq"] = seq.mean() - 1
        metrics["training_ppl"] = torch.exp(-masked_mean(old, mask, -1)).mean()
        metrics["rollout_ppl"] = torch.exp(-masked_mean(roll, mask, -1)).mean()
        row_diff = masked_mean(roll, mask, -1) - masked_mean(old, mask, -1)
        metrics["log_ppl_diff"] = row_diff.mean()
        metrics["log_ppl_abs_diff"] = row_diff.abs().mean()
        return weights, {k: float(v) for k, v in metrics.items()}


def run(spec):
    (u, v), mask = token_batch(spec, 2)
    old = -1.0 - u
    roll = old + 0.1 * (v - 0.5)
    return lambda: rollout_correction(old, roll, mask, spec.get("threshold", 2.0))
