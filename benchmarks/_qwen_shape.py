"""A random-weight model of Qwen2.5-0.5B's shape (or a tiny one) and a byte-level BPE tokenizer of its vocabulary size.

No checkpoint can be fetched where the benchmarks run, and speed and memory do not depend on the weights. Qwen2.5-0.5B:
hidden 896, 24 layers, 14 heads / 2 KV heads, MLP 4864, vocab 151,936, tied embeddings (494M parameters). The
tokenizer is transformers' `Qwen2Tokenizer` (Qwen's split, byte-level BPE), so that a saved copy loads through
`AutoTokenizer` as a downloaded Qwen checkpoint does; its merges are learnt here from MATH-500's problems (~3 s),
the rest of the vocabulary is filler tokens no text encodes to, and `<|endoftext|>` is the last id. Each digit is
one token, as in Qwen's.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import Qwen2Config, Qwen2ForCausalLM
from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

from trainer.data import load_records
from trainer.data.benchmarks import benchmark_path

EOS = "<|endoftext|>"
LEARNT = 8000
"""At most this many tokens learnt (bytes and merges; MATH-500's problems give about 4,500)."""

SIZES = {  # Qwen2.5-0.5B's shape, and a tiny one for CPU checks
    "0.5b": dict(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
    ),
    "tiny": dict(  # Qwen's head layout (14 query heads share 2 key/value heads) at head size 8
        vocab_size=4096,
        hidden_size=112,
        intermediate_size=224,
        num_hidden_layers=2,
        num_attention_heads=14,
        num_key_value_heads=2,
    ),
}


def tokenizer(vocab_size: int) -> Qwen2Tokenizer:
    """Qwen2's tokenizer over `vocab_size` ids: merges learnt from MATH-500's problems, filler tokens, EOS last."""
    text = [row["problem"] for row in load_records(benchmark_path("math500"))]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    learn = trainers.BpeTrainer(vocab_size=min(vocab_size - 1, LEARNT), initial_alphabet=alphabet, show_progress=False)
    bpe.train_from_iterator(text, learn)
    learnt = json.loads(bpe.to_str())["model"]
    vocab = dict(learnt["vocab"])
    vocab |= {f"<|fill_{i}|>": i for i in range(len(vocab), vocab_size - 1)} | {EOS: vocab_size - 1}
    merges = [tuple(pair) for pair in learnt["merges"]]
    return Qwen2Tokenizer(vocab=vocab, merges=merges, unk_token=None, eos_token=EOS, pad_token=EOS)


def build(size: str, device: torch.device | str, dtype: torch.dtype):
    """(model, tokenizer) of `size`, weights drawn under seed 0, the model on `device` in `dtype`."""
    shape = SIZES[size]
    torch.manual_seed(0)
    config = Qwen2Config(
        **shape,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=shape["vocab_size"] - 1,
        pad_token_id=shape["vocab_size"] - 1,
    )
    return Qwen2ForCausalLM(config).to(device=device, dtype=dtype), tokenizer(shape["vocab_size"])


def save(size: str, into: Path, dtype: torch.dtype) -> Path:
    """`build(size)` saved as a downloaded checkpoint looks (safetensors, tokenizer files) in `into`."""
    model, tokenizer = build(size, "cpu", dtype)
    model.save_pretrained(into)
    tokenizer.save_pretrained(into)
    return into
