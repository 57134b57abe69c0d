"""An independent float64 reference of the Llama model family, written for maporl's tests from the semantics of
transformers' modeling_llama / modeling_mistral / modeling_qwen2 / modeling_qwen3 and modeling_rope_utils (it does
not import transformers): RMSNorm, rotate-half rotary embeddings with the default, linear and llama3 frequencies,
grouped-query causal attention, q/k RMSNorm (Qwen3), q/k/v biases (Qwen2), SwiGLU, tied or untied LM head.

`python3 bench/python/llama_ref.py OUT_DIR` writes tiny random checkpoints in the Hugging Face layout
(config.json, generation_config.json, model.safetensors, or bf16 / f16 shards with model.safetensors.index.json) and,
per checkpoint, expected.json: per-token log-probs of fixed sequences and greedy continuations, computed in float64
from the weights as stored (bf16 / f16 values widened exactly). test/hf.test.ts checks the package against them."""
import json
import math
import os
import struct
import sys

import numpy as np
import torch


def inv_freq(cfg, dim):
    base = float(cfg.get("rope_theta", 10000.0))
    f = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    rs = cfg.get("rope_scaling")
    if not rs:
        return f
    kind = rs.get("rope_type", rs.get("type"))
    if kind == "linear":
        return f / float(rs["factor"])
    if kind == "llama3":
        factor, low, high = float(rs["factor"]), float(rs["low_freq_factor"]), float(rs["high_freq_factor"])
        old = float(rs["original_max_position_embeddings"])
        low_wl, high_wl = old / low, old / high
        wl = 2 * math.pi / f
        out = torch.where(wl > low_wl, f / factor, f)
        smooth = (old / wl - low) / (high - low)
        smoothed = (1 - smooth) * out / factor + smooth * out
        medium = ~(wl < high_wl) & ~(wl > low_wl)
        return torch.where(medium, smoothed, out)
    raise ValueError(kind)


def rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def forward(cfg, W, ids):
    """Logits [T, V] in float64 for one sequence of token ids."""
    C, NH, NKV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or C // NH
    eps = cfg["rms_norm_eps"]
    T = len(ids)
    x = W["model.embed_tokens.weight"][torch.tensor(ids)]
    f = inv_freq(cfg, hd)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * f[None, :]
    emb = torch.cat((ang, ang), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms(x, W[p + "input_layernorm.weight"], eps)

        def proj(name, inp):
            y = inp @ W[p + name + ".weight"].T
            b = W.get(p + name + ".bias")
            return y + b if b is not None else y
        q = proj("self_attn.q_proj", h).view(T, NH, hd)
        k = proj("self_attn.k_proj", h).view(T, NKV, hd)
        v = proj("self_attn.v_proj", h).view(T, NKV, hd)
        if cfg["model_type"] == "qwen3":
            q = rms(q, W[p + "self_attn.q_norm.weight"], eps)
            k = rms(k, W[p + "self_attn.k_norm.weight"], eps)
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # [H, T, hd]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = NH // NKV
        k, v = k.repeat_interleave(rep, dim=0), v.repeat_interleave(rep, dim=0)
        att = torch.softmax(q @ k.transpose(1, 2) * hd ** -0.5 + mask, dim=-1)
        y = (att @ v).transpose(0, 1).reshape(T, NH * hd)
        x = x + proj("self_attn.o_proj", y)
        h = rms(x, W[p + "post_attention_layernorm.weight"], eps)
        g, u = h @ W[p + "mlp.gate_proj.weight"].T, h @ W[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ W[p + "mlp.down_proj.weight"].T
    x = rms(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else W["lm_head.weight"]
    return x @ head.T


def tensor_shapes(cfg):
    C, NH, NKV, V, I = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["vocab_size"], cfg["intermediate_size"]
    hd = cfg.get("head_dim") or C // NH
    mt = cfg["model_type"]
    s = {"model.embed_tokens.weight": (V, C)}
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        s[p + "input_layernorm.weight"] = (C,)
        s[p + "self_attn.q_proj.weight"] = (NH * hd, C)
        s[p + "self_attn.k_proj.weight"] = (NKV * hd, C)
        s[p + "self_attn.v_proj.weight"] = (NKV * hd, C)
        s[p + "self_attn.o_proj.weight"] = (C, NH * hd)
        if mt == "qwen2" or cfg.get("attention_bias"):
            for n, d in (("q", NH * hd), ("k", NKV * hd), ("v", NKV * hd)):
                s[p + f"self_attn.{n}_proj.bias"] = (d,)
        if mt in ("llama",) and cfg.get("attention_bias"):
            s[p + "self_attn.o_proj.bias"] = (C,)
        if mt == "qwen3":
            s[p + "self_attn.q_norm.weight"] = (hd,)
            s[p + "self_attn.k_norm.weight"] = (hd,)
        s[p + "post_attention_layernorm.weight"] = (C,)
        s[p + "mlp.gate_proj.weight"] = (I, C)
        s[p + "mlp.up_proj.weight"] = (I, C)
        s[p + "mlp.down_proj.weight"] = (C, I)
    s["model.norm.weight"] = (C,)
    if not cfg.get("tie_word_embeddings"):
        s["lm_head.weight"] = (V, C)
    return s


def to_bf16_bits(a):
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16  # round to nearest even
    return u.astype(np.uint16)


def from_bf16_bits(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def write_safetensors(path, tensors, dtype):
    """tensors: name -> float32 array. dtype: F32, BF16 or F16."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        if dtype == "F32":
            raw = np.ascontiguousarray(a, dtype="<f4").tobytes()
        elif dtype == "BF16":
            raw = to_bf16_bits(a).astype("<u2").tobytes()
        else:
            raw = np.ascontiguousarray(a, dtype="<f2").tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def stored(a, dtype):
    """The float64 value of a float32 array once stored in `dtype`."""
    if dtype == "F32":
        return torch.from_numpy(a.astype(np.float64))
    if dtype == "BF16":
        return torch.from_numpy(from_bf16_bits(to_bf16_bits(a)).astype(np.float64))
    return torch.from_numpy(a.astype(np.float16).astype(np.float64))


def make(out, name, cfg, dtype="F32", shards=1, seed=0):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(seed)
    raw = {}
    for n, shape in tensor_shapes(cfg).items():
        if n.endswith("norm.weight"):
            raw[n] = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        elif n.endswith(".bias"):
            raw[n] = (0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            raw[n] = (0.15 * rng.standard_normal(shape)).astype(np.float32)
    W = {n: stored(a, dtype) for n, a in raw.items()}
    if shards == 1:
        write_safetensors(os.path.join(d, "model.safetensors"), raw, dtype)
    else:
        names = list(raw)
        per = math.ceil(len(names) / shards)
        wmap = {}
        for s in range(shards):
            fn = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            part = {n: raw[n] for n in names[s * per:(s + 1) * per]}
            write_safetensors(os.path.join(d, fn), part, dtype)
            wmap.update({n: fn for n in part})
        total = sum(a.size * (4 if dtype == "F32" else 2) for a in raw.values())
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": wmap}, f, indent=1)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": cfg.get("bos_token_id"), "eos_token_id": cfg.get("eos_token_id")}, f, indent=1)
    V = cfg["vocab_size"]
    seqs = [[int(x) for x in rng.integers(0, V, size=n)] for n in (7, 12)]
    expected = {"dtype": dtype, "sequences": [], "greedy": []}
    with torch.no_grad():
        for s in seqs:
            lp = torch.log_softmax(forward(cfg, W, s), dim=-1)
            expected["sequences"].append({"tokens": s, "logprobs": [float(lp[t, s[t + 1]]) for t in range(len(s) - 1)]})
        for s in seqs:
            ids, gaps = list(s[:4]), []
            for _ in range(8):
                z = forward(cfg, W, ids)[-1]
                top = torch.topk(z, 2).values
                gaps.append(float(top[0] - top[1]))
                ids.append(int(torch.argmax(z)))
            expected["greedy"].append({"prompt": s[:4], "tokens": ids[4:], "min_logit_gap": min(gaps)})
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
    print(name, dtype, "shards", shards, "params", sum(a.size for a in raw.values()),
          "min greedy gap", min(g["min_logit_gap"] for g in expected["greedy"]))


def base(model_type, **kw):
    c = {"model_type": model_type, "architectures": [], "vocab_size": 96, "hidden_size": 16, "intermediate_size": 40,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
         "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
         "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}
    c.update(kw)
    return c


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "test/fixtures/hf"
    torch.manual_seed(0)
    make(out, "llama", base("llama", architectures=["LlamaForCausalLM"], tie_word_embeddings=True,
                            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                          "original_max_position_embeddings": 16}, rope_theta=500000.0, eos_token_id=[2, 3]), seed=1)
    make(out, "llama-linear-bias", base("llama", architectures=["LlamaForCausalLM"], attention_bias=True, num_key_value_heads=1,
                                        rope_scaling={"type": "linear", "factor": 2.0}), seed=2)
    make(out, "mistral", base("mistral", architectures=["MistralForCausalLM"], sliding_window=4096), seed=3)
    make(out, "qwen2", base("qwen2", architectures=["Qwen2ForCausalLM"], tie_word_embeddings=True, rope_theta=1000000.0,
                            use_sliding_window=False, sliding_window=32768, max_window_layers=2), seed=4)
    make(out, "qwen3-bf16-sharded", base("qwen3", architectures=["Qwen3ForCausalLM"], head_dim=8, num_key_value_heads=1,
                                         rope_theta=1000000.0, torch_dtype="bfloat16"), dtype="BF16", shards=3, seed=5)
    make(out, "llama-f16", base("llama", architectures=["LlamaForCausalLM"], torch_dtype="float16"), dtype="F16", seed=6)


if __name__ == "__main__":
    main()
