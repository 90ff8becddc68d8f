#!/usr/bin/env python3
"""Prompts for drafter training (stdlib only; no network).

Training prompts: prose paragraphs of Python's own documentation, the reStructuredText sources that
Debian's `python3.11-doc` package installs under /usr/share/doc/python3.11/html/_sources
(`apt-get install python3.11-doc`). Held-out prompts come from a DIFFERENT source: the long
descriptions of the installed Debian packages in /var/lib/dpkg/status (present on every Debian
machine). Gemma-3-270M is a base model, so a prompt is a text prefix: the first 8..40 words of a
paragraph (the target writes the continuation).

  make_prompts.py --train OUT.jsonl --n-train 640 --heldout OUT2.jsonl --n-heldout 64 [--seed 0]
"""
import argparse
import json
import pathlib
import random
import re

DOC_SOURCES = pathlib.Path("/usr/share/doc/python3.11/html/_sources")
DPKG_STATUS = pathlib.Path("/var/lib/dpkg/status")


def clean_rst(text: str) -> str:
    text = re.sub(r":[a-z:]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`", r"\1", text)  # :func:`x` -> x
    text = re.sub(r"``([^`]*)``", r"\1", text)
    text = re.sub(r"`([^`<]*?)(?:\s*<[^>]*>)?`_*", r"\1", text)
    text = re.sub(r"\*\*?([^*]+)\*\*?", r"\1", text)
    text = text.replace("|", "")
    return re.sub(r"\s+", " ", text).strip()


def doc_paragraphs():
    """Prose paragraphs (≥ 20 words, no directives / code / tables) of the Python docs."""
    files = sorted(DOC_SOURCES.rglob("*.rst.txt"))
    if not files:
        raise SystemExit(f"no docs under {DOC_SOURCES}: apt-get install python3.11-doc")
    for f in files:
        blocks = re.split(r"\n\s*\n", f.read_text(encoding="utf-8", errors="replace"))
        for b in blocks:
            lines = b.splitlines()
            if not lines or any(l.lstrip().startswith(("..", ">>>", "+-", "===", "---", "*", "-", "#", ":"))
                                for l in lines):
                continue
            if any(l.startswith((" ", "\t")) for l in lines):  # indented: code or directive body
                continue
            if b.rstrip().endswith("::"):
                continue
            p = clean_rst(b)
            if len(p.split()) >= 20 and re.match(r"[A-Z]", p):
                yield p


def dpkg_descriptions():
    """Long descriptions (≥ 20 words) of the packages in the dpkg status file."""
    text = DPKG_STATUS.read_text(encoding="utf-8", errors="replace")
    for stanza in text.split("\n\n"):
        m = re.search(r"^Description: [^\n]*\n((?: [^\n]*\n?)+)", stanza, re.M)
        if not m:
            continue
        body = " ".join(l.strip() for l in m.group(1).splitlines() if l.strip() != ".")
        body = re.sub(r"\s+", " ", body).strip()
        if len(body.split()) >= 20 and re.match(r"[A-Z]", body):
            yield body


def prefixes(paragraphs, n, rng, lo=8, hi=40):
    paragraphs = list(dict.fromkeys(paragraphs))  # dedupe, keep order
    rng.shuffle(paragraphs)
    out = []
    for p in paragraphs[:n]:
        words = p.split()
        k = rng.randint(lo, min(hi, len(words) - 4))
        out.append(" ".join(words[:k]))
    if len(out) < n:
        raise SystemExit(f"only {len(out)} paragraphs available, {n} asked")
    return out


def write(path, prompts, source):
    with open(path, "w") as f:
        for i, p in enumerate(prompts):
            f.write(json.dumps({"id": f"{source}-{i}", "prompt": p}) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train")
    ap.add_argument("--n-train", type=int, default=640)
    ap.add_argument("--heldout")
    ap.add_argument("--n-heldout", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    if a.train:
        write(a.train, prefixes(doc_paragraphs(), a.n_train, rng), "pydoc")
    if a.heldout:
        write(a.heldout, prefixes(dpkg_descriptions(), a.n_heldout, rng), "dpkg")


if __name__ == "__main__":
    main()
