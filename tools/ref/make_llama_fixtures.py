#!/usr/bin/env python3
"""Tiny random Llama-3 checkpoints + goldens from transformers 5.x `LlamaForCausalLM`.

Writes tests/fixtures/llama/<name>/ (config.json, model.safetensors, tokenizer files, goldens
with the same tensors as tools/ref/make_qwen3_fixtures.py: prompt_ids, embed, layer_out, logits,
greedy_ids, greedy_logits).
  llama3_rope  llama3 RoPE scaling (factor 8, low 1, high 4, original 64), GQA 4/2, untied,
               transformers-4 style config (top-level rope_theta / rope_scaling)
  tied         default RoPE, tied embeddings, rope_parameters (transformers-5 style)
Run from the repo root: /work/venv-gguf/bin/python tools/ref/make_llama_fixtures.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import fixture_common as fc  # noqa: E402
import make_qwen35_fixtures as q35  # noqa: E402  (forward_capture / greedy_cached are generic)

FIXTURES = {
    "llama3_rope": dict(tied=False, seed=9101, legacy=True,
                        rope={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                              "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 64}),
    "tied": dict(tied=True, seed=9201, legacy=False,
                 rope={"rope_type": "default", "rope_theta": 500000.0}),
}


def make(tok, name: str, spec: dict) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM
    ids = fc.token_ids(tok)
    folder = fc.fresh_dir(fc.FIXTURES / "llama" / name)
    prompt_ids = torch.tensor([tok.encode(q35.PROMPT).ids])
    n = prompt_ids.shape[1]
    seed = spec["seed"]
    for _ in range(50):
        cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=48, intermediate_size=64,
                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=12, max_position_embeddings=512, rms_norm_eps=1e-5,
                          rope_parameters=dict(spec["rope"]), tie_word_embeddings=spec["tied"],
                          bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"])
        cfg.architectures = ["LlamaForCausalLM"]
        cfg._attn_implementation = "eager"
        cfg.dtype = "float32"
        torch.manual_seed(seed)
        model = LlamaForCausalLM(cfg).to(torch.float32)
        fc.random_init_(model, seed, std=0.15, norm_jitter=0.1)
        model.eval()
        g_ids, g_logits = q35.greedy_cached(model, prompt_ids, q35.GREEDY_STEPS)
        gaps = fc.top2_gap(g_logits)
        if float(gaps.min()) > q35.MIN_GAP and len(set(g_ids.tolist())) >= 4:
            break
        seed += 1
    else:
        raise RuntimeError(name)
    logits, embed, layer_out = q35.forward_capture(model, prompt_ids)
    model.save_pretrained(str(folder))
    if spec["legacy"]:
        p = folder / "config.json"
        c = json.loads(p.read_text())
        rope = c.pop("rope_parameters")
        c["rope_theta"] = rope.pop("rope_theta")
        c["rope_scaling"] = rope
        c["torch_dtype"] = c.pop("dtype", "float32")
        fc.write_json(p, dict(sorted(c.items())))
    fc.write_tokenizer_files(tok, folder)
    golden = {"prompt_ids": fc.i32(prompt_ids[0]), "logits": fc.f32(logits), "embed": fc.f32(embed),
              "layer_out": fc.f32(layer_out), "greedy_ids": fc.i32(g_ids),
              "greedy_logits": fc.f32(g_logits)}
    fc.save_safetensors(golden, folder / "golden.safetensors")
    fc.write_json(folder / "golden.json", {
        "reference": f"transformers {__import__('transformers').__version__} LlamaForCausalLM, "
                     "eager, float32, CPU", "seed": seed, "prompt_text": q35.PROMPT, "n_prompt": n,
        "greedy_steps": q35.GREEDY_STEPS, "greedy_min_top2_gap": round(float(gaps.min()), 6)})
    print(f"llama/{name}: seed {seed}, n={n}, gap {float(gaps.min()):.3e}, "
          f"{fc.dir_size(folder)/1024:.0f} KiB")


def main() -> None:
    fc.setup_determinism()
    tok = fc.build_tokenizer()
    for name, spec in FIXTURES.items():
        if len(sys.argv) == 1 or name in sys.argv[1:]:
            make(tok, name, spec)


if __name__ == "__main__":
    main()
