# gguf_writer.py (test helper): writes a GGUF v3 file from a Hugging Face llama directory (F32 model.safetensors,
# byte-level BPE tokenizer.json), independently of the package's reader: written from the GGUF specification
# (ggml's docs/gguf.md) and the conventions of llama.cpp's convert_hf_to_gguf.py: tensor names blk.N.attn_q ...,
# dimensions listed fastest first, q and k rows permuted for llama's rotary layout, norms kept F32, Q8_0 blocks
# quantized as ggml's quantize_row_q8_0_ref (d = amax / 127 stored as a half, q = round-half-away(x / d)).
# Usage: gguf_writer.py MODEL_DIR OUT.gguf f32|q8_0 [rope_freqs] [spm=FIXTURE.json]   (rope_freqs: add the tensor
# llama.cpp's converter writes for llama3 rope scaling; spm=: a SentencePiece vocabulary instead of the directory's
# tokenizer, as the converter writes one: tokenizer.ggml.model 'llama', tokens, scores, token types, bos 1, eos 2)
import json
import struct
import sys

import numpy as np

src, out, kind = sys.argv[1], sys.argv[2], sys.argv[3]
cfg = json.load(open(f"{src}/config.json"))
raw = open(f"{src}/model.safetensors", "rb").read()
hlen = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8 : 8 + hlen])
tensors = {}
for name, t in header.items():
    if name == "__metadata__":
        continue
    a, b = t["data_offsets"]
    tensors[name] = np.frombuffer(raw[8 + hlen + a : 8 + hlen + b], dtype="<f4").reshape(t["shape"])

heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]


def permute(w, n_head):
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


names = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
out_tensors = []
for name, w in tensors.items():
    if name == "model.embed_tokens.weight":
        g = "token_embd.weight"
    elif name == "model.norm.weight":
        g = "output_norm.weight"
    elif name == "lm_head.weight":
        g = "output.weight"
    else:
        parts = name.split(".")
        g = f"blk.{parts[2]}." + names[".".join(parts[3:])]
        if g.endswith("attn_q.weight"):
            w = permute(w, heads)
        elif g.endswith("attn_k.weight"):
            w = permute(w, kv)
    out_tensors.append((g, w))
extra = sys.argv[4:]
if "rope_freqs" in extra:
    out_tensors.append(("rope_freqs.weight", np.ones(cfg["hidden_size"] // heads // 2, dtype=np.float32)))


def q8_0(w):
    x = w.reshape(-1, 32).astype(np.float32)
    amax = np.abs(x).max(axis=1)
    d = amax / np.float32(127)
    inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, 1), 0).astype(np.float32)
    v = x * inv[:, None]
    q = np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))  # roundf: half away from zero
    blocks = bytearray()
    for b in range(x.shape[0]):
        blocks += struct.pack("<e", float(d[b])) + q[b].astype(np.int8).tobytes()
    return bytes(blocks)


tok = json.load(open(f"{src}/tokenizer.json"))
tcfg = json.load(open(f"{src}/tokenizer_config.json"))
vocab = dict(tok["model"]["vocab"])
special = {}
for a in tok["added_tokens"]:
    vocab[a["content"]] = a["id"]
    special[a["id"]] = a["content"]
tokens = [None] * (max(vocab.values()) + 1)
for t, i in vocab.items():
    tokens[i] = t
merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
eos = vocab[tcfg["eos_token"]]

kvs = []


def kv_str(k, s):
    kvs.append((k, 8, s))


def kv_u32(k, v):
    kvs.append((k, 4, v))


def kv_f32(k, v):
    kvs.append((k, 6, v))


kv_str("general.architecture", "llama")
kv_str("general.name", "tiny")
kv_u32("llama.context_length", cfg["max_position_embeddings"])
kv_u32("llama.embedding_length", cfg["hidden_size"])
kv_u32("llama.block_count", cfg["num_hidden_layers"])
kv_u32("llama.feed_forward_length", cfg["intermediate_size"])
kv_u32("llama.attention.head_count", heads)
kv_u32("llama.attention.head_count_kv", kv)
kv_f32("llama.attention.layer_norm_rms_epsilon", cfg["rms_norm_eps"])
kv_f32("llama.rope.freq_base", cfg["rope_theta"])
kv_u32("llama.vocab_size", cfg["vocab_size"])
kv_str("tokenizer.ggml.model", "gpt2")
kv_str("tokenizer.ggml.pre", "gpt2")
kvs.append(("tokenizer.ggml.tokens", 9, (8, tokens)))
kvs.append(("tokenizer.ggml.token_type", 9, (5, [3 if i in special else 1 for i in range(len(tokens))])))
kvs.append(("tokenizer.ggml.merges", 9, (8, merges)))
kv_u32("tokenizer.ggml.eos_token_id", eos)
kv_str("tokenizer.chat_template", tcfg["chat_template"])
spm = [a[4:] for a in extra if a.startswith("spm=")]
if spm:
    fx = json.load(open(spm[0]))
    kvs = [kv for kv in kvs if not kv[0].startswith("tokenizer.")]
    kv_str("tokenizer.ggml.model", "llama")
    kvs.append(("tokenizer.ggml.tokens", 9, (8, fx["tokens"])))
    kvs.append(("tokenizer.ggml.scores", 9, (6, fx["scores"])))
    kvs.append(("tokenizer.ggml.token_type", 9, (5, fx["token_type"])))
    kv_u32("tokenizer.ggml.bos_token_id", 1)
    kv_u32("tokenizer.ggml.eos_token_id", 2)
    kvs.append(("tokenizer.ggml.add_space_prefix", 7, fx["add_space_prefix"]))
    kv_str("tokenizer.chat_template", "{{ bos_token }}{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}")


def s(x):
    b = x.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def value(t, v):
    if t == 8:
        return s(v)
    if t == 4:
        return struct.pack("<I", v)
    if t == 5:
        return struct.pack("<i", v)
    if t == 6:
        return struct.pack("<f", v)
    if t == 7:
        return struct.pack("<?", v)
    if t == 9:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(value(et, i) for i in items)
    raise ValueError(t)


head = b"GGUF" + struct.pack("<IQQ", 3, len(out_tensors), len(kvs))
for k, t, v in kvs:
    head += s(k) + struct.pack("<I", t) + value(t, v)
datas, off = [], 0
for g, w in out_tensors:
    use_q8 = kind == "q8_0" and w.ndim == 2
    data = q8_0(w) if use_q8 else w.astype("<f4").tobytes()
    dims = list(reversed(w.shape))
    head += s(g) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
    head += struct.pack("<IQ", 8 if use_q8 else 0, off)
    datas.append(data)
    off += len(data)
    pad = (-off) % 32
    datas.append(b"\0" * pad)
    off += pad
head += b"\0" * ((-len(head)) % 32)
with open(out, "wb") as f:
    f.write(head)
    for d in datas:
        f.write(d)
