#!/usr/bin/env python3
"""Writes the small torch.save fixtures used by tests/io/torch_pickle_test.cc.

Usage:  python3 tools/ref/make_pt_fixtures.py [out_dir]   (default tests/fixtures/io)

Also refreshes the libFuzzer seed corpora fuzz/seeds/fuzz_torch_pt/ (byte 0 picks the harness
mode: 0 = whole .pt archive, 1 = bare data.pkl) and fuzz/seeds/fuzz_safetensors/.

Needs PyPI torch (development machine only; the tests read the committed files and need nothing).
Good files come from torch.save itself; hostile files are zips built here around hand-written
pickle streams (or torch output with one entry tampered with), so the reader's refusals are tested
against exactly the bytes an attacker could ship. Values are deterministic, but torch.save writes a
random .data/serialization_id, so regenerated files differ byte-wise from the committed ones.
"""
import collections
import io
import os
import struct
import sys
import zipfile

import torch

OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/io"


def save(name, obj):
    torch.save(obj, os.path.join(OUT, name))


def entries(name):
    with zipfile.ZipFile(os.path.join(OUT, name)) as z:
        return [(i.filename, z.read(i.filename)) for i in z.infolist()]


def write_zip(name, items):
    with zipfile.ZipFile(os.path.join(OUT, name), "w", zipfile.ZIP_STORED) as z:
        for n, data in items:
            z.writestr(n, data)


def hostile(name, pkl, extra=()):
    write_zip(name, [("archive/data.pkl", pkl), ("archive/byteorder", b"little"),
                     ("archive/version", b"3\n"), *extra])


