#!/usr/bin/env python3
"""llama.cpp's `gemma4` tokenizer on a vocab-only GGUF, oracle = llama.cpp itself.

1. Writes a vocab-only GGUF (general.architecture gemma4, tokenizer.ggml.model "gemma4") from the
   real Gemma 3 tokenizer (/work/shared/data/tokenizers/gemma3: the same SentencePiece-style BPE
   family as Gemma 4) exactly the way llama.cpp's converter writes a Gemma 4 vocabulary
   (conversion/gemma.py, Gemma4Model.set_vocab): gguf-py's LlamaHfVocab tokens / scores / types,
   SpecialVocab(load_merges=True) merges + special ids + add_bos/add_eos, add_space_prefix false,
   add_bos true. The GGUF (~15 MB) is NOT committed: the C++ test rebuilds it from the shared
   tokenizer.json and the types recorded here, and checks the rebuild against the FNV-1a hashes
   of the token and merge lists written here.
2. Tokenizes the 2,249 lines of tests/fixtures/tokenizer/corpus.json with llama.cpp (vocab_only
   load; tools/ref/llamacpp_driver.cc `tokenize_full`): ids (add_special = false,
   parse_special = true), ids with add_special = true, and the concatenated
   llama_token_to_piece(special = true) text of the ids.
3. Writes tests/fixtures/gguf/gemma4_tokenizer_llamacpp.json:
     meta     versions, source sha256, n_tokens, n_merges, fnv1a64 of tokens / merges (each
              entry followed by one NUL byte), the GGUF keys (special ids, add flags);
     types    {"<type>": [ids]} for every token whose type is not NORMAL (1);
     corpus   llama.cpp's ids per line;
     special  per line: null when ids_special == [bos] + ids, else llama.cpp's ids_special;
     pieces   per line: null when the pieces text equals the line, else that text;
     eog      every id llama_vocab_is_eog reports (driver mode eog);
     tiny     three hand-made vocabularies: model gemma4 with and without "<|tool_response>" (the
              "</s>" rule), model gpt2 with pre gemma4 (llama.cpp's same code path); a newline run that is a token no merge makes: the PR 21343 rule; byte
              fallback; add_bos_token false, which llama.cpp overrides) written by gguf-py, with
              their tokens / types / merges and llama.cpp's ids, ids_special, pieces and eog
              for a few lines (needs no shared data).

    /work/venv-gguf/bin/python tools/ref/make_gemma4_tokenizer_oracle.py \
        --llama-cpp /work/llama.cpp-src --build /work/llama.cpp-build [--keep-gguf OUT.gguf]
Needs gguf (0.19) and transformers (LlamaHfVocab loads the tokenizer through AutoTokenizer).
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import gguf

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures"
OUT = FIX / "gguf" / "gemma4_tokenizer_llamacpp.json"
SRC = Path("/work/shared/data/tokenizers/gemma3")
if not SRC.exists():
    SRC = REPO / "shared" / "data" / "tokenizers" / "gemma3"


def fnv1a64(items: list[bytes]) -> str:
    h = 0xCBF29CE484222325
    for it in items:
        for b in it + b"\0":
            h ^= b
            h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def write_gguf(src: Path, path: Path) -> dict:
    """Gemma4Model.set_vocab of llama.cpp's converter, on a copy of `src`."""
    vocab = gguf.LlamaHfVocab(src)
    tokens, scores, types = [], [], []
    for text, score, toktype in vocab.all_tokens():
        tokens.append(text)
        scores.append(score)
        types.append(toktype)
    assert len(tokens) == vocab.vocab_size
    w = gguf.GGUFWriter(str(path), "gemma4")
    w.add_tokenizer_model("gemma4")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    special = gguf.SpecialVocab(src, load_merges=True)
    special.chat_template = None  # not needed for tokenization; keeps the file smaller
    special.add_to_gguf(w)
    w.add_add_space_prefix(False)
    w.add_add_bos_token(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    by_type: dict[str, list[int]] = {}
    for i, t in enumerate(types):
        if int(t) != 1:
            by_type.setdefault(str(int(t)), []).append(i)
    return {"n_tokens": len(tokens), "n_merges": len(special.merges),
            "fnv1a64_tokens": fnv1a64(tokens),
            "fnv1a64_merges": fnv1a64([m.encode("utf-8") for m in special.merges]),
            "special_ids": special.special_token_ids, "add_special": special.add_special_token,
            "types": by_type}


TINY_LINES = ["hello hello", "\n", "\n\n\n", "\n\n\n\n", "\n\n\n\n\n\n\n", "a\n\nb", "hello\u2581hello",
              "  hello", "z\u00e9\u4e16", "<eos>hello</s><turn|>", "<start>x<start>", "hello\r\n\r\nhello",
              " \n ", "", "</s>"]


def tiny_vocab(tool_response: bool, model: str) -> dict:
    toks = [("<pad>", 3), ("<eos>", 1), ("<bos>", 3), ("<unk>", 3)]
    toks += [(f"<0x{b:02X}>", 6) for b in range(256)]
    toks += [(t, 1) for t in ["\n", "\n\n", "\n\n\n", "\u2581", "h", "e", "l", "o", "he", "ll", "hell",
                              "hello", "\u2581hello", "\u2581\u2581", "</s>", "<turn|>"]]
    toks += [("<start>", 4)]
    if tool_response:
        toks += [("<|tool_response>", 1)]
    merges = ["\n \n", "h e", "l l", "he ll", "hell o", "\u2581 hello", "\u2581 \u2581"]
    return {"model": model, "pre": "gemma4", "tokens": [t for t, _ in toks], "types": [k for _, k in toks], "merges": merges,
            "bos": 2, "eos": 1, "add_bos_token": False}


def write_tiny_gguf(v: dict, path: Path) -> None:
    w = gguf.GGUFWriter(str(path), "gemma4")
    w.add_tokenizer_model(v["model"])
    w.add_tokenizer_pre(v["pre"])
    w.add_token_list(v["tokens"])
    w.add_token_scores([0.0] * len(v["tokens"]))
    w.add_token_types(v["types"])
    w.add_token_merges(v["merges"])
    w.add_bos_token_id(v["bos"])
    w.add_eos_token_id(v["eos"])
    w.add_add_bos_token(v["add_bos_token"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def eog_ids(driver: Path, model: Path) -> list[int]:
    r = subprocess.run([str(driver), "eog", str(model)], capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])["eog"]


def run_driver(driver: Path, model: Path, lines: list[str]) -> tuple[list[dict], str]:
    inp = "\n".join(json.dumps({"text": s}, ensure_ascii=True) for s in lines) + "\n"
    r = subprocess.run([str(driver), "tokenize_full", str(model)], input=inp, capture_output=True,
                       text=True, check=True)
    out = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    assert len(out) == len(lines), (len(out), len(lines), r.stderr[-2000:])
    return out, r.stderr


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True, type=Path, help="llama.cpp source tree (include/llama.h)")
    ap.add_argument("--build", required=True, type=Path, help="its build folder (bin/libllama.so)")
    ap.add_argument("--commit", default="", help="llama.cpp commit to record (when SRC is not a git checkout)")
    ap.add_argument("--keep-gguf", type=Path, default=None, help="also keep the vocab GGUF here")
    args = ap.parse_args()
    bindir = args.build / "bin"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        driver = tmp / "llamacpp_driver"
        inc = [f"-I{args.llama_cpp / 'include'}", f"-I{args.llama_cpp / 'ggml' / 'include'}"]
        if not (args.llama_cpp / "ggml" / "include").exists():
            inc = [f"-I{args.llama_cpp / 'include'}"]
        subprocess.run(["g++", "-O2", "-std=c++17", *inc, str(REPO / "tools/ref/llamacpp_driver.cc"),
                        f"-L{bindir}", "-lllama", "-lggml", "-lggml-base", f"-Wl,-rpath,{bindir}",
                        "-o", str(driver)], check=True)
        src = tmp / "gemma3"
        src.mkdir()
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(SRC / f, src / f)
        model = tmp / "gemma4_vocab.gguf"
        info = write_gguf(src, model)
        if args.keep_gguf:
            shutil.copy(model, args.keep_gguf)
        corpus = json.loads((FIX / "tokenizer" / "corpus.json").read_text())
        res, _ = run_driver(driver, model, corpus)
        eog = eog_ids(driver, model)
        tiny = []
        for tool_response, model_name in ((False, "gemma4"), (True, "gemma4"), (False, "gpt2")):
            v = tiny_vocab(tool_response, model_name)
            write_tiny_gguf(v, tmp / "tiny.gguf")
            r, _ = run_driver(driver, tmp / "tiny.gguf", TINY_LINES)
            v.update({"lines": TINY_LINES, "ids": [x["ids"] for x in r], "ids_special": [x["ids_special"] for x in r],
                      "pieces": [bytes.fromhex(x["pieces_hex"]).decode("utf-8", errors="replace") for x in r],
                      "eog": eog_ids(driver, tmp / "tiny.gguf")})
            tiny.append(v)
    bos = info["special_ids"]["bos"]
    special = [None if r["ids_special"] == [bos] + r["ids"] else r["ids_special"] for r in res]
    pieces = []
    for s, r in zip(corpus, res):
        t = bytes.fromhex(r["pieces_hex"]).decode("utf-8", errors="surrogateescape")
        pieces.append(None if t == s else t)
    commit = args.commit or subprocess.run(["git", "-C", str(args.llama_cpp), "rev-parse", "HEAD"],
                                           capture_output=True, text=True).stdout.strip()
    meta = {"reference": "llama.cpp (llama.h via tools/ref/llamacpp_driver.cc tokenize_full, vocab_only)",
            "llama_cpp": commit or str(args.llama_cpp), "gguf_py": importlib.metadata.version("gguf"),
            "source": "gemma3/tokenizer.json sha256 " + hashlib.sha256((SRC / "tokenizer.json").read_bytes()).hexdigest(),
            **{k: v for k, v in info.items() if k != "types"}}
    OUT.write_text(json.dumps({"meta": meta, "types": info["types"], "corpus": [r["ids"] for r in res],
                               "special": special, "pieces": pieces,
                               "eog": eog, "tiny": tiny},
                              ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"wrote {OUT.relative_to(REPO)} ({OUT.stat().st_size} bytes); "
          f"{sum(x is not None for x in special)} special / {sum(x is not None for x in pieces)} pieces exceptions")


if __name__ == "__main__":
    main()
