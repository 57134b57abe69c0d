"""Fused policy-loss baseline: see policy_loss.run_fused."""
from policy_loss import run_fused as run  # noqa: F401
