"""Rollout rejection: the tokens, or whole responses, that the rollout engine sampled with probabilities too far from
the trainer's leave the loss.

verl 0.9.1's rejection sampling (`algorithm.rollout_correction.rollout_rs` and `rollout_rs_threshold`;
`compute_rollout_rejection_mask` in verl/trainer/ppo/rollout_corr_helper.py), from Liu, Li et al. 2025, "When Speed
Kills Stability: Demystifying RL Collapse from the Training-Inference Mismatch" (a blog, richardli.xyz/rl-collapse;
no arXiv paper): the sampler (e.g. vLLM in bf16) and the trainer give the same weights different probabilities, and
the tokens where they differ most, often rare ones, carry the gradients that blow a run up. Each criterion reads
log r_t = log π_old(o_t) − log π_rollout(o_t), clamped to ±20 (verl's `SAFETY_BOUND`), through one of Schulman's
three estimators of KL(π_rollout ‖ π_old) on a token sampled from π_rollout (joschu.net/blog/kl-approx.html):

    k1_t = −log r_t,    k2_t = ½ (log r_t)²,    k3_t = r_t − 1 − log r_t,

taken per token (`token_*`), or per response as the sum (`seq_sum_*`), the mean (`seq_mean_*`) or the largest
(`seq_max_*`) over its loss tokens. A k1 statistic is kept within [log low, log high], so exp(k1) = π_rollout/π_old
(its product over the response, its geometric mean) within [low, high] (`seq_mean_k1` is verl's Geo-RS); a k2 or k3
statistic, which is never negative, at or below `high`. A response without loss tokens has statistic 0, as in verl.
Each criterion returns `keep`, a bool tensor: [B, T] per token, [B, 1] per response. What is not kept leaves the loss
and its normalisers (`rollout_keep`; docs/objective.md).
"""

from __future__ import annotations

import math

import torch

from trainer.objective.registry import RATIO_BAND_REJECTIONS, ROLLOUT_REJECTIONS
from trainer.objective.settings import ObjectiveSettings

SAFETY_BOUND = 20.0
"""|log r| is clamped here before any statistic (verl's `SAFETY_BOUND`): e^20 keeps k3 finite."""


