#!/usr/bin/env python3
"""GGUF dequantization fixtures, oracle = gguf-py (llama.cpp's own Python package, PyPI `gguf`).

Writes tests/fixtures/gguf/quants.gguf: for every tensor type the C++ side supports, a tensor
`w.<TYPE>.<case>` with the stored blocks and `ref.<TYPE>.<case>` (F32) with
gguf.quants.dequantize(blocks) — the values the C++ dequantization must reproduce bit for bit.
Types with a gguf-py quantizer (F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) quantize random
normal data; the K types (gguf-py only dequantizes them) use random quant bytes with sane f16
scales, which covers every quant bit pattern. Widths are not multiples of 256 where the format
allows; every case has several rows.

With --model PATH (the real Gemma-3-270M GGUF, see tools/models/gemma3_270m.sh) it also writes
tests/fixtures/gguf/gemma3_270m_rows.gguf: rows {0, 1, mid, last} of two tensors of each type of
the real file, dequantized by gguf-py (`row.<tensor name>.<row>`), plus the type counts in the
metadata (`count.<TYPE>`).

  python3 tools/ref/make_gguf_fixtures.py [--model ~/.cache/dflash/gemma-3-270m-q4_k_m.gguf]
Deterministic (fixed seeds). Needs: gguf (0.19.0), numpy.
"""
from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize, quantize

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "fixtures" / "gguf"

QUANTIZABLE = [Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1]
K_TYPES = [Q.Q4_K, Q.Q5_K, Q.Q6_K]


def f16_bytes(v: np.ndarray) -> np.ndarray:
    return v.astype(np.float16).view(np.uint8).reshape(v.shape + (2,))


def random_k_blocks(t: Q, n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    _, bb = gguf.GGML_QUANT_SIZES[t]
    b = rng.integers(0, 256, size=(n_blocks, bb), dtype=np.uint8)
    d = rng.uniform(1e-4, 2e-3, size=n_blocks).astype(np.float32)
    if t == Q.Q6_K:
        b[:, 208:210] = f16_bytes(d)
    else:
        b[:, 0:2] = f16_bytes(d)
        b[:, 2:4] = f16_bytes(rng.uniform(0, 2e-3, size=n_blocks).astype(np.float32))
    return b


def make_quants() -> None:
    rng = np.random.default_rng(1234)
    w = gguf.GGUFWriter(str(OUT / "quants.gguf"), "dflash-test")
    w.add_string("fixture.oracle", f"gguf-py {gguf.__version__ if hasattr(gguf, '__version__') else ''}".strip())
    cases = {}
    x = rng.standard_normal((3, 160)).astype(np.float32)
    w.add_tensor("w.F32.a", x)
    w.add_tensor("ref.F32.a", x.copy())
    for t in QUANTIZABLE:
        for case, shape in (("a", (3, 160)), ("b", (2, 96)), ("c", (1, 512))):
            x = (rng.standard_normal(shape) * 0.05).astype(np.float32)
            x[0, :4] = [0.0, -0.0, 1e-9, -3.0]  # zeros, a tiny value and a big one
            q = quantize(x, t)
            w.add_tensor(f"w.{t.name}.{case}", q, raw_dtype=t)
            w.add_tensor(f"ref.{t.name}.{case}", dequantize(q, t).astype(np.float32).reshape(shape))
            cases[(t.name, case)] = shape
    for t in K_TYPES:
        for case, (rows, cols) in (("a", (3, 512)), ("b", (2, 256)), ("c", (1, 768))):
            be, bb = gguf.GGML_QUANT_SIZES[t]
            blocks = random_k_blocks(t, rows * cols // be, rng)
            q = blocks.reshape(rows, cols // be * bb)
            w.add_tensor(f"w.{t.name}.{case}", q, raw_dtype=t)
            w.add_tensor(f"ref.{t.name}.{case}", dequantize(q, t).astype(np.float32).reshape(rows, cols))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("wrote", OUT / "quants.gguf", (OUT / "quants.gguf").stat().st_size, "bytes")


def make_model_rows(path: Path) -> None:
    r = gguf.GGUFReader(str(path))
    counts = Counter(t.tensor_type.name for t in r.tensors)
    by_type = defaultdict(list)
    for t in r.tensors:
        if len(t.shape) == 2:
            by_type[t.tensor_type.name].append(t)
    w = gguf.GGUFWriter(str(OUT / "gemma3_270m_rows.gguf"), "dflash-test")
    w.add_string("fixture.source", path.name)
    for name, c in sorted(counts.items()):
        w.add_uint32(f"count.{name}", c)
    w.add_uint32("count.total", len(r.tensors))
    for tname, ts in sorted(by_type.items()):
        # The token embedding (largest Q8_0) first when present, then the first tensor of the type.
        ts = sorted(ts, key=lambda t: (t.name != "token_embd.weight", t.name))
        for t in ts[:2]:
            n_rows = int(t.shape[1])
            data = np.asarray(t.data)  # [rows, row_bytes] (quantized) or [rows, cols]
            for row in sorted({0, 1, n_rows // 2, n_rows - 1}):
                vals = dequantize(data[row:row + 1], t.tensor_type).astype(np.float32).reshape(-1)
                w.add_tensor(f"row.{t.name}.{row}", vals)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("wrote", OUT / "gemma3_270m_rows.gguf", (OUT / "gemma3_270m_rows.gguf").stat().st_size,
          "bytes;", dict(counts))


QWEN3_TOKENIZER = Path("/work/shared/data/tokenizers/qwen3/tokenizer.json")


def make_qwen3_vocab() -> None:
    """A tokenizer-only GGUF (no tensors) holding Qwen3's vocabulary and merges the way llama.cpp's
    convert_hf_to_gguf.py writes a `gpt2` vocabulary: tokens in id order (vocab, then added
    tokens: special -> CONTROL, else USER_DEFINED), [PAD<i>] fillers up to the model's
    vocab_size 151936 (UNUSED), merges as "left right", pre = qwen2."""
    import json
    j = json.loads(QWEN3_TOKENIZER.read_text())
    vocab = j["model"]["vocab"]
    n = 151936
    toks = [None] * n
    types = [gguf.TokenType.UNUSED] * n
    for t, i in vocab.items():
        toks[i] = t
        types[i] = gguf.TokenType.NORMAL
    for a in j["added_tokens"]:
        toks[a["id"]] = a["content"]
        types[a["id"]] = gguf.TokenType.CONTROL if a["special"] else gguf.TokenType.USER_DEFINED
    for i in range(n):
        if toks[i] is None:
            toks[i] = f"[PAD{i}]"
    merges = [" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]]
    w = gguf.GGUFWriter(str(OUT / "qwen3_tokenizer.gguf"), "qwen3")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(toks)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(151645)
    w.add_pad_token_id(151643)
    w.add_bos_token_id(151643)
    w.add_add_bos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    # Committed gzip-compressed (5.9 MB -> 1.7 MB); the C++ test inflates it with zlib.
    import gzip
    raw = (OUT / "qwen3_tokenizer.gguf").read_bytes()
    (OUT / "qwen3_tokenizer.gguf.gz").write_bytes(gzip.compress(raw, 9, mtime=0))
    (OUT / "qwen3_tokenizer.gguf").unlink()
    print("wrote", OUT / "qwen3_tokenizer.gguf.gz", (OUT / "qwen3_tokenizer.gguf.gz").stat().st_size, "bytes")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, default=None)
    a = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    make_quants()
    if QWEN3_TOKENIZER.exists():
        make_qwen3_vocab()
    if a.model:
        make_model_rows(a.model)


if __name__ == "__main__":
    main()
