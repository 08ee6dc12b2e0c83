"""The rollout interface every generation backend implements (transformers now, vLLM later)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass(frozen=True)
class SamplingParams:
    """How to sample; mapped one to one onto each backend's own parameters."""

    max_new_tokens: int
    """Generation budget L_max: a response with no end-of-sequence within it is truncated."""
    temperature: float = 1.0
    """Softmax temperature (> 0); 0 means greedy decoding (argmax, top_p ignored)."""
    top_p: float = 1.0
    """Nucleus sampling mass in (0, 1]; 1 disables it."""

    def check(self) -> None:
        """Raise ValueError on settings no backend can honour (every backend calls this first)."""
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1, got {self.temperature}, {self.top_p}")


@dataclass
class RolloutBatch:
    """N sampled responses, one per prompt given, in the order given.

    Token tensors are right-padded with `pad_id`; `response_mask` marks real
    response tokens (the end-of-sequence token included when it was emitted).
    """

    prompt_ids: torch.Tensor
    """[N, P] prompt tokens, left-padded with pad_id."""
    prompt_mask: torch.Tensor
    """[N, P] 1 for real prompt tokens."""
    response_ids: torch.Tensor
    """[N, L] sampled tokens, right-padded with pad_id (L <= max_new_tokens)."""
    response_mask: torch.Tensor
    """[N, L] 1 for real response tokens."""
    logprobs: torch.Tensor
    """[N, L] log-probability of each sampled token under the distribution it was drawn from: the
    softmax of logits / temperature, renormalised over the top-p nucleus when top_p < 1 (greedy:
    the model's own temperature-1 log-probability). 0 on padding."""
    lengths: torch.Tensor
    """[N] number of response tokens T_i."""
    truncated: torch.Tensor
    """[N] bool: no end-of-sequence within max_new_tokens."""
    texts: list[str]
    """Decoded responses, special tokens removed."""


class RolloutBackend(Protocol):
    """Samples responses for prompts (one response per prompt given; repeat a prompt for G samples)."""

    def generate(self, prompts: Sequence[str], params: SamplingParams, seed: int) -> RolloutBatch:
        """Sample one response per prompt; the same seed and weights give the same batch."""
        ...

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the backend sample from `model`'s current weights (no-op when it shares them)."""
        ...
