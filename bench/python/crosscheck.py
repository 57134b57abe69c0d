"""Cross-check of the baselines: reads {"B", "T", "r", "v", "m", "s", "g"} (small arrays) on stdin, runs each
baseline on them and prints their outputs as JSON, so the harness can confirm that every baseline computes what
the package computes before timing it (masked positions zeroed, our convention)."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from gae import gae_verl_style  # noqa: E402
from grpo import grpo_vectorized  # noqa: E402
from reinforce import reinforce_plus_plus  # noqa: E402
from policy_loss import ppo_loss  # noqa: E402
from sampling import apply_top_k_top_p  # noqa: E402


def main():
    d = json.loads(sys.stdin.read())
    B, T = d["B"], d["T"]
    r = torch.tensor(d["r"]).view(B, T)
    v = torch.tensor(d["v"]).view(B, T)
    m = torch.tensor(d["m"]).view(B, T)
    gae_a, gae_R = gae_verl_style(r, v, m, d["gamma"], d["lambda"], True)
    rpp_a, rpp_G = reinforce_plus_plus(r, m, d["gamma"], True)
    grpo = grpo_vectorized(torch.tensor(d["s"]), torch.tensor(d["g"]))
    f = lambda k: torch.tensor(d[k]).view(B, T)  # noqa: E731
    lp = f("lp").requires_grad_(True)
    pl = ppo_loss(lp, f("old"), f("adv"), m, f("ref"))
    pl.backward()
    N, V = d["N"], d["V"]
    z = torch.tensor(d["z"]).view(N, V).requires_grad_(True)
    zlp = torch.log_softmax(z, dim=-1).gather(-1, torch.tensor(d["y"]).unsqueeze(-1)).squeeze(-1)
    fl = ppo_loss(zlp, torch.tensor(d["zold"]), torch.tensor(d["zadv"]), torch.ones(N))
    fl.backward()
    SB, SV = d["SB"], d["SV"]
    sz = torch.tensor(d["sz"]).view(SB, SV) / d["stemp"]
    processed = apply_top_k_top_p(sz, torch.full((SB,), d["sk"]), torch.full((SB,), d["sp"]))
    s_lp = torch.log_softmax(processed, dim=-1).gather(-1, torch.tensor(d["stok"]).unsqueeze(-1)).squeeze(-1)
    print(json.dumps({"sample_logprobs": s_lp.tolist(), "gae_advantages": (gae_a * m).flatten().tolist(), "gae_returns": (gae_R * m).flatten().tolist(),
                      "rpp_advantages": rpp_a.flatten().tolist(), "rpp_returns": (rpp_G * m).flatten().tolist(),
                      "grpo": grpo.tolist(), "pl_loss": [pl.item()], "pl_grad": lp.grad.flatten().tolist(),
                      "fused_loss": [fl.item()], "fused_grad": z.grad.flatten().tolist()}))


if __name__ == "__main__":
    main()
