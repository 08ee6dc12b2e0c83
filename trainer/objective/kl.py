"""KL to a reference policy (k1/k2/k3 estimators) and per-token log-probs and entropy."""

from __future__ import annotations

import torch

from trainer.objective.registry import KL_ESTIMATORS

# Bounds log(π_θ/π_ref) so that k3's exp stays finite for tokens the reference finds absurd.
MAX_LOG_RATIO = 20.0


def _log_r(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return (logp - ref_logp).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)


@KL_ESTIMATORS.register("k1")
def k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k1 = log r, r = π_θ/π_ref: unbiased for KL(π_θ‖π_ref) on samples of π_θ, high variance.

    Schulman 2020, Approximating KL Divergence (joschu.net/blog/kl-approx.html).
    """
    return _log_r(logp, ref_logp)


@KL_ESTIMATORS.register("k2")
def k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k2 = ½ (log r)²: biased, low variance, always ≥ 0. Schulman 2020 (as k1)."""
    return 0.5 * _log_r(logp, ref_logp) ** 2


@KL_ESTIMATORS.register("k3")
def k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 = r⁻¹ − 1 + log r: unbiased and ≥ 0. Schulman 2020; GRPO's KL term (arXiv 2402.03300, eq. 4)."""
    log_r = _log_r(logp, ref_logp)
    return torch.exp(-log_r) - 1.0 + log_r


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log π(o_t) = z[o_t] − logsumexp(z), for logits [B, T, V] and tokens [B, T]."""
    picked = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """H_t = −Σ_v π_v log π_v = logsumexp(z) − Σ_v softmax(z)_v z_v, per token ([B, T, V] → [B, T])."""
    return torch.logsumexp(logits, dim=-1) - (torch.softmax(logits, dim=-1) * logits).sum(-1)