def log_gap(old_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log r = log π_old − log π_rollout on loss tokens, clamped to ±`SAFETY_BOUND`; 0 elsewhere and where the engine
    gave no log-probability."""
    gap = torch.nan_to_num(old_logp - rollout_logp, nan=0.0)
    return torch.where(mask.bool(), gap, torch.zeros_like(gap)).clamp(-SAFETY_BOUND, SAFETY_BOUND)


def _k1(log_r: torch.Tensor) -> torch.Tensor:
    return -log_r


def _k2(log_r: torch.Tensor) -> torch.Tensor:
    return 0.5 * log_r**2


def _k3(log_r: torch.Tensor) -> torch.Tensor:
    return torch.exp(log_r) - 1.0 - log_r


def _seq_sum(k: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask.bool(), k, torch.zeros_like(k)).sum(-1, keepdim=True)


def _seq_mean(k: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return _seq_sum(k, mask) / mask.bool().sum(-1, keepdim=True).clamp(min=1).to(k.dtype)


def _seq_max(k: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.bool()
    top = torch.where(m, k, torch.full_like(k, -math.inf)).amax(-1, keepdim=True)
    return torch.where(m.any(-1, keepdim=True), top, torch.zeros_like(top))


def _band(stat: torch.Tensor, low: float | None, high: float) -> torch.Tensor:
    """log low ≤ stat ≤ log high (a k1 statistic)."""
    assert low is not None, "a k1 criterion has a lower bound (rollout_rejection_keep fills it)"
    return (stat >= math.log(low)) & (stat <= math.log(high))


def _below(stat: torch.Tensor, high: float) -> torch.Tensor:
    """stat ≤ high (a k2 or k3 statistic)."""
    return stat <= high


@ROLLOUT_REJECTIONS.register("token_k1")
def token_k1(log_r: torch.Tensor, mask: torch.Tensor, low: float | None, high: float) -> torch.Tensor:
    """keep_t = 1[log low ≤ −log r_t ≤ log high]: each token's π_rollout/π_old within [low, high]
    (Liu, Li et al. 2025, as verl's `token_k1`)."""
    return _band(_k1(log_r), low, high)


@ROLLOUT_REJECTIONS.register("token_k2")
def token_k2(log_r: torch.Tensor, mask: torch.Tensor, low: float | None, high: float) -> torch.Tensor:
    """keep_t = 1[½(log r_t)² ≤ high] (Liu, Li et al. 2025, as verl's `token_k2`)."""
    return _below(_k2(log_r), high)


@ROLLOUT_REJECTIONS.register("token_k3")
def token_k3(log_r: torch.Tensor, mask: torch.Tensor, low: float | None, high: float) -> torch.Tensor:
    """keep_t = 1[r_t − 1 − log r_t ≤ high] (Liu, Li et al. 2025, as verl's `token_k3`)."""
    return _below(_k3(log_r), high)


@ROLLOUT_REJECTIONS.register("seq_sum_k1")
def seq_sum_k1(log_r: torch.Tensor, mask: torch.Tensor, low: float | None, high: float) -> torch.Tensor:
    """keep_i = 1[log low ≤ −Σ_t log r_it ≤ log high]: the response's π_rollout/π_old, Π_t 1/r_it, within
    [low, high] (Liu, Li et al. 2025, as verl's `seq_sum_k1`; its `decoupled_seq_is_rs` preset takes [0.5, 2])."""
    return _band(_seq_sum(_k1(log_r), mask), low, high)


@ROLLOUT_REJECTIONS.register("seq_sum_k2")
def seq_sum_k2(log_r: torch.Tensor, mask: torch.Tensor, low: float | None, high: float) -> torch.Tensor:
    """keep_i = 1[Σ_t ½(log r_it)² ≤ high] (Liu, Li et al. 2025, as verl's `seq_sum_k2`)."""
    return _below(_seq_sum(_k2(log_r), mask), high)


@ROLLOUT_REJECTIONS.register("seq_sum_k3")
def seq_sum_k3(log_r: torch.Tensor, mask: torch.Tensor, low: float | None, high: float) -> torch.Tensor:
    """keep_i = 1[Σ_t (r_it − 1 − log r_it) ≤ high] (Liu, Li et al. 2025, as verl's `seq_sum_k3`)."""
    return _below(_seq_sum(_k3(log_r), mask), high)


@ROLLOUT_REJECTIONS.register("seq_mean_k1")
def seq_mean_k1(log_r: torch.Tensor, mask: torch.Tensor, low: float | None, high: float) -> torch.Tensor:
    """keep_i = 1[log low ≤ −(1/T_i) Σ_t log r_it ≤ log high]: the inverse of the response's geometric-mean ratio,
    (Π_t r_it)^(−1/T_i), within [low, high] (Liu, Li et al. 2025, as verl's `seq_mean_k1`, the Geo-RS of its
    `decoupled_geo_rs` and `bypass_*_geo_rs` presets, [0.999, 1.001])."""
    return _band(_seq_mean(_k1(log_r), mask), low, high)


@ROLLOUT_REJECTIONS.register("seq_mean_k2")
def seq_mean_k2(log_r: torch.Tensor, mask: torch.Tensor, low: float | None, high: float) -> torch.Tensor:
    """keep_i = 1[(1/T_i) Σ_t ½(log r_it)² ≤ high] (Liu, Li et al. 2025, as verl's `seq_mean_k2`)."""
    return _below(_seq_mean(_k2(log_r), mask), high)


@ROLLOUT_REJECTIONS.register("seq_mean_k3")
def seq_mean_k3(log_r: torch.Tensor, mask: torch.Tensor, low: float | None, high: float) -> torch.Tensor:
    """keep_i = 1[(1/T_i) Σ_t (r_it − 1 − log r_it) ≤ high]: the mean per-token KL(π_rollout ‖ π_old) estimate
    (Liu, Li et al. 2025, as verl's `seq_mean_k3`, its K3-RS presets at 0.01)."""
    return _below(_seq_mean(_k3(log_r), mask), high)


@ROLLOUT_REJECTIONS.register("seq_max_k2")
def seq_max_k2(log_r: torch.Tensor, mask: torch.Tensor, low: float | None, high: float) -> torch.Tensor:
    """keep_i = 1[max_t ½(log r_it)² ≤ high]: the response goes when any of its tokens would (Liu, Li et al. 2025,
    as verl's `seq_max_k2`)."""
    return _below(_seq_max(_k2(log_r), mask), high)


@ROLLOUT_REJECTIONS.register("seq_max_k3")
def seq_max_k3(log_r: torch.Tensor, mask: torch.Tensor, low: float | None, high: float) -> torch.Tensor:
    """keep_i = 1[max_t (r_it − 1 − log r_it) ≤ high] (Liu, Li et al. 2025, as verl's `seq_max_k3`)."""
    return _below(_seq_max(_k3(log_r), mask), high)


def rollout_keep(
    old_logp: torch.Tensor,
    rollout_logp: torch.Tensor | None,
    mask: torch.Tensor,
    criterion: str,
    low: float | None,
    high: float,
) -> torch.Tensor:
    """keep = criterion(clamp(log π_old − log π_rollout, ±20)), [B, T] bool (Liu, Li et al. 2025, as verl's
    `compute_rollout_rejection_mask`): the tokens `criterion` keeps (a response-level criterion's verdict on each of
    its tokens), given π_old's and the rollout engine's log-probabilities of the batch's loss tokens `mask`. A k1
    criterion without `low` takes 1/`high`, as verl does for a single threshold. An error when the engine gave no
    log-probabilities."""
    if rollout_logp is None:
        raise ValueError("rollout_rejection needs the rollout engine's log-probabilities (rollout_logp)")
    if criterion in RATIO_BAND_REJECTIONS and low is None:
        low = 1.0 / high
    log_r = log_gap(old_logp, rollout_logp.to(old_logp.dtype), mask)
    return ROLLOUT_REJECTIONS[criterion](log_r, mask, low, high).expand(mask.shape)


def kept_tokens(
    old_logp: torch.Tensor, rollout_logp: torch.Tensor | None, mask: torch.Tensor, s: ObjectiveSettings
) -> torch.Tensor | None:
    """keep = `rollout_keep`(π_old, π_rollout, mask) under the settings' `rollout_rejection`, `rollout_rejection_min`
    and `rollout_rejection_max` (Liu, Li et al. 2025, as verl's `compute_rollout_rejection_mask`); None when the
    rejection is off."""
    if s.rollout_rejection is None:
        return None
    assert s.rollout_rejection_max is not None
    return rollout_keep(
        old_logp, rollout_logp, mask, s.rollout_rejection, s.rollout_rejection_min, s.rollout_rejection_max
    )
