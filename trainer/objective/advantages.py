"""Advantage estimators (the std-normalisation switch) and their statistics.

Each takes rewards shaped [groups, G] and ε, and returns advantages of the same shape; an estimator
registered with `params` also takes those settings fields by name (`compute_advantages` passes them), and one
registered `needs_strata=True` each response's stratum label, [groups, G] (stratified), and one registered
`needs_lengths=True` each response's token count, [groups, G] (REINFORCE++'s token whitening), and one registered
`needs_greedy=True` the reward of one greedy (temperature-0) response to each prompt, [groups, 1] or [groups, G],
which the training loop generates, grades and never trains on (ReMax's baseline), one registered `needs_values=True`
each response's value from the policy's internal states, [groups, G], which the trainer's value probe predicts (POISE's
baseline: trainer/value_probe.py), and one registered `needs_components=True` each response's reward components,
[groups, G, K] (GDPO), and one registered `needs_prompt_values=True` the success rate of each response's prompt,
[groups, G], from the trainer's persistent per-prompt tracker (SPO's baseline: trainer/value_tracker.py), and one
registered `needs_token_probs=True` each response token's probability and its position's Σ_v π² under the policy
before the update (`TokenProbabilities`, the optimal token baseline's, trainer/objective/token_advantages.py), whose
advantage is per token, [groups, G, L]. Only an estimator named in
`registry.ONE_RESPONSE_ADVANTAGES` has a signal with one response per prompt (`rollout.group_size: 1`): its
baseline is not the group's own mean.
A group whose rewards are all equal gets exactly 0 (never NaN, also for G = 1), since it carries no
learning signal, under every estimator but those registered `zeroes_flat_groups=False`, whose point is
a signal there: batch_norm (no group baseline: only a flat batch gets 0), gdpo and gdpo_tokens (their batch step),
ngrpo (a flat group below the virtual maximum reward gets a negative advantage), remax (a flat group's reward may
differ from its greedy baseline), poise (a flat group's reward may differ from its probe's baseline), spo (its
baseline is the prompt's tracked success rate, not the group) and optimal_token_baseline (verl's zero tail).
"""

from __future__ import annotations

import math

import torch

from trainer import metric_names as M
from trainer.objective import token_advantages as _token_advantages  # noqa: F401 (registers its estimators)
from trainer.objective.registry import ADVANTAGES


