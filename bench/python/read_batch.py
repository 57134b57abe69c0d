"""read_batch.py: reads a maporl training batch (exportBatch / readBatch in the package) with numpy alone.

A batch directory holds batch.json (the shards and their padded lengths), manifest.jsonl (one line per row: where it
is, where it came from) and batch-NNNNN.safetensors shards of padded tensors in verl's layout:
  prompt_ids [n, P] int32 (left-padded), response_ids [n, R] int32 (right-padded), attention_mask [n, P + R] int32,
  response_mask [n, R] int32, old_log_probs [n, R] float32 (behaviour log-probs), rewards [n] float32,
  advantages [n, R] float32 (when exported with advantages), agent, turn, row [n] int32.

In a PyTorch trainer:
    for tensors, rows in read_batch("batch"):
        input_ids = torch.from_numpy(np.concatenate([tensors["prompt_ids"], tensors["response_ids"]], 1)).long()
        attention_mask = torch.from_numpy(tensors["attention_mask"])
        old_log_probs = torch.from_numpy(tensors["old_log_probs"])
        ...
Run as a script (python3 read_batch.py DIR) it prints every row unpadded as JSON (the package's tests compare it).
"""
import hashlib
import json
import math
import re
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "I32": np.int32}
IDS = ("prompt_ids", "response_ids", "attention_mask", "response_mask", "agent", "turn", "row")


class BatchError(ValueError):
    """A batch that does not verify: the message names the file, the row and the field."""


def read_safetensors(path, data=None):
    """The tensors of a safetensors file (F32 / I32) as numpy arrays, by name, with their dtype names. Offsets must be
    contiguous, not overlap and cover the data exactly."""
    if data is None:
        with open(path, "rb") as f:
            data = f.read()
    if len(data) < 8:
        raise BatchError(f"{path}: truncated")
    n = struct.unpack("<Q", data[:8])[0]
    if not 0 < n <= len(data) - 8:
        raise BatchError(f"{path}: header length {n} does not fit")
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out, ranges = {}, []
    for name, v in header.items():
        if name == "__metadata__":
            continue
        if v.get("dtype") not in DTYPES:
            raise BatchError(f"{path}: {name}: dtype {v.get('dtype')!r}, expected F32 or I32")
        begin, end = v["data_offsets"]
        count = int(np.prod(v["shape"])) if v["shape"] else 1
        if end - begin != 4 * count:
            raise BatchError(f"{path}: {name}: data_offsets do not hold shape {v['shape']}")
        ranges.append((begin, end, name))
        out[name] = (np.frombuffer(body[begin:end], dtype=DTYPES[v["dtype"]]).reshape(v["shape"]), v["dtype"])
    at = 0
    for begin, end, name in sorted(ranges):
        if begin != at:
            raise BatchError(f"{path}: {name}: data_offsets overlap or leave a gap")
        at = end
    if at != len(body):
        raise BatchError(f"{path}: the tensors end at data byte {at}, the data section has {len(body)}")
    return out


