"""Group outcomes and DAPO's dynamic-sampling filter."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer import metric_names as M


@dataclass(frozen=True)
class GroupFilter:
    """Which groups to keep, and what was dropped."""

    keep: torch.Tensor
    """[groups] bool: the group's values are not all equal."""
    dropped: int
    """Groups dropped."""
    dropped_all_max: int
    """Dropped groups whose every value is the batch's best possible (e.g. all correct)."""


def dynamic_sampling_filter(values: torch.Tensor, best: float = 1.0) -> GroupFilter:
    """keep_g = 1[∃ i, j: v_gi ≠ v_gj]: keep a group iff its values (reward or correctness,
    [groups, G]) are not all equal.

    DAPO: Yu et al. 2025 (arXiv 2503.14476), §3.2 and eq. 11: a group whose rewards are all
    equal has zero advantage and gives no gradient, so it only shrinks the effective batch.
    The trainer samples further prompts until the batch is full, failing after `train.max_gen_rounds` rounds.
    """
    flat = (values == values[:, :1]).all(dim=1)
    all_best = flat & (values[:, 0] == best)
    return GroupFilter(keep=~flat, dropped=int(flat.sum()), dropped_all_max=int(all_best.sum()))


def group_outcome_metrics(correct: torch.Tensor) -> dict[str, float]:
    """Shares of groups ([groups, G] bool): all correct (∀i c_i), all wrong (∀i ¬c_i), mixed = 1 − both."""
    c = correct.bool()
    n = max(c.shape[0], 1)
    all_c, none_c = c.all(dim=1), (~c).all(dim=1)
    return {
        M.GROUPS_ALL_CORRECT_FRAC: all_c.sum().item() / n,
        M.GROUPS_ALL_WRONG_FRAC: none_c.sum().item() / n,
        M.GROUPS_MIXED_FRAC: (~all_c & ~none_c).sum().item() / n,
    }