def _zero_flat_groups(adv: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
    flat = (rewards == rewards[:, :1]).all(dim=1, keepdim=True)
    return torch.where(flat, torch.zeros_like(adv), adv)


def _centred(rewards: torch.Tensor) -> torch.Tensor:
    return rewards - rewards.mean(dim=1, keepdim=True)


@ADVANTAGES.register("group_std")
def group_std(rewards: torch.Tensor, eps: float) -> torch.Tensor:
    """A_i = (R_i − mean_g R) / (std_g R + ε), std with Bessel's correction.

    GRPO: Shao et al. 2024, DeepSeekMath (arXiv 2402.03300), §4.1.2. Dividing by the
    group std up-weights questions that are nearly always or nearly never solved
    (Liu et al. 2025, Dr. GRPO, arXiv 2503.20783, §3.1).
    Departs from the authors' release: none against TRL's `scale_rewards="group"` (Bessel std, ε added to it), the
    reference the switch table matches; ε is 1e-6 here, 1e-4 in TRL (`objective.adv_eps`).
    """
    std = rewards.std(dim=1, keepdim=True, unbiased=True) if rewards.shape[1] > 1 else torch.zeros_like(rewards[:, :1])
    return _zero_flat_groups(_centred(rewards) / (std + eps), rewards)


@ADVANTAGES.register("group_mean")
def group_mean(rewards: torch.Tensor, eps: float) -> torch.Tensor:
    """A_i = R_i − mean_g R: no std normalisation.

    Dr. GRPO: Liu et al. 2025, Understanding R1-Zero-Like Training (arXiv 2503.20783), §3.2.
    `eps` is unused. Departs from TRL's `scale_rewards="none"`, which the switch table checks: none (the authors'
    own release was not compared here).
    """
    return _zero_flat_groups(_centred(rewards), rewards)


@ADVANTAGES.register("batch_std")
def batch_std(rewards: torch.Tensor, eps: float) -> torch.Tensor:
    """A_i = (R_i − mean_g R) / (std over all rewards of the batch + ε), Bessel-corrected.

    TRL's `scale_rewards="batch"`, after Hu et al. 2025, REINFORCE++ (arXiv 2501.03262):
    one scale for the whole batch keeps the group baseline without re-weighting questions.
    Departs from the authors' release (TRL's `scale_rewards="batch"`): none.
    """
    flat = rewards.flatten()
    std = flat.std(unbiased=True) if flat.numel() > 1 else flat.new_zeros(())
    return _zero_flat_groups(_centred(rewards) / (std + eps), rewards)


@ADVANTAGES.register("rloo")
def rloo(rewards: torch.Tensor, eps: float) -> torch.Tensor:
    """A_i = R_i − (1/(G−1)) Σ_{j≠i} R_j = G/(G−1) · (R_i − mean_g R): each response's baseline is the mean reward of
    the other G − 1 responses to its prompt, so it never includes the response itself.

    RLOO: Kool et al. 2019, Buy 4 REINFORCE Samples, Get a Baseline for Free! (ICLR 2019 workshop); Ahmadian et al.
    2024, Back to Basics: Revisiting REINFORCE Style Optimization for Learning from Human Feedback in LLMs
    (arXiv 2402.14740), §3.2. The same as verl's `algorithm.adv_estimator=rloo` (`verl/trainer/ppo/core_algos.py`,
    `compute_rloo_outcome_advantage`) and OpenRLHF's `advantage_estimator=rloo` (the baseline (Σ_j R_j − R_i)/(G − 1)).
    No std scale: it is group_mean's advantage times G/(G − 1). `eps` is unused.
    Departs from verl's release: a group of one gets 0 here (no other response to be its baseline; verl keeps R_i),
    and a flat group exactly 0 (verl's G/(G−1)·R_i − G/(G−1)·mean may round to ±1e-16 there).
    """
    g = rewards.shape[1]
    if g == 1:
        return torch.zeros_like(rewards)
    return _zero_flat_groups(_centred(rewards) * (g / (g - 1)), rewards)


@ADVANTAGES.register("opo", needs_lengths=True)
def opo(rewards: torch.Tensor, eps: float, lengths: torch.Tensor) -> torch.Tensor:
    """A_i = R_i − b, b = Σ_j T_j R_j / Σ_j T_j: the group's rewards averaged with each response weighted by its
    length T_j (its tokens), the baseline that minimises the gradient's variance when a response's gradient norm
    grows with its length.

    OPO: Hao et al. 2025, On-Policy RL with Optimal Reward Baseline (arXiv 2505.23585), as verl computes it
    (`algorithm.adv_estimator=opo`, `verl/trainer/ppo/core_algos.py`, `compute_opo_outcome_advantage`, with each
    response's length from its response mask). No std scale. `lengths`: [groups, G] response tokens; `eps` unused.
    Departs from verl's release: a group of one gets 0 here (verl: R_i, its baseline 0), a flat group exactly 0,
    and a group whose responses have no token a baseline of its plain mean (verl divides by 0).
    """
    if rewards.shape[1] == 1:
        return torch.zeros_like(rewards)
    t = lengths.to(rewards.dtype)
    total = t.sum(dim=1, keepdim=True)
    weighted = torch.where(
        total > 0, (t * rewards).sum(dim=1, keepdim=True) / total.clamp(min=1), rewards.mean(1, True)
    )
    return _zero_flat_groups(rewards - weighted, rewards)


@ADVANTAGES.register("gpg")
def gpg(rewards: torch.Tensor, eps: float) -> torch.Tensor:
    """A_i = α·(R_i − mean_g R), α = B/(B − M): B the batch's responses, M those in groups whose rewards are all
    equal (whose advantage is 0), so the batch's mean gradient is scaled back up to its informative responses.

    GPG: Chu et al. 2025, GPG: A Simple and Strong Reinforcement Learning Baseline for Model Reasoning
    (arXiv 2504.02546), with F_norm = 1 (no std), the README's best row; the authors' code, `AMAP-ML/GPG`,
    `open-r1/src/open_r1/gpg_trainer.py` (`_generate_and_score_completions`: inverse_alpha = the share of groups
    whose rewards vary, at most 1; `compute_loss` divides the loss by it). A batch of flat groups gets 0; `eps` is
    unused. Departs from the authors' release: their β_th refill (sampling more until that share reaches β_th) is
    not here (objective.dynamic_sampling drops flat groups instead), and α is taken over the rewards given, without
    the groups their refill would have drawn. verl's `gpg` estimator counts otherwise (`gpg_nonzero`).
    """
    adv = _zero_flat_groups(_centred(rewards), rewards)
    flat = (rewards == rewards[:, :1]).all(dim=1)
    informative = int((~flat).sum())
    return adv * (rewards.shape[0] / informative) if informative else adv


@ADVANTAGES.register("gpg_nonzero")
def gpg_nonzero(rewards: torch.Tensor, eps: float) -> torch.Tensor:
    """A_i = α·(R_i − mean_g R), α = B/max(#{j : R_j ≠ 0}, 1): GPG's advantage (arXiv 2504.02546) as verl 0.9.1
    computes it (`algorithm.adv_estimator=gpg`, `verl/trainer/ppo/core_algos.py`, `compute_gpg_outcome_advantage`,
    f_norm 1),
    whose α counts the responses with a non-zero reward (the correct ones, for 0/1 rewards), not those of groups
    with a signal as the paper's B/(B − M) does (`gpg`). `eps` is unused.
    Departs from verl's release: a group of one gets 0 here (verl: α·R_i, its mean 0), and a flat group exactly 0.
    """
    nonzero = int((rewards != 0).sum())
    return _zero_flat_groups(_centred(rewards), rewards) * (rewards.numel() / max(nonzero, 1))


@ADVANTAGES.register("passk")
def passk(rewards: torch.Tensor, eps: float) -> torch.Tensor:
    """Only each group's best response gets a signal: A_best = (R_max − R_second) / (std_g R + ε), every other
    response 0 (std with Bessel's correction). The group is rewarded for its best sample, not its average: with 0/1
    rewards only a group with exactly one correct response moves.

    verl's `algorithm.adv_estimator=grpo_passk` (`verl/trainer/ppo/core_algos.py`,
    `compute_grpo_passk_outcome_advantage`, with `norm_adv_by_std_in_grpo` on, its default), which cites Walder &
    Karkhanis 2025, Pass@K Policy Optimization (arXiv 2503.19595): R_max − R_second is the leave-one-out max@k
    advantage at k = G (each other response's leave-one-out maximum is R_max itself); the paper's estimators for
    k < G are not built here. Ties at the top give R_max − R_second = 0, so which tied response is "best" does not
    matter.
    Departs from verl's release: a group of one gets 0 (verl refuses it); without the std (verl's
    `norm_adv_by_std_in_grpo: false`) is not offered.
    """
    if rewards.shape[1] == 1:
        return torch.zeros_like(rewards)
    top = rewards.topk(2, dim=1).values
    std = rewards.std(dim=1, keepdim=True, unbiased=True)
    best = rewards.argmax(dim=1, keepdim=True)
    return _zero_flat_groups(
        torch.zeros_like(rewards).scatter(1, best, (top[:, :1] - top[:, 1:2]) / (std + eps)), rewards
    )


@ADVANTAGES.register("group_median")
def group_median(rewards: torch.Tensor, eps: float) -> torch.Tensor:
    """A_i = R_i − median_g R (for even G the median is the midpoint of the two middle rewards).

    The median-centred estimator without MC-GRPO's scale: an ablation of MC-GRPO (Kim 2026, arXiv 2601.22582),
    whose estimator as released is `group_median_mad` (the `mc_grpo` preset). `eps` is unused.
    Departs from the authors' release (`lotusroot-kim/MC-GRPO`, `src/open_r1/grpo_trainer_gsm.py`): no MAD scale,
    no per-group rescale, and the midpoint median for even groups; by design, as an ablation.
    """
    median = torch.quantile(rewards, 0.5, dim=1, keepdim=True)
    return _zero_flat_groups(rewards - median, rewards)


MC_GRPO_ZERO = 1e-6
"""|A| at or below which MC-GRPO's rescale counts an advantage as zero (the authors' `isclose(A, 0, atol=1e-6)`)."""


@ADVANTAGES.register("group_median_mad")
def group_median_mad(rewards: torch.Tensor, eps: float) -> torch.Tensor:
    """MC-GRPO as released: A'_i = (R_i − m_g) / (MAD_g + ε), m_g = median_g R, MAD_g = median_g |R − m_g|, both the
    lower median (the smaller middle value for an even group, as `torch.median`); then in each group every
    non-zero A'_i (|A'_i| > 1e-6) is multiplied by n / #non-zero, n the group's responses (the pivot included).

    Kim 2026, Median-Centered GRPO for Small-Rollout RL (arXiv 2601.22582); the authors' code,
    `lotusroot-kim/MC-GRPO`, `src/open_r1/grpo_trainer_gsm.py` (`_generate_and_score_completions`, `mc=True`:
    "median baseline and MAD normalization", ε = 1e-3 in the `mc_grpo` preset; no std scaling). With 0/1 rewards
    the MAD of a group with one odd response out is 0, so A' = ±1/ε: the group [1, 0, 0, 0, 0] gives
    [1000, 0, 0, 0, 0] and, one non-zero of 5, [5000, 0, 0, 0, 0]; [1, 1, 0, 0, 0] gives 2500 to each correct one.
    A flat group gets 0. With `median_pivot` the one median response is left out of the update afterwards
    (`trainer.objective.sampling.median_pivot`).
    Departs from the authors' release: the pivot left out is the first median response in sampling order, where
    the authors' is `torch.median`'s index (which of several tied responses is not specified); all of them have
    A = 0, so only which response's tokens leave the normalisers' counts differs.
    """
    median = rewards.median(dim=1, keepdim=True).values
    mad = (rewards - median).abs().median(dim=1, keepdim=True).values
    adv = (rewards - median) / (mad + eps)
    nonzero = adv.abs() > MC_GRPO_ZERO
    count = nonzero.sum(dim=1, keepdim=True).to(adv.dtype)
    scale = rewards.shape[1] / count.clamp(min=1)  # in adv's dtype: an int tensor would divide in float32
    return _zero_flat_groups(torch.where(nonzero, adv * scale, adv), rewards)


@ADVANTAGES.register("baseline_free", zeroes_flat_groups=False)
def baseline_free(rewards: torch.Tensor, eps: float) -> torch.Tensor:
    """A_i = +1 for a correct response (R_i = 1), −1 for a wrong one (R_i = 0): no baseline, no scale.

    Zhu et al. 2025, The Surprising Effectiveness of Negative Reinforcement in LLM Reasoning (arXiv 2506.01347);
    the authors' code, `TianHongZXY/RLVR-Decomposed`, `verl/trainer/ppo/core_algos.py`,
    `compute_psr_nsr_outcome_advantage`: the outcome return R (γ = 1) is R − 1 for a wrong response and R·λ for a
    correct one under W-REINFORCE (`advantage=weighted`), R − 1 under NSR (`negative`). Here the correct
    responses' +1 is weighted by `positive_weight` λ in the loss (`sign_weight`), which for a clipped surrogate is the
    same as an advantage of +λ; NSR drops the correct responses from the batch (`drop_correct`). An all-wrong group
    gets −1 everywhere (the signal a baseline would cancel). Rewards other than 0 and 1 are an error: the authors
    split the batch by correct and incorrect. `eps` is unused.
    Departs from the authors' release: the logged advantage of a correct response is +1 under W-REINFORCE (+λ in
    theirs); the update is the same.
    """
    binary = (rewards == 0) | (rewards == 1)
    if not bool(binary.all()):
        bad = rewards[~binary].flatten()[0].item()
        raise ValueError(f"advantage baseline_free needs 0/1 rewards (correct or not), got {bad:g}")
    return rewards * 2 - 1


@ADVANTAGES.register("batch_norm", zeroes_flat_groups=False)
def batch_norm(rewards: torch.Tensor, eps: float) -> torch.Tensor:
    """A_i = (R_i − mean_B R) / (std_B R + ε), mean and Bessel-corrected std over every reward of the batch.

    REINFORCE++ (k ≥ 1): Hu et al. 2025 (arXiv 2501.03262), global advantage normalisation with no group baseline.
    The paper whitens per token; with an outcome reward and the KL in the loss rather than in the reward (as here)
    each token's return is R_i, so harness whitens per response, each counting once. A flat group keeps its
    batch-relative signal (at G = 1 every group is flat); only a batch whose rewards are all equal gets 0.
    Departs from the authors' release (verl's `reinforce_plus_plus`): whitening per response, Bessel over B and ε on
    the std, where verl whitens per token (`batch_norm_tokens`, the `reinforce_pp` preset, is verl's).
    """
    flat = rewards.flatten()
    if bool((flat == flat[0]).all()):
        return torch.zeros_like(rewards)
    return (rewards - flat.mean()) / (flat.std(unbiased=True) + eps)


@ADVANTAGES.register("group_mean_batch_norm")
def group_mean_batch_norm(rewards: torch.Tensor, eps: float) -> torch.Tensor:
    """A'_i = R_i − mean_g R, then A_i = (A'_i − mean_B A') / (std_B A' + ε), Bessel-corrected, over the batch.

    REINFORCE++ w/ baseline (k > 1): Hu et al. 2025 (arXiv 2501.03262): the group mean reshapes the reward, then
    one global normalisation. Unlike batch_std (TRL's "batch", Lite PPO), the scale is the std of the centred
    values, not of the raw rewards, so flat groups shrink no one's advantage. mean_B A' is 0 up to rounding
    (every group has G responses); per response, as batch_norm.
    Departs from the authors' release (verl's `reinforce_plus_plus_baseline`): per response, as `batch_norm`
    (`group_mean_batch_norm_tokens`, the `reinforce_pp_baseline` preset, is verl's).
    """
    centred = _centred(rewards)
    flat = centred.flatten()
    std = flat.std(unbiased=True) if flat.numel() > 1 else flat.new_zeros(())
    return _zero_flat_groups((centred - flat.mean()) / (std + eps), rewards)


def _token_whiten(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(x_i − m)·(v + 1e-8)^(−1/2) over the batch's tokens, as verl's `masked_whiten` with each response's value on
    each of its T_i tokens: m = Σ T_i x_i / (N + 1e-8), v = Σ T_i (x_i − m)² / (N + 1e-8) · N / (N − 1), N = Σ T_i."""
    t = lengths.to(x.dtype)
    n = t.sum()
    if n <= 1:
        raise ValueError(f"token whitening needs more than one response token in the batch, got {int(n)}")
    mean = (t * x).sum() / (n + 1e-8)
    var = (t * (x - mean) ** 2).sum() / (n + 1e-8) * (n / (n - 1))
    return (x - mean) * torch.rsqrt(var + 1e-8)


@ADVANTAGES.register("batch_norm_tokens", zeroes_flat_groups=False, needs_lengths=True)
def batch_norm_tokens(rewards: torch.Tensor, eps: float, lengths: torch.Tensor) -> torch.Tensor:
    """A_i = (R_i − m)·(v + 1e-8)^(−1/2), m and v over the batch's tokens (`_token_whiten`).

    REINFORCE++ as verl 0.9.1 computes it (`reinforce_plus_plus`: `compute_reinforce_plus_plus_outcome_advantage`
    in `verl/trainer/ppo/core_algos.py`, `masked_whiten` in `verl/utils/torch_functional.py`): each token's return
    is its response's reward (γ = 1, the KL in the loss, not in the reward), whitened over every response token of
    the batch (`_token_whiten`: Bessel over the N tokens, 1e-8 inside the square root). A long response weighs in
    the mean and variance by its length, and an all-equal group of unequal lengths keeps a signal. `lengths`:
    [groups, G] response tokens. `eps` is unused (verl's 1e-8).
    Hu et al. 2025, REINFORCE++ (arXiv 2501.03262). `batch_norm` is the per-response whitening harness had before.
    Departs from the authors' release: verl's examples put the KL in the reward per token, so token t's return holds
    the KL from t on; harness's `objective.kl_reward_coef` gives every token the response's whole sum (or
    `objective.kl_coef` puts it in the loss).
    """
    return _token_whiten(rewards, lengths)


@ADVANTAGES.register("group_mean_batch_norm_tokens", zeroes_flat_groups=False, needs_lengths=True)
def group_mean_batch_norm_tokens(rewards: torch.Tensor, eps: float, lengths: torch.Tensor) -> torch.Tensor:
    """A'_i = R_i − mean_g R (0 for a group of one), then A_i = (A'_i − m)·(v + 1e-8)^(−1/2) over every response
    token of the batch as `batch_norm_tokens`: REINFORCE++ with the group baseline as verl 0.9.1 computes it
    (`reinforce_plus_plus_baseline`), Hu et al. 2025 (arXiv 2501.03262). `group_mean_batch_norm` is the
    per-response whitening harness had before.
    Departs from the authors' release: the KL's placement, as `batch_norm_tokens`.
    """
    centred = rewards - rewards.mean(dim=1, keepdim=True) if rewards.shape[1] > 1 else rewards
    return _token_whiten(centred, lengths)


@ADVANTAGES.register("batch_mean", zeroes_flat_groups=False)
def batch_mean(rewards: torch.Tensor, eps: float) -> torch.Tensor:
    """A_i = R_i − mean_B R: the mean reward of the whole batch as every response's baseline, no group, no scale.

    FlashREINFORCE's advantage, read from the trainer TRL added after 1.16 (`experimental/flash_reinforce/
    flash_reinforce_config.py`: "one rollout per prompt, batch-centered rewards without standard-deviation scaling";
    the authors' repository is `yifanzhang-pro/FlashREINFORCE`; no paper was found to read), trained with one
    response per prompt (`rollout.group_size: 1`). Its sequence gate on the rollout's binary KL is not built. A flat
    group keeps its batch-relative signal; a batch whose rewards are all equal gets 0. `eps` is unused. It is
    REINFORCE with a constant baseline (Williams 1992), and `batch_norm` (REINFORCE++ at one response per prompt, Hu
    et al. 2025, arXiv 2501.03262) without the std.
    """
    return rewards - rewards.mean()


@ADVANTAGES.register("batch_mean_tokens", zeroes_flat_groups=False, needs_lengths=True)
def batch_mean_tokens(rewards: torch.Tensor, eps: float, lengths: torch.Tensor) -> torch.Tensor:
    """A_i = R_i − m, m = Σ_j T_j R_j / Σ_j T_j: each token's return R_i less the mean over the batch's response
    tokens, no scale.

    OpenRLHF's REINFORCE++ with `--algo.advantage.no_std_norm` (`estimator=reinforce`; the advantages' masked mean over
    every action token of the batch subtracted, the rstd left at 1: `trainer/ppo_utils/experience_maker.py`), the
    return γ = 1 with the KL in the loss, so R_i on each of response i's T_i tokens. Hu et al. 2025, REINFORCE++
    (arXiv 2501.03262). `eps` is unused.
    """
    t = lengths.to(rewards.dtype)
    return rewards - (t * rewards).sum() / t.sum()


@ADVANTAGES.register("group_mean_batch_mean_tokens", zeroes_flat_groups=False, needs_lengths=True)
def group_mean_batch_mean_tokens(rewards: torch.Tensor, eps: float, lengths: torch.Tensor) -> torch.Tensor:
    """A'_i = R_i − mean_g R, then A_i = A'_i − Σ_j T_j A'_j / Σ_j T_j: the group baseline, then the batch's token mean
    subtracted, no scale.

    OpenRLHF's REINFORCE++-baseline with `--algo.advantage.no_std_norm` (`estimator=reinforce_baseline`,
    `trainer/ppo_utils/experience_maker.py`): its group mean leaves a group of one at 0, so, unlike verl's
    `group_mean_batch_norm_tokens`, one response per prompt gets no signal. A flat group gets −m where lengths
    differ across the batch. Hu et al. 2025 (arXiv 2501.03262). `eps` is unused.
    """
    t = lengths.to(rewards.dtype)
    centred = _centred(rewards)
    return centred - (t * centred).sum() / t.sum()


def _check_range(rewards: torch.Tensor, reward_range: tuple[float, float]) -> None:
    low, high = reward_range
    outside = (rewards < low) | (rewards > high)
    if bool(outside.any()):
        raise ValueError(
            f"reward_range: a reward of {rewards[outside][0].item():g} lies outside [{low:g}, {high:g}] "
            "(set objective.reward_range to the task's lowest and highest reward)"
        )


@ADVANTAGES.register("ngrpo", zeroes_flat_groups=False, params=("reward_range", "ngrpo_single"))
def ngrpo(
    rewards: torch.Tensor, eps: float, reward_range: tuple[float, float], ngrpo_single: str = "virtual"
) -> torch.Tensor:
    """A_i = (R_i − mean(R⁺)) / (std(R⁺) + ε), R⁺ = {R_1, …, R_G, r_max}, std Bessel-corrected over G + 1 values.

    NGRPO's advantage calibration: Nan et al. 2025 (arXiv 2509.18851): a virtual sample with the maximum reward
    r_max (reward_range's upper end) enters the group's mean and std but is not trained on, so an all-wrong group
    gets a negative advantage instead of none. A group all at r_max stays 0 (nothing to calibrate against); a
    reward outside reward_range is an error (the virtual sample must be the maximum). G = 1 gives two values, or
    with `ngrpo_single: unit` the authors' mean 0 and std 1 (A = R/(1 + ε)).
    The authors' code: `nangongrui-ngr/NGRPO`, `verl/trainer/ppo/core_algos.py`, `compute_ngrpo_outcome_advantage`.
    Departs from the authors' release: none in the `ngrpo` preset (which also drops all-correct groups and refills
    the batch, as their recipe's filter); with `ngrpo_single: virtual` (the default, today's runs), a group of one.
    """
    _check_range(rewards, reward_range)
    if rewards.shape[1] == 1 and ngrpo_single == "unit":
        return rewards / (1 + eps)
    r_max = reward_range[1]
    augmented = torch.cat([rewards, rewards.new_full((rewards.shape[0], 1), r_max)], dim=1)
    mean = augmented.mean(dim=1, keepdim=True)
    std = augmented.std(dim=1, keepdim=True, unbiased=True)
    at_max = (rewards == r_max).all(dim=1, keepdim=True)
    return torch.where(at_max, torch.zeros_like(rewards), (rewards - mean) / (std + eps))


def bnpo_beta_params(p: torch.Tensor) -> tuple[float, float]:
    """(α, β) = (1 + a/3, 1 + b/3), (a, b) the method-of-moments Beta fit of the groups' success rates p:
    a = μ·k, b = (1 − μ)·k, k = μ(1 − μ)/σ² − 1, μ and σ² (Bessel-corrected) over the batch's groups.

    BNPO: Xiao et al. 2025 (arXiv 2506.02864): with p(q) ~ Beta(a, b) the normaliser Beta(1 + a/3, 1 + b/3) is the
    one of least gradient variance. Where the moments fit no Beta (fewer than two groups, σ² = 0, or σ² ≥ μ(1 − μ)
    so that a, b ≤ 0), (1, 1): the uniform density, no normalisation (REINFORCE with the group baseline).
    """
    if p.numel() < 2:
        return 1.0, 1.0
    mu, var = p.mean().item(), p.var(unbiased=True).item()
    if var <= 0 or var >= mu * (1 - mu):
        return 1.0, 1.0
    k = mu * (1 - mu) / var - 1
    return 1 + mu * k / 3, 1 + (1 - mu) * k / 3


@ADVANTAGES.register("bnpo", params=("reward_range", "bnpo_params", "bnpo_max_weight"))
def bnpo(
    rewards: torch.Tensor,
    eps: float,
    reward_range: tuple[float, float],
    bnpo_params: tuple[float, float] | None = None,
    bnpo_max_weight: float | None = None,
) -> torch.Tensor:
    """A_i = (R̃_i − p) / f(p; α, β), R̃ = (R − low)/(high − low) ∈ [0, 1], p = mean_g R̃ the group's success rate and
    f the Beta(α, β) density; (α, β) = bnpo_params if set, else `bnpo_beta_params` of this batch's p.

    BNPO: Xiao et al. 2025 (arXiv 2506.02864), for binary rewards; the affine map to [0, 1] (reward_range) extends
    it to bounded ones. (α, β) follow the policy's success rate: re-estimated from each batch's groups, so no state
    crosses steps. (1, 1) is REINFORCE with the group baseline (group_mean); (3/2, 3/2) is GRPO's (R − p)/√(p(1 − p))
    (the population std) times B(3/2, 3/2) = π/8 for binary rewards. 1/f is capped at `bnpo_max_weight` where set
    (the authors' 1e6 in the `bnpo` preset). A flat group (p at 0 or 1, where f may be 0 or ∞) gets 0. `eps` is
    unused. A reward outside reward_range is an error.
    Departs from the authors' release (`changyi7231/BNPO`, `recipe/bnpo/src/bnpo_ray_trainer.py`,
    `compute_bnpo_outcome_advantage`): a group of one response gets 0 here (it has no success rate to compare
    with), where the authors set its p to 0 and weigh its reward; a batch whose groups all have one success rate
    (σ² = 0) takes (1, 1) here, where the authors divide by 0. Their clamp of α and β at 1 is the (1, 1) fallback
    here wherever their code is defined.
    """
    _check_range(rewards, reward_range)
    low, high = reward_range
    scaled = (rewards - low) / (high - low)
    p = scaled.mean(dim=1, keepdim=True)
    alpha, beta = bnpo_params if bnpo_params is not None else bnpo_beta_params(p.flatten())
    flat = (rewards == rewards[:, :1]).all(dim=1, keepdim=True)
    inner = torch.where(flat, torch.full_like(p, 0.5), p)  # 0 < p < 1 in every group that is not flat
    log_norm = math.lgamma(alpha) + math.lgamma(beta) - math.lgamma(alpha + beta)
    log_density = (alpha - 1) * torch.log(inner) + (beta - 1) * torch.log1p(-inner) - log_norm
    weight = torch.exp(-log_density)
    if bnpo_max_weight is not None:
        weight = weight.clamp(max=bnpo_max_weight)
    return _zero_flat_groups((scaled - p) * weight, rewards)


@ADVANTAGES.register("stratified", params=("stratum_blend",), needs_strata=True)
def stratified(rewards: torch.Tensor, eps: float, stratum_blend: float, strata: torch.Tensor) -> torch.Tensor:
    """A_i = α·(R_i − mean_k R)/(std_k R + ε) + (1 − α)·A_i^GRPO, k = {j in i's group : s_j = s_i} the stratum of i,
    std_k Bessel-corrected over the stratum, A^GRPO = group_std and α = stratum_blend; `strata` [groups, G] holds
    each response's stratum label s (equal labels, one stratum).

    Stratified GRPO: Zhu et al. 2025, Stratified Advantage Normalization (SAN, arXiv 2510.06214): the responses of one
    prompt are partitioned by a structural property (there, the number of search calls) and each is compared only
    with its peers, so a stratum's offset from the group mean (the cross-stratum bias) never enters its advantage;
    the paper blends SAN linearly with the global (group) estimator for finite samples, α = 1 being SAN alone.
    Choices here: the baseline is per stratum within the prompt's group (the paper's K responses of one prompt), not
    pooled across the batch; the std is Bessel-corrected as in group_std, so a group with one label is exactly GRPO;
    a stratum with one response, or whose rewards are all equal, has no peer to differ from and gets SAN term 0
    (so a group whose strata are each flat gets only the (1 − α) GRPO term, and at α = 1 nothing).
    Departs from the authors' release: unknown. No code by the authors was found, and of the paper only the abstract
    and summaries were read (2026-11-28: arXiv 2510.06214's HTML, ICML 2026 poster 63159, third-party reviews): they
    give the mean-centred R_i − mean_k R, "unit-variance" strata, strata by "structural properties (e.g., the
    number of search calls)" and a linear blend with "the global estimator". Not found: ε, Bessel or not, whether
    strata are per prompt or across the batch, what "global" is, and α in the experiments; each choice above is
    harness's.
    """
    if strata.shape != rewards.shape:
        raise ValueError(f"strata must match rewards' shape {list(rewards.shape)}, got {list(strata.shape)}")
    peers = strata[:, :, None] == strata[:, None, :]  # [groups, G, G]: j is in i's stratum
    w = peers.to(rewards.dtype)
    n = w.sum(-1)
    mean = (w * rewards[:, None, :]).sum(-1) / n
    var = (w * (rewards[:, None, :] - mean[..., None]) ** 2).sum(-1) / (n - 1).clamp(min=1)
    flat = ~(peers & (rewards[:, None, :] != rewards[:, :, None])).any(-1)  # every peer's reward equals mine
    san = torch.where(flat, torch.zeros_like(rewards), (rewards - mean) / (var.sqrt() + eps))
    if stratum_blend == 1:
        return san
    return stratum_blend * san + (1 - stratum_blend) * group_std(rewards, eps)


@ADVANTAGES.register("remax", zeroes_flat_groups=False, needs_greedy=True)
def remax(rewards: torch.Tensor, eps: float, greedy: torch.Tensor) -> torch.Tensor:
    """A_i = R_i − R̄_i, R̄_i the reward of one greedy (temperature-0) response to response i's prompt: no std scale.

    ReMax: Li et al. 2023, ReMax: A Simple, Effective, and Efficient Reinforcement Learning Method for Aligning
    Large Language Models (arXiv 2310.10505), Algorithm 1: REINFORCE whose baseline is the reward of the greedy
    response, which the policy's own argmax decoding gives with no value network. verl 0.9.1's
    `algorithm.adv_estimator=remax` (`verl/trainer/ppo/core_algos.py`, `compute_remax_outcome_advantage`: each
    token's advantage is its reverse-cumulative return minus the prompt's `reward_baselines`, which with an outcome
    reward on the last token is R_i − R̄ on every response token; `verl/trainer/ppo/ray_trainer.py` generates the
    greedy response in the same request as the sampled ones, `__do_sample__` false, and sums its reward as the
    baseline, without the KL in the reward). `greedy`: the greedy rewards, [groups, 1] (one prompt per group: each
    of its responses, the paper's one or verl's `rollout.n`, gets that baseline) or [groups, G] (each response its own
    prompt's, where a group's prompts differ, as the toy's hidden digits), shaped as the sampled ones
    (objective.overlong_penalty) and without the KL penalty. A flat group keeps R − R̄ (the greedy response is not in
    it). `eps` is unused.
    Departs from verl's release: none on the outcome reward (benchmarks/advantages_vs_authors.py); verl's per-token
    returns also carry a KL in the reward from token t on, where harness gives every token the response's sum
    (objective.kl_reward_coef), as for every estimator.
    """
    if greedy.shape not in ((rewards.shape[0], 1), rewards.shape):
        raise ValueError(f"greedy rewards must be [groups, 1] or {list(rewards.shape)}, got {list(greedy.shape)}")
    return rewards - greedy.to(rewards.dtype)


@ADVANTAGES.register("poise", zeroes_flat_groups=False, needs_values=True)
def poise(rewards: torch.Tensor, eps: float, values: torch.Tensor) -> torch.Tensor:
    """A_i = R_i − (1/(G−1)) Σ_{j≠i} V_j: each response's baseline is the mean of the values of the other G − 1
    responses to its prompt, V_j = g(z_j) the value probe's prediction from response j's own internal states z_j (its
    prompt's and its own hidden states, its token entropy), with no std scale. G = 2: A_1 = R_1 − g(z_2), A_2 = R_2 −
    g(z_1).

    POISE: Choi et al. 2026, Your Language Model is Its Own Critic: Reinforcement Learning with Value Estimation from
    Actor's Internal States (arXiv 2605.07579): z_j depends on response j, so g(z_i) as response i's own baseline
    would correlate with its action and bias the gradient; a sibling's g(z_j), from an independent rollout of the same
    prompt, does not (the cross-rollout construction). Follows the authors' release holi-lab/POISE,
    `src/poise/core.py` (`compute_group_targets_and_cross_baselines`: the baseline is the siblings' mean prediction,
    `(Σ_g V − V_i)/(G − 1)`) and `src/poise/trainer.py` (`_compute_poise_advantages`: A = R − baseline per response,
    broadcast to its tokens, no normalisation). `values` [groups, G]: g(z) of each response, from the probe fitted on
    earlier steps (`trainer/value_probe.py`); while the probe has no fit yet (its bootstrap) the loop hands the rewards
    themselves, and this is RLOO, the authors' bootstrap (`_compute_bootstrap_rloo_advantages`). A group of one has no
    sibling and gets 0 (the authors refuse G < 2: so does the run config). A flat group keeps R − baseline (the
    probe is not the group). `eps` is unused.
    Departs from the authors' release: none in this function.
    """
    if values.shape != rewards.shape:
        raise ValueError(f"values must match rewards' shape {list(rewards.shape)}, got {list(values.shape)}")
    G = rewards.shape[1]
    if G < 2:
        return torch.zeros_like(rewards)
    v = values.to(rewards.dtype)
    return rewards - (v.sum(dim=1, keepdim=True) - v) / (G - 1)


@ADVANTAGES.register("spo", zeroes_flat_groups=False, needs_prompt_values=True)
def spo(rewards: torch.Tensor, eps: float, prompt_values: torch.Tensor) -> torch.Tensor:
    """A'_i = R_i − v̂(x_i), then A_i = (A'_i − mean_B A') / (std_B A' + ε), Bessel-corrected, over every response of
    the batch: v̂(x) = α(x)/(α(x) + β(x)), the success rate of response i's prompt x_i that the trainer's persistent
    tracker held before this step (trainer/value_tracker.py: a Beta whose evidence is discounted by a KL-adaptive
    forgetting factor as the policy moves). Nothing is grouped: any number of responses per prompt, one included.

    SPO: Xu and Ding 2025, Single-stream Policy Optimization (arXiv 2509.13232): a persistent per-prompt baseline in
    place of the group's, and one normalisation over the whole batch. Follows the authors' release (verl's
    recipe/spo/spo_ray_trainer.py, `RayPPOTrainer.fit`: `advantages = r - p_hats`, then
    `(advantages - advantages.mean()) / (advantages.std() + 1e-8)`, torch's Bessel-corrected std; the `spo` preset's
    ε is their 1e-8). `prompt_values` [groups, G]: v̂ of each response's prompt. A batch whose R − v̂ are all equal
    (one response, say) gets 0 where the authors' std would be NaN. The paper's method section could not be read here
    (its abstract and introduction could): the formula is the authors' code's.
    Departs from the authors' release: none in this function.
    """
    if prompt_values.shape != rewards.shape:
        raise ValueError(
            f"prompt_values must match rewards' shape {list(rewards.shape)}, got {list(prompt_values.shape)}"
        )
    centred = rewards - prompt_values.to(rewards.dtype)
    flat = centred.flatten()
    if bool((flat == flat[0]).all()):
        return torch.zeros_like(rewards)
    return (centred - flat.mean()) / (flat.std(unbiased=True) + eps)


def leave_one_out_targets(rewards: torch.Tensor) -> torch.Tensor:
    """y_i = (1/(G−1)) Σ_{j≠i} R_j, [groups, G]: what POISE's probe (arXiv 2605.07579) regresses response i's internal
    states on (the authors' `target_mode: other_rollout_correctness` in holi-lab/POISE `src/poise/core.py`, their
    shipped configs' choice): the rewards of i's siblings,
    independent of i given the prompt, so the probe learns the prompt's value, not response i's own reward. A group
    of one has no target (an error: POISE needs G ≥ 2)."""
    G = rewards.shape[1]
    if G < 2:
        raise ValueError("POISE's probe targets need at least 2 responses per prompt")
    return (rewards.sum(dim=1, keepdim=True) - rewards) / (G - 1)


def _decoupled_sum(components: torch.Tensor, eps: float, weights: tuple[float, ...] | None) -> torch.Tensor:
    """Σ_k w_k·group_std(r_k): each component [groups, G, K] normalised within its group on its own, then weighted
    (w_k = 1 when `weights` is None) and summed, [groups, G]."""
    k = components.shape[-1]
    w = (1.0,) * k if weights is None else weights
    if len(w) != k:
        raise ValueError(f"reward_weights has {len(w)} weights for {k} reward components")
    out = torch.zeros(components.shape[:2], dtype=components.dtype)
    for j in range(k):
        out = out + w[j] * group_std(components[..., j], eps)
    return out


@ADVANTAGES.register("gdpo", zeroes_flat_groups=False, params=("reward_weights",), needs_components=True)
def gdpo(
    rewards: torch.Tensor, eps: float, components: torch.Tensor, reward_weights: tuple[float, ...] | None = None
) -> torch.Tensor:
    """A_i = (S_i − mean_B S) / (std_B S + ε), S_i = Σ_k w_k·(r_ik − mean_g r_k) / (std_g r_k + ε): each reward
    component r_k normalised within the group (GRPO's advantage of that component alone, Bessel std), weighted by
    w_k (objective.reward_weights, 1 each by default) and summed, then the sums whitened over the batch's responses
    (Bessel std over B).

    GDPO: Liu et al. 2026, Group reward-Decoupled Normalization Policy Optimization for Multi-reward RL Optimization
    (arXiv 2601.05242): summing the components before GRPO's group normalisation makes distinct combinations
    collapse onto one advantage ((0, 1) and (1, 0) alike); normalising each first keeps them apart, and the batch
    normalisation keeps the scale from growing with the number of components. The authors' TRL release
    (`NVlabs/GDPO`, `trl-GDPO/trl-0.18.0-gdpo/trl/trainer/grpo_trainer.py`: std + 1e-4 in both steps) and TRL 1.16's
    `multi_objective_aggregation="normalize_then_sum"` (`_generate_and_score_completions`) compute this with ε = 1e-4
    (objective.adv_eps). `components`: [groups, G, K], the K rewards objective.reward_components names; `rewards`
    (the summed reward) is not read. A component flat within a group adds 0 for it; a flat group keeps −mean_B/std_B
    (the batch step), as in both releases. A batch whose sums are all equal gets 0. `gdpo_tokens` is the authors'
    verl release, whitened per token.
    Departs from TRL's release: none on finite rewards (benchmarks/gdpo_vs_references.py: 5.6e-12 over 400 cases);
    TRL's NaN rewards (a reward function that returns None) have no counterpart here. From the authors' fork: with a
    single component theirs falls back to GRPO (no batch step), where TRL 1.16 and harness whiten it anyway; their
    SA-GDPO option (each weight scaled down by its reward's saturation over the batch) is not built.
    """
    summed = _decoupled_sum(components.to(rewards.dtype), eps, reward_weights)
    flat = summed.flatten()
    if flat.numel() < 2 or bool((flat == flat[0]).all()):
        return torch.zeros_like(summed)
    return (summed - flat.mean()) / (flat.std(unbiased=True) + eps)


@ADVANTAGES.register(
    "gdpo_tokens", zeroes_flat_groups=False, params=("reward_weights",), needs_components=True, needs_lengths=True
)
def gdpo_tokens(
    rewards: torch.Tensor,
    eps: float,
    components: torch.Tensor,
    lengths: torch.Tensor,
    reward_weights: tuple[float, ...] | None = None,
) -> torch.Tensor:
    """A_i = (S_i − m)·(v + 1e-8)^(−1/2), S_i = Σ_k w_k·(r_ik − mean_g r_k) / (std_g r_k + ε) as `gdpo`, with m and v
    over the batch's response tokens (`_token_whiten`: a response weighs by its length T_i).

    GDPO (Liu et al. 2026, arXiv 2601.05242) as verl 0.9.1 computes it (`algorithm.adv_estimator=gdpo` with
    `algorithm.gdpo_reward_keys` and `gdpo_reward_weights`; `verl/trainer/ppo/core_algos.py`,
    `compute_gdpo_outcome_advantage`: `compute_grpo_outcome_advantage` per component, ε = 1e-6 by default, the
    weighted sum, then `masked_whiten` over the response mask) and as the authors' verl release does
    (`NVlabs/GDPO`, `verl-GDPO/verl/trainer/ppo/ray_trainer.py`, two components, weights 1). `components`: [groups,
    G, K]; `lengths`: [groups, G] response tokens.
    Departs from verl's release: a group of one response gets 0 from each component here (verl: mean 0, std 1, so
    r/(1 + ε)); verl reads its components in float32, harness in the rewards' dtype. Elsewhere the same
    (benchmarks/gdpo_vs_references.py: 7.0e-10 over 400 cases, all on components flat in a group).
    """
    summed = _decoupled_sum(components.to(rewards.dtype), eps, reward_weights)
    return _token_whiten(summed, lengths)


def advantage_metrics(advantages: torch.Tensor) -> dict[str, float]:
    """adv/mean = mean_i A_i, adv/abs_mean = mean_i |A_i|, adv/zero_frac = share of A_i = 0, over all responses."""
    a = advantages.detach().flatten().double()
    return {
        M.ADV_MEAN: a.mean().item(),
        M.ADV_ABS_MEAN: a.abs().mean().item(),
        M.ADV_ZERO_FRAC: (a == 0).double().mean().item(),
    }