def read_batch(directory):
    """Yields (tensors, rows) per shard: the shard's padded arrays and its manifest lines, after verifying the whole
    batch (digests, dtypes, shapes, the manifest against the tensors field by field); raises BatchError otherwise."""
    with open(f"{directory}/batch.json") as f:
        info = json.load(f)
    if info.get("format") != "maporl-batch" or info.get("version") not in (1, 2):
        raise BatchError(f"{directory}: not a maporl batch (version 1 or 2)")

    def integer(x, lo=0):
        return type(x) is int and x >= lo

    shards = info.get("shards")
    if not integer(info.get("rows"), 1) or not integer(info.get("padTokenId")) or not isinstance(shards, list) or not shards:
        raise BatchError(f"{directory}/batch.json: expected rows, padTokenId and shards")
    for k, s in enumerate(shards):
        if not re.fullmatch(r"batch-\d{5}\.safetensors", str(s.get("file"))) or not all(integer(s.get(x), 1) for x in ("rows", "promptLength", "responseLength")):
            raise BatchError(f"{directory}/batch.json: shards[{k}] is not valid")
        if info["version"] == 2 and not (re.fullmatch(r"[0-9a-f]{64}", str(s.get("sha256"))) and integer(s.get("bytes"))):
            raise BatchError(f"{directory}/batch.json: shards[{k}]: expected sha256 and bytes")
    if sum(s["rows"] for s in shards) != info["rows"]:
        raise BatchError(f"{directory}/batch.json: the shards' rows do not add up to rows")
    with open(f"{directory}/manifest.jsonl") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    if len(rows) != info["rows"]:
        raise BatchError(f"{directory}/manifest.jsonl: {len(rows)} rows, batch.json says {info['rows']}")
    seen = set()
    for i, r in enumerate(rows):
        s = r.get("shard")
        ok = r.get("row") == i and integer(s) and s < len(shards) and integer(r.get("index")) and r["index"] < shards[s]["rows"]
        ok = ok and integer(r.get("promptLength"), 1) and r["promptLength"] <= shards[s]["promptLength"]
        ok = ok and integer(r.get("responseLength")) and r["responseLength"] <= shards[s]["responseLength"]
        ok = ok and type(r.get("reward")) in (int, float) and math.isfinite(r["reward"]) and integer(r.get("agent")) and integer(r.get("turn"))
        if not ok or (s, r["index"]) in seen:
            raise BatchError(f"{directory}/manifest.jsonl: row {i} is not valid (or names a shard index twice)")
        seen.add((s, r["index"]))
    pad = info["padTokenId"]
    for s, shard in enumerate(shards):
        path = f"{directory}/{shard['file']}"
        with open(path, "rb") as f:
            data = f.read()
        if info["version"] == 2 and (len(data) != shard["bytes"] or hashlib.sha256(data).hexdigest() != shard["sha256"]):
            raise BatchError(f"{path}: size or SHA-256 differs from batch.json (the shard changed after it was written)")
        raw = read_safetensors(path, data)
        n, P, R = shard["rows"], shard["promptLength"], shard["responseLength"]
        shapes = {"prompt_ids": [n, P], "response_ids": [n, R], "attention_mask": [n, P + R], "response_mask": [n, R], "old_log_probs": [n, R],
                  "rewards": [n], "agent": [n], "turn": [n], "row": [n]}
        if info.get("hasAdvantages"):
            shapes["advantages"] = [n, R]
        for name, shape in shapes.items():
            if name not in raw or list(raw[name][0].shape) != shape or raw[name][1] != ("I32" if name in IDS else "F32"):
                raise BatchError(f"{path}: {name} missing, not of shape {shape}, or of the wrong dtype")
        t = {k: v[0] for k, v in raw.items()}
        mine = [r for r in rows if r["shard"] == s]
        for r in mine:
            i, lp, lr = r["index"], r["promptLength"], r["responseLength"]
            where = f"{path}: row {r['row']} (index {i})"
            if t["rewards"][i] != np.float32(r["reward"]) or t["agent"][i] != r["agent"] or t["turn"][i] != r["turn"] or t["row"][i] != r["row"]:
                raise BatchError(f"{where}: rewards / agent / turn / row disagree with the manifest")
            on_p = np.arange(P) >= P - lp
            on_r = np.arange(R) < lr
            if (t["attention_mask"][i] != np.concatenate([on_p, on_r])).any() or (t["response_mask"][i] != on_r).any():
                raise BatchError(f"{where}: the masks disagree with promptLength / responseLength")
            if (t["prompt_ids"][i][~on_p] != pad).any() or (t["response_ids"][i][~on_r] != pad).any() \
                    or (t["prompt_ids"][i][on_p] < 0).any() or (t["response_ids"][i][on_r] < 0).any():
                raise BatchError(f"{where}: token ids or padding out of place")
            lps = t["old_log_probs"][i][:lr]
            if r.get("retokenized") is True:
                if not np.isnan(lps).all():
                    raise BatchError(f"{where}: a re-tokenised row with log-probs")
            elif not (np.isfinite(lps).all() and (lps <= 1e-3).all()):
                raise BatchError(f"{where}: old_log_probs not finite log-probs <= 0")
        yield t, mine


if __name__ == "__main__":
    out = []
    for t, rows in read_batch(sys.argv[1]):
        for r in rows:
            i, p, n = r["index"], t["prompt_ids"].shape[1], r["responseLength"]
            out.append({"row": r["row"], "promptIds": t["prompt_ids"][i, p - r["promptLength"]:].tolist(),
                        "responseIds": t["response_ids"][i, :n].tolist(), "oldLogProbs": t["old_log_probs"][i, :n].tolist(),
                        "reward": float(t["rewards"][i]), "agent": int(t["agent"][i]), "turn": int(t["turn"][i])})
    json.dump(out, sys.stdout)
