# spm_fixture.py (test helper, run by hand; the test reads its output, not this script): trains a small SentencePiece
# BPE model the way Llama 2's and Mistral's tokenizers are set up (byte fallback, identity normalization, extra
# whitespace kept, digits split, a dummy prefix, <unk> <s> </s> at 0 1 2) on GSM8K questions (shared/data/gsm8k, MIT),
# and writes test/fixtures/gguf-spm/spm.json: the vocabulary as llama.cpp's converter puts it in a GGUF file
# (tokenizer.ggml.tokens, .scores, .token_type: 1 normal, 2 unknown, 3 control, 6 byte) and the ids and decoded text
# sentencepiece itself gives for a set of texts (the reference of test/model/ggufSpm.test.ts).
# Usage: python3 test/helpers/spm_fixture.py SHARED_DIR   (needs the sentencepiece package)
import json
import os
import sys
import tempfile

import sentencepiece as spm

shared = sys.argv[1]
questions = [json.loads(l)["question"] for l in open(os.path.join(shared, "data", "gsm8k", "train.jsonl"))]
tmp = tempfile.mkdtemp()
with open(os.path.join(tmp, "train.txt"), "w") as f:
    f.write("\n".join(questions[:2000]))
spm.SentencePieceTrainer.train(
    input=os.path.join(tmp, "train.txt"), model_prefix=os.path.join(tmp, "m"), model_type="bpe", vocab_size=600,
    byte_fallback=True, normalization_rule_name="identity", remove_extra_whitespaces=False, split_digits=True,
    allow_whitespace_only_pieces=True, add_dummy_prefix=True, character_coverage=0.9995, unk_id=0, bos_id=1, eos_id=2,
    pad_id=-1, minloglevel=2)
sp = spm.SentencePieceProcessor(model_file=os.path.join(tmp, "m.model"))
n = sp.get_piece_size()


def kind(i):
    if sp.is_unknown(i):
        return 2
    if sp.is_control(i):
        return 3
    if sp.is_byte(i):
        return 6
    return 1


texts = questions[2000:2040] + [
    "Natalia sold clips to 48 of her friends in April.",
    "  two leading spaces, and  two   inner ones",
    "trailing space ",
    "a line\nand another\n\nafter a blank one",
    "tabs\tand\r\ncarriage returns",
    "accents: café, naïve, Ærøskøbing",
    "中文 and emoji 🙂🚀 outside the vocabulary",
    "1234567890 + 0.5 = $12.75 (20%)",
    "x",
    " ",
    " is a control token's text, not the token",
]
cases = [{"text": t, "ids": sp.encode(t), "decoded": sp.decode(sp.encode(t))} for t in texts]
out = {
    "source": "sentencepiece " + spm.__version__ + " BPE, vocab 600, trained on 2000 GSM8K train questions",
    "tokens": [sp.id_to_piece(i) for i in range(n)],
    "scores": [sp.get_score(i) for i in range(n)],
    "token_type": [kind(i) for i in range(n)],
    "add_space_prefix": True,
    "cases": cases,
}
dst = os.path.join(os.path.dirname(__file__), "..", "fixtures", "gguf-spm", "spm.json")
with open(dst, "w") as f:
    json.dump(out, f, ensure_ascii=False, indent=0)
print(f"wrote {dst}: {n} pieces, {len(cases)} cases")
