"""Load a policy and its tokenizer the way any transformers model is loaded (hub id or local dir)."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase


def load_policy(name_or_path: str, device: torch.device) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Model (safetensors only: weights are untrusted input, never unpickled) and tokenizer."""
    tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    model = AutoModelForCausalLM.from_pretrained(name_or_path, use_safetensors=True).to(device)
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
