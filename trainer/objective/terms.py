"""What the per-token terms of the loss are computed from: one micro-batch's tensors, as one record."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PolicyTerms:
    """One micro-batch's inputs to the surrogate and the token weights (all [B, T] unless said)."""

    logp: torch.Tensor
    """log π_θ of each response token, with its graph."""
    old_logp: torch.Tensor
    """log π_old: the policy the batch is optimised from (detached)."""
    log_ratio: torch.Tensor
    """log r at the configured ratio level (trainer.objective.ratios), 0 on padding."""
    advantages: torch.Tensor
    """[B] (one per response) or [B, T]."""
    mask: torch.Tensor
    """1 for the tokens the loss counts."""
    rollout_logp: torch.Tensor | None = None
    """log-probabilities of the rollout engine that sampled the tokens, when known."""
    entropy: torch.Tensor | None = None
    """Per-token entropy (with its graph when the loss has an entropy bonus)."""
    entropy_floor: float | None = None
    """The optimisation batch's entropy at its 1 − ρ quantile (the top-entropy mask)."""
    rollout_weight: torch.Tensor | None = None
    """The rollout correction's weight, [B, T] or [B, 1], when on (set by trainer.objective.masks)."""
    cov_selected: torch.Tensor | None = None
    """Clip-Cov's or KL-Cov's tokens, [B, T] bool, picked over the whole optimisation batch
    (trainer.objective.masks.covariance_selection), when either is on."""

    @property
    def adv(self) -> torch.Tensor:
        """Advantages shaped to broadcast against [B, T]."""
        return self.advantages.unsqueeze(-1) if self.advantages.dim() == 1 else self.advantages
