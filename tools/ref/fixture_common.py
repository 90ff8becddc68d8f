"""Shared helpers for the fixture generators (tools/ref/make_*_fixtures.py).

Everything here is deterministic: fixed corpus, fixed seeds, CPU only, one thread.
"""
from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
QWEN3_TOKENIZER_CONFIG = Path("/work/shared/data/tokenizers/qwen3/tokenizer_config.json")
# Fallback: the lead's copy inside the repo checkout (shared/ travels with the tree).
if not QWEN3_TOKENIZER_CONFIG.exists():
    QWEN3_TOKENIZER_CONFIG = REPO / "shared" / "data" / "tokenizers" / "qwen3" / "tokenizer_config.json"

# Qwen2/Qwen3 pre-tokenizer split regex (verbatim from Qwen3's tokenizer.json).
QWEN2_SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
    r"\s*[\r\n]+|\s+(?!\S)|\s+"
)

BPE_VOCAB = 506  # 256 byte symbols + 250 merges
# (content, special) in id order after the BPE vocabulary; <think> flags follow Qwen3 (special=false).
ADDED_TOKENS = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<think>", False),
    ("</think>", False),
    ("<|MASK|>", True),
]


def setup_determinism() -> None:
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    torch.use_deterministic_algorithms(True)


# ---------------------------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------------------------

_CORPUS_EN = """\
The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step.
Speculative decoding lets a small draft model propose several tokens that the large target model
verifies in one forward pass. When the draft is right, many tokens are committed at once; when it is
wrong, the target's own token is kept, so the output is exactly what the target alone would produce.
Block diffusion drafters fill a whole block of masked positions in parallel, conditioned on hidden
states taken from a few layers of the target model. The context features are projected, normalized
and injected as keys and values into every draft layer.
Once upon a time there was a little robot who loved to read. Every morning it opened a new book and
counted the words, the sentences and the paragraphs. It liked numbers: 1, 2, 3, 10, 42, 100, 2026.
What is the capital of France? The capital of France is Paris. What is two plus two? It is four.
Please explain, step by step, why the sky is blue during the day and red at sunset.
"""

_CORPUS_CODE = """\
def fibonacci(n: int) -> int:
    if n < 2:
        return n
    return fibonacci(n - 1) + fibonacci(n - 2)

for i in range(10):
    print(i, fibonacci(i))

int main(int argc, char** argv) {
    std::vector<float> x(16, 0.0f);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.5f;
    return 0;
}
{"role": "user", "content": "Hello, how are you?"}
{"role": "assistant", "content": "I'm fine, thanks! And you?"}
"""


def corpus() -> list[str]:
    lines = (_CORPUS_EN + _CORPUS_CODE).splitlines(keepends=True)
    # Deterministic repetition with varied neighbourhoods so merge counts are unambiguous.
    out = []
    for k in range(6):
        rot = lines[k:] + lines[:k]
        out.append("".join(rot))
    return out


def build_tokenizer():
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
    from tokenizers import pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB,
        min_frequency=1,
        show_progress=False,
        special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    assert tok.get_vocab_size(with_added_tokens=False) == BPE_VOCAB, tok.get_vocab_size()
    for content, special in ADDED_TOKENS:
        t = AddedToken(content, single_word=False, lstrip=False, rstrip=False, normalized=False,
                       special=special)
        if special:
            tok.add_special_tokens([t])
        else:
            tok.add_tokens([t])
    return tok


def token_ids(tok) -> dict[str, int]:
    return {c: tok.token_to_id(c) for c, _ in ADDED_TOKENS}


def tokenizer_config_json(tok) -> dict:
    src = json.loads(QWEN3_TOKENIZER_CONFIG.read_text())
    ids = token_ids(tok)
    added = {}
    for content, special in ADDED_TOKENS:
        added[str(ids[content])] = {
            "content": content, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": special,
        }
    cfg = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|MASK|>"],
        "bos_token": None,
        "chat_template": src["chat_template"],
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 512,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    return cfg


def generation_config_json(tok) -> dict:
    ids = token_ids(tok)
    return {
        "bos_token_id": ids["<|endoftext|>"],
        "do_sample": True,
        "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
        "pad_token_id": ids["<|endoftext|>"],
        "temperature": 0.6,
        "top_k": 20,
        "top_p": 0.95,
    }


def write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=False) + "\n")


def write_tokenizer_files(tok, folder: Path, with_generation_config: bool = True) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"), pretty=True)
    write_json(folder / "tokenizer_config.json", tokenizer_config_json(tok))
    if with_generation_config:
        write_json(folder / "generation_config.json", generation_config_json(tok))


def fresh_dir(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


# ---------------------------------------------------------------------------------------------
# Weights
# ---------------------------------------------------------------------------------------------

@torch.no_grad()
def random_init_(module: torch.nn.Module, seed: int, std: float = 0.15, norm_jitter: float = 0.1,
                 std_overrides: dict[str, float] | None = None) -> None:
    """Overwrite every parameter deterministically: norms ~ 1 + jitter*N(0,1), others std*N(0,1).

    Parameters are visited in sorted-name order with one generator, so the result depends only on
    the seed and the set of names/shapes (tied weights are visited once).
    """
    g = torch.Generator().manual_seed(seed)
    params = dict(module.named_parameters())
    for name in sorted(params):
        p = params[name]
        r = torch.randn(p.shape, generator=g, dtype=torch.float64)
        if "norm" in name and p.dim() == 1:
            val = 1.0 + norm_jitter * r
        else:
            s = std
            for key, v in (std_overrides or {}).items():
                if key in name:
                    s = v
            val = s * r
        p.copy_(val.to(p.dtype))


def save_safetensors(tensors: dict[str, torch.Tensor], path: Path, metadata: dict | None = None) -> None:
    from safetensors.torch import save_file
    clean = {k: v.detach().contiguous().clone() for k, v in tensors.items()}
    save_file(clean, str(path), metadata=metadata or {"format": "pt"})


def i32(x) -> torch.Tensor:
    return torch.as_tensor(x).to(torch.int32).contiguous()


def f32(x) -> torch.Tensor:
    return torch.as_tensor(x).detach().to(torch.float32).contiguous()


def top2_gap(logits: torch.Tensor) -> torch.Tensor:
    """Per-row gap between the largest and second largest logit."""
    v = torch.topk(logits.double(), 2, dim=-1).values
    return v[..., 0] - v[..., 1]


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
