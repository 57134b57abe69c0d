"""Writes the byte-level BPE tokenizer that maporl's tests use (test/fixtures/hf-tokenizer/): tokenizer.json in the
Hugging Face `tokenizers` format (GPT-2 byte-to-unicode alphabet, ByteLevel pre-tokenizer and decoder, BPE model
with merges learned here by plain pair counting on a small English sample) plus the added special tokens of the
ChatML (Qwen) and Llama 3 chat formats, and a tokenizer_config.json for each format with its chat template, written
from the formats' documented output. This is a fixture generator only; the package tokenizes with
@huggingface/tokenizers.

usage: python3 bench/python/bpe_fixture.py [OUT_DIR]"""
import collections
import json
import os
import re
import sys

CORPUS = """Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.
How many clips did Natalia sell altogether in April and May? The answer is 72. Weng earns $12 an hour for
babysitting. Yesterday, she just did 50 minutes of babysitting. How much did she earn? Let's think step by step.
Betty is saving money for a new wallet which costs $100. The agents discuss the question, then they answer."""

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>",
            "<|end_header_id|>", "<|eot_id|>"]

# ChatML as Qwen2.5 documents it: a default system turn when the conversation has none.
QWEN_TEMPLATE = ("{%- for message in messages %}{%- if loop.first and message['role'] != 'system' %}"
                 "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
                 "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
                 "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
# Llama 3: bos, then per message a header and the trimmed content closed by <|eot_id|>.
LLAMA3_TEMPLATE = ("{{- bos_token }}{%- for message in messages %}"
                   "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
                   "{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}")


def byte_alphabet():
    """GPT-2's reversible byte -> printable character map."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + list(range(ord("\u00ae"), ord("\u00ff") + 1))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "test/fixtures/hf-tokenizer"
    os.makedirs(out, exist_ok=True)
    alpha = byte_alphabet()
    words = collections.Counter(re.findall(r" ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+", CORPUS))
    seqs = {w: [alpha[b] for b in w.encode("utf-8")] for w in words}
    vocab = {alpha[b]: b for b in range(256)}
    merges = []
    for _ in range(50):
        pairs = collections.Counter()
        for w, n in words.items():
            s = seqs[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(f"{best[0]} {best[1]}")
        vocab[best[0] + best[1]] = len(vocab)
        for w in words:
            s, i, t = seqs[w], 0, []
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                    t.append(s[i] + s[i + 1])
                    i += 2
                else:
                    t.append(s[i])
                    i += 1
            seqs[w] = t
    added = [{"id": len(vocab) + i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, c in enumerate(SPECIALS)]
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                     "vocab": vocab, "merges": merges}}
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
    decoder = {str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")} for a in added}
    qwen = {"add_prefix_space": False, "added_tokens_decoder": decoder, "bos_token": None, "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>", "unk_token": None, "model_max_length": 32768, "tokenizer_class": "Qwen2Tokenizer",
            "clean_up_tokenization_spaces": False, "chat_template": QWEN_TEMPLATE}
    llama3 = {"added_tokens_decoder": decoder, "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
              "model_max_length": 131072, "tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": True,
              "chat_template": LLAMA3_TEMPLATE}
    for name, cfg in (("tokenizer_config.qwen.json", qwen), ("tokenizer_config.llama3.json", llama3)):
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            json.dump(cfg, f, ensure_ascii=False, indent=1)
    print("vocab", len(vocab), "merges", len(merges), "specials", [a["id"] for a in added])


if __name__ == "__main__":
    main()
