"""The clipped surrogate (the clip-higher switch) with an optional dual clip."""

from __future__ import annotations

from dataclasses import dataclass

import torch

# exp(±20) is far outside any clip range; bounding the log-ratio keeps exp finite.
MAX_LOG_RATIO = 20.0


@dataclass
class Surrogate:
    """Per-token loss and where clipping acted (all [B, T])."""

    loss: torch.Tensor
    ratio: torch.Tensor
    clipped_low: torch.Tensor
    """r < 1 − ε_low with A < 0: the ratio may not fall further."""
    clipped_high: torch.Tensor
    """r > 1 + ε_high with A > 0: the ratio may not rise further."""
    dual_clipped: torch.Tensor
    """A < 0 and the loss was capped at −c·A."""

    @property
    def clipped(self) -> torch.Tensor:
        """Clipped on either side (clipped_low | clipped_high): the token's ratio gets no gradient."""
        return self.clipped_low | self.clipped_high


def clipped_surrogate(
    log_ratio: torch.Tensor, advantages: torch.Tensor, clip_low: float, clip_high: float, dual_clip: float | None = None
) -> Surrogate:
    """ℓ_it = −min(r_it·A_i, clip(r_it, 1 − ε_low, 1 + ε_high)·A_i); with dual clip c,
    ℓ_it = min(ℓ_it, −c·A_i) where A_i < 0.

    PPO clipping: Schulman et al. 2017 (arXiv 1707.06347). Decoupled ε_low < ε_high
    ("clip-higher"): Yu et al. 2025, DAPO (arXiv 2503.14476), eq. 10. Dual clip: Ye et al.
    2020, Mastering Complex Control in MOBA Games (arXiv 1912.09729), eq. 5.
    `advantages` is [B] (one per response) or [B, T].
    """
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    ratio = torch.exp(log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO))
    unclipped = -ratio * adv
    clipped = -ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * adv
    loss = torch.maximum(unclipped, clipped)
    if dual_clip is None:
        dual = torch.zeros_like(loss, dtype=torch.bool)
    else:
        cap = -dual_clip * adv
        dual = (adv < 0) & (loss > cap)
        loss = torch.where(dual, cap.expand_as(loss), loss)
    return Surrogate(
        loss=loss,
        ratio=ratio,
        clipped_low=(ratio < 1.0 - clip_low) & (adv < 0),
        clipped_high=(ratio > 1.0 + clip_high) & (adv > 0),
        dual_clipped=dual,
    )
