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
  synthetic.golden.json  small hand-built tokenizer.json files that exercise options the real
                    files do not use (added-token flags, Split behaviors, byte_fallback + unk,
                    subword prefix/suffix, ignore_merges, legacy merges, Strip decoder,
                    Bert/Roberta/Template post-processors), each with HF's encode/decode of
                    SYNTH_TEXTS
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
    byte_ids = sorted(i for t, i in vocab.items() if len(t) == 6 and t.startswith("<0x"))
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


SYNTH_TEXTS = [
    "", " ", "hello world", "Hello the world, hello token!", "the<mask>the", "a <mask> b", "x<mask>  y",
    "  <mask>  ", "[SEP]   after", "before   [SEP]", "word words sword word.", "word", "(word)", "wordy",
    "re\u0301sume\u0301 ÉCOLE école", "digits 12345 and 6", "tab\there\nnewline  two  spaces",
    "unknown é ü 中文 😀", "a-b--c---d", "- leading and trailing -", "xyz", "xyzxyz xyz", "<s>hi</s>",
    "hello\u00a0world\u3000x", "ǅungla", "ÉCOLEword", "[SEP][SEP]<mask><mask>", "tokenizing tokens",
]


def _byte_level_alphabet():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def _bpe_from_words(alphabet, words, legacy=False, extra=()):
    """Vocab = alphabet + every prefix of each word; merges build each word left to right."""
    vocab = {}
    for t in list(alphabet) + list(extra):
        vocab.setdefault(t, len(vocab))
    merges = []
    for w in words:
        for i in range(1, len(w)):
            a, b = w[:i], w[i]
            if w[: i + 1] not in vocab:
                vocab[w[: i + 1]] = len(vocab)
                merges.append(f"{a} {b}" if legacy else [a, b])
    return vocab, merges


