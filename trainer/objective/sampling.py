"""Group outcomes, DAPO's dynamic-sampling filter, MC-GRPO's pivot, PF-PPO's resampling: which samples are trained."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer import metric_names as M
from trainer.objective.registry import PF_PPO_WEIGHTS
from trainer.objective.settings import ObjectiveSettings


@dataclass(frozen=True)
class GroupFilter:
    """Which groups to keep, and what was dropped."""

    keep: torch.Tensor
    """[groups] bool: the group's values are not all equal."""
    dropped: int
    """Groups dropped."""
    dropped_all_max: int
    """Dropped groups whose every value is the batch's best possible (e.g. all correct)."""


def dynamic_sampling_filter(values: torch.Tensor, best: float = 1.0, drop: str = "flat") -> GroupFilter:
    """keep_g = 1[∃ i, j: v_gi ≠ v_gj]: keep a group iff its values (reward or correctness,
    [groups, G]) are not all equal; with `drop="all_best"`, keep it unless every value is `best` (NGRPO's
    all-correct filter: Nan et al. 2025, arXiv 2509.18851, whose all-wrong groups carry its signal).

    DAPO: Yu et al. 2025 (arXiv 2503.14476), §3.2 and eq. 11: a group whose rewards are all
    equal has zero advantage and gives no gradient, so it only shrinks the effective batch.
    The trainer samples further prompts until the batch is full, failing after `train.max_gen_rounds` rounds.
    """
    flat = (values == values[:, :1]).all(dim=1)
    all_best = flat & (values[:, 0] == best)
    gone = all_best if drop == "all_best" else flat
    return GroupFilter(keep=~gone, dropped=int(gone.sum()), dropped_all_max=int(all_best.sum()))


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


