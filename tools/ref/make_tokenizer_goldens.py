"""Regenerate the tokenizer goldens in tests/fixtures/tokenizer/ with Hugging Face `tokenizers`.

Usage (from the repository root, needs `pip install tokenizers`; no network):
    python3 tools/ref/make_tokenizer_goldens.py [--shared ../shared]

Writes
  corpus.json         the corpus of tools/ref/tokenizer_corpus.py (JSON array of strings)
  <name>.golden.json  per tokenizer (qwen3, gemma3):
    encode            ids of every corpus line, add_special_tokens=False
    encode_special    ids of the first 50 lines with add_special_tokens=True
    decode            decode(encode(line)) or null when it equals the line itself
    decode_skip       decode(..., skip_special_tokens=True) or null when equal to `decode`
    random_ids        200 random id lists (byte tokens, specials, out-of-range ids)
    random_decode     decode(random_ids[i]); random_decode_skip with skip_special_tokens=True
    pieces            {id: token string} for a sample of ids (incl. added tokens)
    vocab_size_hf     HF get_vocab_size(with_added_tokens=True), recorded for information
"""
import argparse
import json
import os
import random
import sys

import tokenizers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_corpus import build_corpus  # noqa: E402

NAMES = ["qwen3", "gemma3"]


def dump(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


def random_id_lists(tok, rng):
    vocab = tok.get_vocab(with_added_tokens=True)
    n = max(vocab.values()) + 1
    byte_ids = [i for t, i in vocab.items() if len(t) == 6 and t.startswith("<0x")]
    special_ids = sorted(i for i, t in tok.get_added_tokens_decoder().items() if t.special)
    out = []
    for _ in range(200):
        ids = []
        for _ in range(rng.randrange(1, 24)):
            k = rng.randrange(10)
            if k < 5:
                ids.append(rng.randrange(n))
            elif k < 7 and byte_ids:
                ids.append(rng.choice(byte_ids))
            elif k < 8:
                ids.append(rng.choice(special_ids))
            elif k < 9:
                ids.append(rng.randrange(min(n, 300)))  # single bytes of byte-level vocabularies
            else:
                ids.append(n + rng.randrange(100))  # no token: skipped by decode
        out.append(ids)
    return out


def main():
    ap = argparse.ArgumentParser()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--shared", default=os.path.join(root, "..", "shared"))
    ap.add_argument("--out", default=os.path.join(root, "tests", "fixtures", "tokenizer"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    corpus = build_corpus()
    dump(os.path.join(args.out, "corpus.json"), corpus)
    for name in NAMES:
        path = os.path.join(args.shared, "data", "tokenizers", name, "tokenizer.json")
        tok = tokenizers.Tokenizer.from_file(path)
        rng = random.Random(name)
        enc = [e.ids for e in tok.encode_batch(corpus, add_special_tokens=False)]
        enc_special = [tok.encode(s, add_special_tokens=True).ids for s in corpus[:50]]
        dec = [tok.decode(ids, skip_special_tokens=False) for ids in enc]
        dec_skip = [tok.decode(ids, skip_special_tokens=True) for ids in enc]
        rnd = random_id_lists(tok, rng)
        n = tok.get_vocab_size(with_added_tokens=True)
        sample = sorted(set([0, 1, 2, 3, 100, 1000, 50000, n - 1, n - 2]
                            + [rng.randrange(n) for _ in range(200)]
                            + list(tok.get_added_tokens_decoder().keys())[:40]))
        golden = {
            "tokenizer": name,
            "tokenizers_version": tokenizers.__version__,
            "vocab_size_hf": n,
            "encode": enc,
            "encode_special": enc_special,
            "decode": [None if d == s else d for d, s in zip(dec, corpus)],
            "decode_skip": [None if k == d else k for k, d in zip(dec_skip, dec)],
            "random_ids": rnd,
            "random_decode": [tok.decode(ids, skip_special_tokens=False) for ids in rnd],
            "random_decode_skip": [tok.decode(ids, skip_special_tokens=True) for ids in rnd],
            "pieces": {str(i): tok.id_to_token(i) for i in sample if tok.id_to_token(i) is not None},
        }
        dump(os.path.join(args.out, f"{name}.golden.json"), golden)
        print(f"{name}: {len(corpus)} lines, {sum(map(len, enc))} tokens")


if __name__ == "__main__":
    main()