def uni(s):  # BINUNICODE
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def main():
    os.makedirs(OUT, exist_ok=True)
    # --- good files (written by torch.save) ---
    save("bare_f32.pt", (torch.arange(8, dtype=torch.float32) * 0.5 - 1.0).reshape(2, 4))
    save("bare_bf16.pt", torch.tensor([1.0, -2.0, 0.5, 3.25, 0.0, -0.125], dtype=torch.bfloat16))
    emb = torch.linspace(-1.0, 1.0, 16, dtype=torch.float32)
    save("mask_dict.pt", {"embedding": emb, "mask_token_id": 151669})
    save("mask_dict_2d.pt", {"embedding": emb.reshape(1, 16).to(torch.bfloat16)})
    # A strided view with a storage offset: torch saves the whole 24-element storage.
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    view = base[1:, ::2].t()  # shape [3, 3], strides (2, 6), offset 6; view[i][j] = 6*(1+j) + 2*i
    assert view.storage_offset() == 6 and view.stride() == (2, 6)
    save("view.pt", view)
    save("f8.pt", torch.tensor([0.5, -1.0, 448.0, 0.0], dtype=torch.float8_e4m3fn))
    save("param.pt", torch.nn.Parameter(torch.ones(3, dtype=torch.float16)))
    lin = torch.nn.Linear(3, 2)
    with torch.no_grad():
        lin.weight.copy_(torch.arange(6, dtype=torch.float32).reshape(2, 3))
        lin.bias.copy_(torch.tensor([10.0, 20.0]))
    save("state_dict.pt", lin.state_dict())  # OrderedDict + BUILD of its _metadata
    shared = torch.tensor([7, 8, 9], dtype=torch.int64)
    nested = collections.OrderedDict()
    nested["a"] = shared
    nested["b"] = {"c": [1, 2.5, "x", True, None, -300000000000], "d": (3, shared[1:])}
    nested["e"] = torch.zeros(0, 4, dtype=torch.int32)
    save("nested.pt", nested)

    # --- hostile / broken files ---
    proto = b"\x80\x02"
    hostile("evil_os_system.pt", proto + b"cos\nsystem\n" + uni("echo pwned") + b"\x85R.")
    hostile("evil_eval.pt", proto + b"cbuiltins\neval\n" + uni("1+1") + b"\x85R.")
    hostile("evil_stack_global.pt",
            proto + uni("subprocess") + uni("check_call") + b"\x93" + uni("id") + b"\x85R.")
    hostile("evil_opcode.pt", proto + b"N\xff.")
    hostile("evil_inst.pt", proto + b"(ios\nsystem\n.")  # INST: not in the whitelist
    hostile("evil_memo.pt", proto + b"j\xff\xff\xff\xff.")  # LONG_BINGET of a huge index
    hostile("evil_underflow.pt", proto + b"R.")
    good = dict(entries("bare_f32.pt"))
    pkl_name = next(n for n in good if n.endswith("/data.pkl"))
    hostile("evil_truncated.pt", good[pkl_name][: len(good[pkl_name]) // 2])
    # Storage holds 8 bytes but the pickle claims 8 floats (32 bytes).
    write_zip("evil_storage_small.pt",
              [(n, d[:8] if n.endswith("/data/0") else d) for n, d in entries("bare_f32.pt")])
    # The view claims offset 20 into a 24-element storage with 9 elements of extent.
    vp = dict(entries("view.pt"))
    vpkl = next(n for n in vp if n.endswith("/data.pkl"))
    tampered = vp[vpkl].replace(b"K\x06", b"K\x14", 1)  # storage_offset 6 -> 20
    assert tampered != vp[vpkl]
    write_zip("evil_view_past_storage.pt",
              [(n, tampered if n == vpkl else d) for n, d in entries("view.pt")])
    write_zip("evil_big_endian.pt",
              [(n, b"big" if n.endswith("/byteorder") else d) for n, d in entries("bare_f32.pt")])
    # A list that contains itself: EMPTY_LIST, BINPUT 0, BINGET 0, APPEND, STOP.
    hostile("evil_cycle.pt", proto + b"]q\x00h\x00a.")
    with open(os.path.join(OUT, "not_a_zip.pt"), "wb") as f:
        f.write(b"\x80\x02}q\x00.this is a legacy pickle, not a zip")
    print("wrote fixtures to", OUT)
    write_fuzz_seeds()


def write_fuzz_seeds():
    import json
    pt_dir, st_dir = "fuzz/seeds/fuzz_torch_pt", "fuzz/seeds/fuzz_safetensors"
    os.makedirs(pt_dir, exist_ok=True)
    os.makedirs(st_dir, exist_ok=True)
    for name in ["bare_f32.pt", "view.pt", "f8.pt", "state_dict.pt", "nested.pt", "mask_dict.pt",
                 "param.pt", "evil_os_system.pt", "evil_cycle.pt"]:
        with open(os.path.join(OUT, name), "rb") as f:
            raw = f.read()
        stem = name[:-3]
        with open(os.path.join(pt_dir, stem + ".zip"), "wb") as f:
            f.write(b"\x00" + raw)
        pkl = next(d for n, d in entries(name) if n.endswith("/data.pkl"))
        with open(os.path.join(pt_dir, stem + ".pkl"), "wb") as f:
            f.write(b"\x01" + pkl)

    def st(name, tensors, metadata=None):
        header, data = {}, b""
        if metadata:
            header["__metadata__"] = metadata
        for tname, dtype, shape, nbytes in tensors:
            header[tname] = {"dtype": dtype, "shape": shape,
                             "data_offsets": [len(data), len(data) + nbytes]}
            data += bytes((i * 37) & 0xFF for i in range(nbytes))
        h = json.dumps(header, separators=(",", ":")).encode()
        h += b" " * (-len(h) % 8)
        with open(os.path.join(st_dir, name), "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + data)

    st("two.safetensors", [("w", "F32", [2, 3], 24), ("b", "BF16", [3], 6)], {"format": "pt"})
    st("kinds.safetensors", [("a", "F8_E4M3", [4], 4), ("s", "F64", [], 8), ("z", "I32", [0, 2], 0),
                             ("u", "U8", [1], 1), ("l", "I64", [1, 1], 8), ("h", "F16", [2], 4)])
    st("names.safetensors", [("model.layers.0.self_attn.q_proj.weight", "BF16", [4, 2], 16),
                             ("model.embed_tokens.weight", "F16", [3, 2], 12)])
    print("wrote fuzz seeds to", pt_dir, "and", st_dir)


if __name__ == "__main__":
    main()