def median_pivot(rewards: torch.Tensor) -> torch.Tensor:
    """P_gi = 1 for the pivot of each group ([groups, n] bool, one True per row): the first response, in sampling
    order, whose reward equals the group median, for odd n.

    MC-GRPO: Kim 2026, Median-Centered GRPO for Small-Rollout RL (arXiv 2601.22582): a group of G + 1 (odd)
    responses has one median response; the median is the baseline, so the pivot's advantage is 0, and it leaves the
    update, so that G responses per prompt carry gradient. Ties (several responses at the median, e.g. binary
    rewards): the paper says "exactly one completion is the median"; here the first of them is the pivot (the
    responses of a group are exchangeable draws, so which one is excluded does not bias the update), and the other
    tied ones stay in the batch with A = 0.
    """
    n = rewards.shape[1]
    if n % 2 == 0:
        raise ValueError(f"a median pivot needs an odd group (one median response), got {n} responses")
    median = rewards.sort(dim=1).values[:, n // 2 : n // 2 + 1]
    at_median = rewards == median
    first = at_median.to(torch.int8).argmax(dim=1, keepdim=True)
    return torch.zeros_like(at_median).scatter_(1, first, True)


def trained_samples(rewards: torch.Tensor, s: ObjectiveSettings, correct: torch.Tensor | None = None) -> torch.Tensor:
    """T_gi = 1 for the responses the update trains on ([groups, n] bool, rewards and `correct` [groups, n]): every
    response; with `median_pivot` all but each group's pivot (`median_pivot`), so n − 1 = G per group (MC-GRPO: Kim
    2026, arXiv 2601.22582); with `drop_correct` only the wrong ones (NSR: Zhu et al. 2025, arXiv 2506.01347). The
    loop builds the optimisation batch from these rows only: every normaliser's B (the responses of the batch)
    counts them alone."""
    out = ~median_pivot(rewards) if s.median_pivot else torch.ones_like(rewards, dtype=torch.bool)
    if s.drop_correct:
        if correct is None:
            raise ValueError("drop_correct needs each response's correctness")
        out &= ~correct.bool().view_as(out)
    return out


def sign_flip_metrics(
    rewards: torch.Tensor, advantages: torch.Tensor, trained: torch.Tensor | None = None
) -> dict[str, float]:
    """adv/sign_flip_frac = mean_i 1[sign(A_i) · sign(R_i − mean_g R) < 0] over the trained responses (T_i = 1;
    rewards, advantages, trained [groups, n]): the share whose advantage reverses the group-mean one's direction.

    MC-GRPO (Kim 2026, arXiv 2601.22582) names "advantage sign flips": a noisy baseline gives a response the wrong
    sign and reverses its update. This counts where the configured baseline reverses the group mean's direction: 0
    under group_std, group_mean and batch_std (a std scale keeps the sign); the median reverses a response whose
    reward lies strictly between median and mean. A response that one of them gives A = 0 is not reversed and does
    not count (adv/zero_frac counts those). The mean is over the group's n responses, the pivot included.
    """
    r, a = rewards.double(), advantages.double().view_as(rewards)
    flipped = (torch.sign(a) * torch.sign(r - r.mean(dim=1, keepdim=True))) < 0
    keep = torch.ones_like(flipped) if trained is None else trained.bool().view_as(flipped)
    return {M.ADV_SIGN_FLIP_FRAC: float(flipped[keep].double().mean()) if keep.any() else 0.0}


# ---- PF-PPO: the optimisation batch resampled by reward -----------------------------------------------------------
@PF_PPO_WEIGHTS.register("pow", params=("pf_ppo_weight_pow",))
def pow_weights(scores: torch.Tensor, pf_ppo_weight_pow: float) -> torch.Tensor:
    """w_i = |R_i|^k (k = pf_ppo_weight_pow; verl's default 2): responses with a large reward of either sign are
    drawn more. On 0/1 rewards every wrong response gets w = 0 (then 1e-8, see `pf_ppo_resample`).
    PF-PPO, arXiv 2409.06957 (verl's `reweight_method="pow"`)."""
    return scores.abs().pow(pf_ppo_weight_pow)


@PF_PPO_WEIGHTS.register("max_min")
def max_min_weights(scores: torch.Tensor) -> torch.Tensor:
    """w_i = 1 if R_i is the batch's highest or lowest reward, else 0: only the extremes are trained.
    PF-PPO, arXiv 2409.06957 (verl's `reweight_method="max_min"`)."""
    extreme = (scores == scores.max()) | (scores == scores.min())
    return extreme.to(torch.float64)


@PF_PPO_WEIGHTS.register("max_random")
def max_random_weights(scores: torch.Tensor) -> torch.Tensor:
    """w_i = 0.4 if R_i is the batch's highest reward, else 0.1: the best responses four times as likely as the rest.
    PF-PPO, arXiv 2409.06957 (verl's `reweight_method="max_random"`)."""
    top = scores == scores.max()
    return torch.where(top, torch.tensor(0.4, dtype=torch.float64), torch.tensor(0.1, dtype=torch.float64))


def pf_ppo_weights(scores: torch.Tensor, s: ObjectiveSettings) -> torch.Tensor:
    """w_i = max(weight(R_i) + 1e-8, 1e-8) for the n rewards `scores` [n] of the responses to be trained, weight the
    method objective.pf_ppo_reweight names (`PF_PPO_WEIGHTS`), its settings passed by name; the 1e-8 keeps every
    response drawable and a batch of zero weights uniform, as verl's (PF-PPO, arXiv 2409.06957)."""
    name = s.pf_ppo_reweight
    if name is None:
        raise ValueError("pf_ppo_weights needs objective.pf_ppo_reweight")
    kwargs = {key: getattr(s, key) for key in PF_PPO_WEIGHTS.meta(name).get("params", ())}
    weights = PF_PPO_WEIGHTS[name](scores.to(torch.float64), **kwargs)
    return torch.clamp(weights + 1e-8, min=1e-8)


def pf_ppo_resample(scores: torch.Tensor, s: ObjectiveSettings, generator: torch.Generator) -> torch.Tensor:
    """[n] indices into the n responses to be trained, drawn with replacement with probability w_i / Σ_j w_j
    (`pf_ppo_weights`): the optimisation batch becomes these n draws, so a response may be trained several times or
    not at all, and every normaliser's B stays n.

    PF-PPO: Zhang et al. 2025, Policy Filtration for RLHF to Mitigate Noise in Reward Models (arXiv 2409.06957, ICML
    2025): the samples whose rewards are less reliable are filtered out of the policy's update, so that it learns from
    a cleaner signal. What was read: the abstract, and the authors' code as merged into verl by the first author (verl
    PR #1719, which the paper names as its code; unchanged in verl 0.9.1): `verl/trainer/ppo/core_algos.py`,
    `compute_pf_ppo_reweight_data` (scores = each response's summed token-level scores, the reward before a KL
    penalty; the three weights above over the whole batch; `torch.multinomial(weights, batch_size,
    replacement=True)`), called by `ray_trainer.py: compute_advantage` after the advantages (under
    `adv_estimator=gae` only). The paper's body was not stored; its reward-model reliability study (R² of rewards
    against real scores) is what picks a method, and is not built. Draws come from `generator`, seeded by the run's
    seed and step (verl draws from torch's global generator): the same run draws the same batch.
    """
    n = scores.numel()
    if n == 0:
        raise ValueError("PF-PPO resamples a batch of at least one response")
    return torch.multinomial(pf_ppo_weights(scores.flatten(), s), n, replacement=True, generator=generator)


def pf_ppo_metrics(scores: torch.Tensor, picks: torch.Tensor) -> dict[str, float]:
    """train/pf_ppo_distinct_frac = |{picks}| / n, the share of the n responses to be trained that PF-PPO
    (arXiv 2409.06957) drew at least once; train/pf_ppo_reward_mean = the mean reward of the n draws (against
    train/reward_mean, the sampled responses')."""
    n = max(scores.numel(), 1)
    return {
        M.PF_PPO_DISTINCT_FRAC: picks.unique().numel() / n,
        M.PF_PPO_REWARD_MEAN: scores.flatten().double()[picks].mean().item(),
    }
