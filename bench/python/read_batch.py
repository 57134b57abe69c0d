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
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "I32": np.int32}


def read_safetensors(path):
    """The tensors of a safetensors file (F32 / I32) as numpy arrays, by name."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, v in header.items():
        if name == "__metadata__":
            continue
        begin, end = v["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype=DTYPES[v["dtype"]]).reshape(v["shape"])
    return out


def read_batch(directory):
    """Yields (tensors, rows) per shard: the shard's padded arrays and its manifest lines."""
    with open(f"{directory}/batch.json") as f:
        info = json.load(f)
    if info.get("format") != "maporl-batch" or info.get("version") != 1:
        raise ValueError(f"{directory}: not a maporl batch (version 1)")
    with open(f"{directory}/manifest.jsonl") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    for s, shard in enumerate(info["shards"]):
        yield read_safetensors(f"{directory}/{shard['file']}"), [r for r in rows if r["shard"] == s]


if __name__ == "__main__":
    out = []
    for t, rows in read_batch(sys.argv[1]):
        for r in rows:
            i, p, n = r["index"], t["prompt_ids"].shape[1], r["responseLength"]
            out.append({"row": r["row"], "promptIds": t["prompt_ids"][i, p - r["promptLength"]:].tolist(),
                        "responseIds": t["response_ids"][i, :n].tolist(), "oldLogProbs": t["old_log_probs"][i, :n].tolist(),
                        "reward": float(t["rewards"][i]), "agent": int(t["agent"][i]), "turn": int(t["turn"][i])})
    json.dump(out, sys.stdout)
