"""The reference policy refreshed from the policy during training: π_ref ← α·π_θ + (1 − α)·π_ref every N RL steps.

Gorbatovski et al. 2024, Learn Your Reference Model for Real Good Alignment (TR-DPO, arXiv 2404.09656): the soft
update mixes the two policies' parameters with weight α, the hard update (α = 1) copies the policy into the
reference; either every τ steps. TRL 1.16 has it for its GRPOTrainer as `sync_ref_model`, `ref_model_mixup_alpha`
and `ref_model_sync_steps` (`SyncRefModelCallback`, trl/trainer/callbacks.py, which mixes `parameters()` only).

The iterative reference update of RPG (Zhang et al. 2025, On the Design of KL-Regularized Policy Gradient Algorithms
for LLM Reasoning, arXiv 2505.17508, §"Iterative reference updates") is the hard update: its reference is set to the
policy, π_ref ← π_θ, every K optimiser steps, which is α = 1 here (with N = K / (mini_batches × epochs) RL steps).
Its other trigger, a moving average of the token KL above a target κ, is not built.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from trainer import metric_names as M
from trainer.config import TrainConfig


def mixup(
    reference: Mapping[str, torch.Tensor], policy: Mapping[str, torch.Tensor], alpha: float
) -> dict[str, torch.Tensor]:
    """α·θ + (1 − α)·θ_ref for each named tensor (TR-DPO's soft update; α = 1 returns the policy's values): the new
    reference's tensors, the inputs untouched. Computed as (θ_ref·(1 − α)) + α·θ in the tensors' own dtype, the
    operations TRL's `SyncRefModelCallback` does in place, so that the two agree bit for bit."""
    if reference.keys() != policy.keys():
        missing = sorted(set(reference) ^ set(policy))[:3]
        raise ValueError(f"the reference and the policy have different parameters (first differences: {missing})")
    return {name: torch.add(ref * (1.0 - alpha), policy[name], alpha=alpha) for name, ref in reference.items()}


@dataclass
class ReferenceRefresh:
    """The refresh across RL steps: after step s's update, when s is a multiple of `every`, the reference's parameters
    become `mixup(reference, policy, alpha)`; `every` None = never (the reference stays the initial policy)."""

    every: int | None
    alpha: float | None
    last: int = 0
    """The step of the last refresh (0: none yet)."""

    @classmethod
    def of(cls, t: TrainConfig) -> ReferenceRefresh:
        return cls(t.reference_sync_steps, t.reference_mixup_alpha)

    def __call__(self, step: int, reference: torch.nn.Module | None, policy: torch.nn.Module) -> dict[str, float]:
        """Refresh `reference` in place if `step` is due; the metrics: the step of the last refresh, and at a refresh
        the L2 norm of the reference's move over all its parameters. Nothing (no metric) when off."""
        if self.every is None or reference is None:
            return {}
        if step % self.every:
            return {M.REF_REFRESH_STEP: float(self.last)}
        assert self.alpha is not None  # TrainConfig sets the two together
        policy_params = dict(policy.named_parameters())
        moved = 0.0
        with torch.no_grad():
            for name, p in reference.named_parameters():
                new = mixup({name: p}, {name: policy_params[name]}, self.alpha)[name]
                moved += float((new.double() - p.double()).square().sum())
                p.copy_(new)
        self.last = step
        return {M.REF_REFRESH_STEP: float(step), M.REF_REFRESH_DISTANCE: math.sqrt(moved)}
