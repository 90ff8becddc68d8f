#!/usr/bin/env python3
"""Merge several `dflash dump-taps` folders into one (stdlib only).

  merge_dumps.py --out DUMP PART1 PART2 ...

Data generation runs in parts (a few hundred prompts each) so that a long job can stop at a fixed
time with everything written so far usable. The merged folder hard-links the parts' shards (no copy;
a copy where linking fails) under new names and writes one meta.json in the dflash-taps/1 format, so
train.py, check_export.py and model_card.py read it like any single dump. All parts must tap the same
layers of the same width. meta["generation"] is the first part's; meta["parts"] lists each part's
folder, sequence count and generation settings (seeds differ per part).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

KEYS = ("format", "target_layer_ids", "aux_indices", "hidden_size")


def link(src: Path, dst: Path):
    if dst.exists():
        dst.unlink()
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def merge(out: str, parts: list[str]) -> dict:
    o = Path(out)
    o.mkdir(parents=True, exist_ok=True)
    merged, shards, info = None, [], []
    for part in parts:
        d = Path(part)
        m = json.loads((d / "meta.json").read_text())
        if m.get("format") != "dflash-taps/1":
            raise SystemExit(f"{part}: not a dflash-taps/1 dump")
        if merged is None:
            merged = {k: v for k, v in m.items() if k != "shards"}
            merged["num_sequences"] = merged["num_tokens"] = 0
        elif any(m[k] != merged[k] for k in KEYS):
            raise SystemExit(f"{part}: taps differ from the first part's ({', '.join(KEYS)})")
        merged["num_sequences"] += m["num_sequences"]
        merged["num_tokens"] += m["num_tokens"]
        info.append({"folder": str(d), "num_sequences": m["num_sequences"], "generation": m.get("generation")})
        for sh in m["shards"]:
            base = f"shard-{len(shards):05d}"
            link(d / sh["tokens"], o / f"{base}.tokens.npy")
            link(d / sh["taps"], o / f"{base}.taps.npy")
            shards.append(dict(sh, tokens=f"{base}.tokens.npy", taps=f"{base}.taps.npy"))
    if merged is None:
        raise SystemExit("no parts given")
    merged["parts"] = info
    merged["shards"] = shards
    (o / "meta.json").write_text(json.dumps(merged, indent=1) + "\n")
    return merged


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("parts", nargs="+")
    a = ap.parse_args()
    m = merge(a.out, a.parts)
    print(f"[merge] {len(a.parts)} part(s) -> {a.out}: {m['num_sequences']} sequences, {m['num_tokens']} tokens, "
          f"{len(m['shards'])} shard(s)")


if __name__ == "__main__":
    main()
