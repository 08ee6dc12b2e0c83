"""Load a policy and its tokenizer the way any transformers model is loaded (hub id or local dir)."""

from __future__ import annotations

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(choice: str, device: torch.device) -> torch.dtype:
    """auto → bfloat16 on a CUDA device that supports it, else float32 (CPU bf16 matmuls are slow)."""
    if choice == "auto":
        cuda_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
        return torch.bfloat16 if cuda_bf16 else torch.float32
    return DTYPES[choice]


def load_policy(
    name_or_path: str, device: torch.device, dtype: str = "auto", gradient_checkpointing: bool = False
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Model (safetensors only: weights are untrusted input, never unpickled) and tokenizer, by hub id or
    local directory."""
    tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    model = AutoModelForCausalLM.from_pretrained(
        name_or_path, use_safetensors=True, dtype=resolve_dtype(dtype, device)
    ).to(device)
    if gradient_checkpointing:
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()  # transformers 5 renamed gradient_checkpointing_enable (the old name warns there)
        model.config.use_cache = False  # recomputation and a KV cache do not mix in the training forward
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def pick_device(choice: str) -> torch.device:
    """auto → cuda when available, else cpu."""
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if choice == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("train.device is 'cuda' but no CUDA device is available")
    return torch.device(choice)
