"""Overlong handling from DAPO: filtering truncated responses and soft punishment."""

from __future__ import annotations

import torch


def overlong_filter(mask: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
    """m_it ← 0 for every token of a truncated response (no end-of-sequence within L_max).

    DAPO: Yu et al. 2025 (arXiv 2503.14476), §3.4 "overlong filtering": a cut-off answer
    may be sound reasoning, so its (wrong) reward should not train the policy.
    """
    return mask * (~truncated.bool()).unsqueeze(-1).to(mask.dtype)


def soft_overlong_penalty(lengths: torch.Tensor, max_len: int, cache_len: int) -> torch.Tensor:
    """R_length(y) added to the reward, with L_max = max_len and L_cache = cache_len:

        0                                   if |y| ≤ L_max − L_cache
        ((L_max − L_cache) − |y|) / L_cache  if L_max − L_cache < |y| ≤ L_max
        −1                                  if |y| > L_max

    DAPO: Yu et al. 2025 (arXiv 2503.14476), eq. 13 "soft overlong punishment".
    """
    if not 0 < cache_len <= max_len:
        raise ValueError(f"cache_len must be in (0, max_len={max_len}], got {cache_len}")
    y = lengths.to(torch.float64)
    start = max_len - cache_len
    ramp = (start - y) / cache_len
    penalty = torch.where(y <= start, torch.zeros_like(y), ramp)
    return torch.where(y > max_len, torch.full_like(y, -1.0), penalty)
