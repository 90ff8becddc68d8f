"""The target's token embedding and lm_head, read from its checkpoint (frozen inputs of drafter training).

Supports a GGUF file (gguf-py: token_embd.weight, output.weight when untied; dequantized to fp32) and a
Hugging Face folder (config.json + *.safetensors: model.embed_tokens.weight, lm_head.weight when untied).
The embedding scale is the family's (Gemma: sqrt(hidden_size) in fp32, as our engine's embed(); others 1).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

GEMMA_FAMILIES = ("gemma", "gemma2", "gemma3", "gemma3_text", "gemma4", "gemma4_text")


@dataclass
class TargetTables:
    embed: np.ndarray        # [V, H] fp32, unscaled stored table
    head: np.ndarray         # [V, H] fp32 (the same array when tied)
    embed_scale: float
    hidden_size: int
    num_layers: int
    vocab_size: int
    family: str


def _gguf_tables(path: Path) -> TargetTables:
    import gguf
    from gguf.quants import dequantize

    r = gguf.GGUFReader(str(path))
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()

    def u32(key):
        return int(r.fields[f"{arch}.{key}"].parts[-1][0])

    tensors = {t.name: t for t in r.tensors}

    def deq(name):
        t = tensors[name]
        return np.ascontiguousarray(dequantize(t.data, t.tensor_type), dtype=np.float32)

    embed = deq("token_embd.weight")
    head = deq("output.weight") if "output.weight" in tensors else embed
    H = u32("embedding_length")
    return TargetTables(embed, head, math.sqrt(H) if arch.startswith("gemma") else 1.0, H,
                        u32("block_count"), embed.shape[0], arch)


def _hf_tables(folder: Path) -> TargetTables:
    from safetensors.torch import load_file

    cfg = json.loads((folder / "config.json").read_text())
    text = cfg.get("text_config", cfg)
    tensors = {}
    for f in sorted(folder.glob("*.safetensors")):
        tensors.update(load_file(str(f)))

    def find(*names):
        for n in names:
            if n in tensors:
                return tensors[n].float().numpy()
        return None

    embed = find("model.embed_tokens.weight", "model.language_model.embed_tokens.weight", "embed_tokens.weight")
    if embed is None:
        raise SystemExit(f"{folder}: no embed_tokens tensor")
    head = embed if text.get("tie_word_embeddings", cfg.get("tie_word_embeddings", True)) else find("lm_head.weight")
    family = text.get("model_type", cfg.get("model_type", ""))
    H = int(text["hidden_size"])
    return TargetTables(embed, head, math.sqrt(H) if family in GEMMA_FAMILIES else 1.0, H,
                        int(text["num_hidden_layers"]), embed.shape[0], family)


def load_target_tables(path: str) -> TargetTables:
    """The tables of a GGUF file are dequantized once and cached beside it as `<file>.train-tables/`
    (float32 .npy, memory-mapped on later runs: dequantizing a 262k x 640 table takes ~1 min on CPU)."""
    p = Path(path)
    if not (p.is_file() and p.suffix == ".gguf"):
        return _hf_tables(p)
    cache = p.with_name(p.name + ".train-tables")
    meta = cache / "meta.json"
    if meta.exists() and json.loads(meta.read_text()).get("size") == p.stat().st_size:
        m = json.loads(meta.read_text())
        embed = np.load(cache / "embed.npy", mmap_mode="r")
        head = np.load(cache / "head.npy", mmap_mode="r") if m["untied"] else embed
        return TargetTables(embed, head, m["embed_scale"], m["hidden_size"], m["num_layers"], embed.shape[0],
                            m["family"])
    t = _gguf_tables(p)
    cache.mkdir(exist_ok=True)
    np.save(cache / "embed.npy", t.embed)
    if t.head is not t.embed:
        np.save(cache / "head.npy", t.head)
    meta.write_text(json.dumps({"size": p.stat().st_size, "untied": t.head is not t.embed,
                                "embed_scale": t.embed_scale, "hidden_size": t.hidden_size,
                                "num_layers": t.num_layers, "family": t.family}))
    return t