def synthetic_tokenizers():
    bl = _byte_level_alphabet()
    alphabet = [bl[b] for b in range(256)]
    enc = lambda w: "".join(bl[b] for b in w.encode("utf-8"))  # noqa: E731
    words = [enc(w) for w in ["the", " the", "hello", " hello", " world", "token", " token", "ing",
                              " word", "word", "er", " xyz", "123"]]
    base_vocab, base_merges = _bpe_from_words(alphabet, words)
    n = len(base_vocab)
    added = [
        {"id": n, "content": "<mask>", "single_word": False, "lstrip": True, "rstrip": False, "normalized": False, "special": True},
        {"id": n + 1, "content": "[SEP]", "single_word": False, "lstrip": False, "rstrip": True, "normalized": False, "special": True},
        {"id": n + 2, "content": "word", "single_word": True, "lstrip": False, "rstrip": False, "normalized": True, "special": False},
        {"id": n + 3, "content": "ÉCOLE", "single_word": False, "lstrip": False, "rstrip": False, "normalized": True, "special": False},
        {"id": n + 4, "content": "[CLS]", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
    ]
    template = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                           {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [n + 4], "tokens": ["[CLS]"]},
                                   "[SEP]": {"id": "[SEP]", "ids": [n + 1], "tokens": ["[SEP]"]}}}

    def bpe(vocab, merges, **kw):
        m = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
             "vocab": vocab, "merges": merges}
        m.update(kw)
        return m

    def doc(model, normalizer=None, pre=None, post=None, decoder=None, added_tokens=()):
        return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": list(added_tokens),
                "normalizer": normalizer, "pre_tokenizer": pre, "post_processor": post, "decoder": decoder,
                "model": model}

    out = {}
    out["bytelevel_regex_added_flags"] = doc(
        bpe(base_vocab, base_merges),
        normalizer={"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "Replace", "pattern": {"Regex": "\\d"}, "content": "#"}]},
        pre={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        post=template, decoder={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        added_tokens=added)
    legacy_vocab, legacy_merges = _bpe_from_words(alphabet, words, legacy=True)
    out["legacy_merges_nfc_roberta"] = doc(
        bpe(legacy_vocab, ["#version: 0.2"] + legacy_merges, ignore_merges=False),
        normalizer={"type": "NFC"},
        pre={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        post={"type": "RobertaProcessing", "sep": ["[SEP]", n + 1], "cls": ["[CLS]", n + 4], "trim_offsets": True, "add_prefix_space": False},
        decoder={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        added_tokens=added)
    iv = dict(base_vocab)
    iv[enc(" xyzxyz")] = len(iv)
    iv[enc("xyz")] = len(iv)
    out["ignore_merges"] = doc(
        bpe(iv, base_merges, ignore_merges=True),
        pre={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        decoder={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True})
    for behavior in ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]:
        for invert in [False, True]:
            pattern = {"Regex": "\\s+|-+"} if invert else {"String": "-"}
            out[f"split_{behavior}_{'inv' if invert else 'str'}"] = doc(
                bpe(base_vocab, base_merges),
                pre={"type": "Sequence", "pretokenizers": [
                    {"type": "Split", "pattern": pattern, "behavior": behavior, "invert": invert},
                    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
                decoder={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False})

    # SentencePiece-style BPE with byte fallback, an incomplete byte table and unk.
    sp_alphabet = ["▁", "h", "e", "l", "o", "w", "r", "d", "t", "x", "y", "z", "a", "b", "c", "-", "s"]
    sp_words = ["▁hello", "▁the", "▁world", "ll", "xyz"]
    for fuse in [False, True]:
        for prefix in [False, True]:
            extra = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(0x80)] + [f"<0x{b:02X}>" for b in (0xC3, 0xA9)]
            v, m = _bpe_from_words(sp_alphabet, sp_words, extra=extra)
            kw = {"unk_token": "<unk>", "fuse_unk": fuse, "byte_fallback": True}
            if prefix:
                kw.update(continuing_subword_prefix="##", end_of_word_suffix="</w>")
                for t in list(v):
                    if len(t) == 1:
                        v.setdefault("##" + t, len(v))
                        v.setdefault(t + "</w>", len(v))
                        v.setdefault("##" + t + "</w>", len(v))
                m = []  # merges with a prefix would need prefixed pieces; tokenization is per char
            out[f"byte_fallback_fuse{int(fuse)}_prefix{int(prefix)}"] = doc(
                bpe(v, m, **kw),
                normalizer={"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                                                 {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
                pre=None,
                post={"type": "BertProcessing", "sep": ["</s>", v["</s>"]], "cls": ["<s>", v["<s>"]]},
                decoder={"type": "Sequence", "decoders": [
                    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
                    {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
                added_tokens=[{"id": v["<unk>"], "content": "<unk>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
                              {"id": v["<s>"], "content": "<s>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
                              {"id": v["</s>"], "content": "</s>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}])
    return out


def synthetic_goldens():
    cases = []
    for name, d in synthetic_tokenizers().items():
        tok = tokenizers.Tokenizer.from_str(json.dumps(d))
        ids = [tok.encode(t, add_special_tokens=False).ids for t in SYNTH_TEXTS]
        cases.append({
            "name": name,
            "tokenizer": d,
            "texts": SYNTH_TEXTS,
            "encode": ids,
            "encode_special": [tok.encode(t, add_special_tokens=True).ids for t in SYNTH_TEXTS],
            "decode": [tok.decode(i, skip_special_tokens=False) for i in ids],
            "decode_skip": [tok.decode(i, skip_special_tokens=True) for i in ids],
        })
    return cases


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
                            + sorted(tok.get_added_tokens_decoder().keys())[:40]))
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
    synth = synthetic_goldens()
    dump(os.path.join(args.out, "synthetic.golden.json"), synth)
    print(f"synthetic: {len(synth)} tokenizers x {len(SYNTH_TEXTS)} texts")


if __name__ == "__main__":
    main()
