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
A batch that does not verify raises BatchError naming the file, the row and the field; as a script it prints
"read_batch.py: BatchError: <that message>" on stderr and exits with status 1.
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
        data = _read(path, "a batch shard")
    if len(data) < 8:
        raise BatchError(f"{path}: truncated ({len(data)} bytes)")
    n = struct.unpack("<Q", data[:8])[0]
    if not 0 < n <= len(data) - 8:
        raise BatchError(f"{path}: header length {n} does not fit in {len(data)} bytes (truncated?)")
    try:
        header = json.loads(data[8:8 + n])
    except ValueError as e:
        raise BatchError(f"{path}: the header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise BatchError(f"{path}: the header is not a JSON object")
    body = data[8 + n:]
    out, ranges = {}, []
    for name, v in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(v, dict) or v.get("dtype") not in DTYPES:
            raise BatchError(f"{path}: {name}: dtype {v.get('dtype') if isinstance(v, dict) else None!r}, expected F32 or I32")
        shape, off = v.get("shape"), v.get("data_offsets")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise BatchError(f"{path}: {name}: bad shape {shape!r}")
        if not isinstance(off, list) or len(off) != 2 or not all(type(d) is int and d >= 0 for d in off):
            raise BatchError(f"{path}: {name}: bad data_offsets {off!r}")
        begin, end = off
        count = int(np.prod(shape)) if shape else 1
        if end - begin != 4 * count or end > len(body):
            raise BatchError(f"{path}: {name}: data_offsets [{begin}, {end}] do not match shape {shape} within {len(body)} data bytes (truncated?)")
        ranges.append((begin, end, name))
        out[name] = (np.frombuffer(body[begin:end], dtype=DTYPES[v["dtype"]]).reshape(shape), v["dtype"])
    at = 0
    for begin, end, name in sorted(ranges):
        if begin != at:
            raise BatchError(f"{path}: {name}: data_offsets [{begin}, {end}] " + ("overlap the tensor before" if begin < at else "leave a gap") + f" (the previous tensor ends at {at})")
        at = end
    if at != len(body):
        raise BatchError(f"{path}: the tensors end at data byte {at}, the data section has {len(body)}")
    return out


def _read(path, what):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise BatchError(f"{path}: missing ({what})") from None
    except OSError as e:
        raise BatchError(f"{path}: cannot be read ({what}: {e})") from None


def read_batch(directory):
    """Yields (tensors, rows) per shard: the shard's padded arrays and its manifest lines, after verifying the whole
    batch (digests, dtypes, shapes, the manifest against the tensors field by field); raises BatchError otherwise,
    naming the file, the row and the field. Version 1 batches (no digests) get every other check."""
    try:
        info = json.loads(_read(f"{directory}/batch.json", "batch.json"))
    except ValueError as e:
        raise BatchError(f"{directory}/batch.json: not JSON ({e})") from None
    if not isinstance(info, dict) or info.get("format") != "maporl-batch" or type(info.get("version")) is not int or info.get("version") not in (1, 2):
        raise BatchError(f"{directory}: not a maporl batch (version 1 or 2)")

    def integer(x, lo=0):
        return type(x) is int and x >= lo

    shards = info.get("shards")
    if not integer(info.get("rows"), 1) or not integer(info.get("padTokenId")) or not isinstance(shards, list) or not shards \
            or type(info.get("hasAdvantages")) is not bool:
        raise BatchError(f"{directory}/batch.json: expected rows, padTokenId, shards and hasAdvantages")
    for k, s in enumerate(shards):
        if not isinstance(s, dict) or not re.fullmatch(r"batch-\d{5}\.safetensors", str(s.get("file"))) \
                or not all(integer(s.get(x), 1) for x in ("rows", "promptLength", "responseLength")):
            raise BatchError(f"{directory}/batch.json: shards[{k}]: expected {{ file: batch-NNNNN.safetensors, rows, promptLength, responseLength }} (integers >= 1)")
        if info["version"] == 2 and not (isinstance(s.get("sha256"), str) and re.fullmatch(r"[0-9a-f]{64}", s["sha256"]) and integer(s.get("bytes"))):
            raise BatchError(f"{directory}/batch.json: shards[{k}]: expected sha256 (64 hex digits) and bytes")
    total = sum(s["rows"] for s in shards)
    if total != info["rows"]:
        raise BatchError(f"{directory}/batch.json: the shards hold {total} rows, rows says {info['rows']}")
    manifest = f"{directory}/manifest.jsonl"
    rows = []
    for k, line in enumerate(_read(manifest, "manifest.jsonl").decode("utf8").split("\n")):
        if not line:
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:
            raise BatchError(f"{manifest}: line {k + 1}: not JSON") from None
    if len(rows) != info["rows"]:
        raise BatchError(f"{manifest}: {len(rows)} rows, batch.json says {info['rows']}")
    seen = set()
    for i, r in enumerate(rows):
        def field(name, ok):
            if not ok:
                raise BatchError(f"{manifest}: row {i}: {name}: {json.dumps(r.get(name)) if isinstance(r, dict) and name in r else 'absent'} is not valid")
        field("row", isinstance(r, dict) and type(r.get("row")) is int and r["row"] == i)
        s = r.get("shard")
        field("shard", integer(s) and s < len(shards))
        field("index", integer(r.get("index")) and r["index"] < shards[s]["rows"])
        field("promptLength", integer(r.get("promptLength"), 1) and r["promptLength"] <= shards[s]["promptLength"])
        field("responseLength", integer(r.get("responseLength")) and r["responseLength"] <= shards[s]["responseLength"])
        field("reward", type(r.get("reward")) in (int, float) and math.isfinite(r["reward"]))
        field("agent", integer(r.get("agent")))
        field("turn", integer(r.get("turn")))
        field("retokenized", type(r.get("retokenized")) is bool)
        if (s, r["index"]) in seen:
            raise BatchError(f"{manifest}: row {i}: shard {s} index {r['index']} is named twice")
        seen.add((s, r["index"]))
    pad = info["padTokenId"]
    verified = []  # every shard is verified before the first is yielded
    for s, shard in enumerate(shards):
        path = f"{directory}/{shard['file']}"
        data = _read(path, "a batch shard")
        if info["version"] == 2:
            if len(data) != shard["bytes"]:
                raise BatchError(f"{path}: {len(data)} bytes, batch.json says {shard['bytes']} (truncated or changed)")
            digest = hashlib.sha256(data).hexdigest()
            if digest != shard["sha256"]:
                raise BatchError(f"{path}: SHA-256 {digest}, batch.json says {shard['sha256']} (the shard changed after it was written)")
        raw = read_safetensors(path, data)
        n, P, R = shard["rows"], shard["promptLength"], shard["responseLength"]
        shapes = {"prompt_ids": [n, P], "response_ids": [n, R], "attention_mask": [n, P + R], "response_mask": [n, R], "old_log_probs": [n, R],
                  "rewards": [n], "agent": [n], "turn": [n], "row": [n]}
        if info["hasAdvantages"]:
            shapes["advantages"] = [n, R]
        for name, shape in shapes.items():
            if name not in raw or list(raw[name][0].shape) != shape:
                raise BatchError(f"{path}: {name} missing or not of shape {shape}")
        for name, (_, dtype) in raw.items():
            want = "I32" if name in IDS else "F32"
            if name in shapes and dtype != want:
                raise BatchError(f"{path}: {name}: expected {want}, got {dtype}")
        t = {k: v[0] for k, v in raw.items()}
        mine = [r for r in rows if r["shard"] == s]
        for r in mine:
            i, lp, lr = r["index"], r["promptLength"], r["responseLength"]
            where = f"{path}: row {r['row']} (index {i})"
            if t["rewards"][i] != np.float32(r["reward"]):
                raise BatchError(f"{where}: rewards {float(t['rewards'][i])}, the manifest says {r['reward']}")
            for name in ("agent", "turn", "row"):
                if t[name][i] != r[name]:
                    raise BatchError(f"{where}: {name} {int(t[name][i])}, the manifest says {r[name]}")
            on_p = np.arange(P) >= P - lp
            on_r = np.arange(R) < lr
            bad_p = (t["attention_mask"][i][:P] != on_p) | np.where(on_p, t["prompt_ids"][i] < 0, t["prompt_ids"][i] != pad)
            if bad_p.any():
                raise BatchError(f"{where}: prompt position {int(np.argmax(bad_p))}: attention_mask / prompt_ids disagree with promptLength {lp} (left-padded with {pad})")
            bad_r = (t["response_mask"][i] != on_r) | (t["attention_mask"][i][P:] != on_r) | np.where(on_r, t["response_ids"][i] < 0, t["response_ids"][i] != pad)
            if bad_r.any():
                raise BatchError(f"{where}: response position {int(np.argmax(bad_r))}: response_mask / attention_mask / response_ids disagree with "
                                 f"responseLength {lr} (right-padded with {pad})")
            lps = t["old_log_probs"][i][:lr]
            bad_l = ~np.isnan(lps) if r["retokenized"] else ~(np.isfinite(lps) & (lps <= 1e-3))
            if bad_l.any():
                k = int(np.argmax(bad_l))
                raise BatchError(f"{where}: old_log_probs[{k}] = {float(lps[k])}: expected " + ("NaN (a re-tokenised row)" if r["retokenized"] else "a finite log-prob <= 0"))
        verified.append((t, mine))
    yield from verified


if __name__ == "__main__":
    out = []
    try:
        shards = list(read_batch(sys.argv[1]))
    except BatchError as e:
        print(f"read_batch.py: BatchError: {e}", file=sys.stderr)
        sys.exit(1)
    for t, rows in shards:
        for r in rows:
            i, p, n = r["index"], t["prompt_ids"].shape[1], r["responseLength"]
            out.append({"row": r["row"], "promptIds": t["prompt_ids"][i, p - r["promptLength"]:].tolist(),
                        "responseIds": t["response_ids"][i, :n].tolist(), "oldLogProbs": t["old_log_probs"][i, :n].tolist(),
                        "reward": float(t["rewards"][i]), "agent": int(t["agent"][i]), "turn": int(t["turn"][i])})
    json.dump(out, sys.stdout)
