"""The objective's settings: one validated object, and the named presets (grpo, dr_grpo, dapo, gspo, cispo, sapo,
luspo, vespo, lite_ppo, ngrpo, gmpo, dppo_tv, dppo_kl, gpg, ...)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator

from trainer.config import STRICT
from trainer.objective.registry import (
    ADVANTAGES,
    AGGREGATIONS,
    COMPONENT_ADVANTAGES,
    KL_ESTIMATORS,
    KL_GRADIENTS,
    LENGTH_REWARDS,
    ONE_RESPONSE_ADVANTAGES,
    PF_PPO_WEIGHTS,
    RATIO_BAND_REJECTIONS,
    RATIOS,
    ROLLOUT_CORRECTIONS,
    ROLLOUT_REJECTIONS,
    SURROGATES,
    TOKEN_ADVANTAGES,
    Registry,
)


class ObjectiveSettings(BaseModel):
    """Every switch of the GRPO-family objective. No field has a default: start from
    `ObjectiveSettings.preset(name, **overrides)` or spell every field out."""

    model_config = STRICT

    advantage: str
    """Advantage estimator: group_std (GRPO), group_mean (Dr. GRPO: no std), batch_std (TRL
    "batch", Lite PPO: group mean, batch std), group_median_mad (MC-GRPO as released: median, MAD scale,
    per-group rescale), group_median (its median-centred ablation), batch_norm (REINFORCE++: batch mean and
    std, no group baseline), group_mean_batch_norm (REINFORCE++ w/ baseline), ngrpo (NGRPO: a virtual
    maximum-reward sample in each group's mean and std; needs reward_range), bnpo (BNPO: divided by a Beta
    density that follows the success rate; needs reward_range), stratified (Stratified GRPO: mean and std within
    each stratum of the group; needs stratum_key), gpg (GPG: the group-mean advantage times B/(B − M), M the
    responses of flat groups), gpg_nonzero (verl's GPG: times B/#non-zero rewards), remax (ReMax: R minus the reward of
    one greedy response to the prompt, which the loop generates each step and never trains on), poise (POISE: R minus
    the mean of the other responses' values, each predicted by a probe on the policy's own hidden states; needs the
    poise_* fields and reward_range), gdpo (GDPO: each of reward_components normalised within its group, weighted,
    summed, whitened over the batch's responses; TRL's normalize_then_sum), gdpo_tokens (the same whitened over the
    batch's tokens: verl's gdpo), spo (SPO: R minus the prompt's success rate from the trainer's persistent
    KL-adaptive tracker, whitened over the batch; needs the spo_* fields), optimal_token_baseline (OTB: one baseline per
    token position of the group, the rewards weighted by each path's cumulative 1 − 2π + Σ_v π² under the policy before
    the update, which the loop reads in one forward; verl's optimal_token_baseline and, on single-turn responses, its
    tir_optimal_token_baseline). The std switch of the Dr. GRPO ablation."""
    adv_eps: float = Field(ge=0)
    """ε added to the std in group_std, batch_std, batch_norm, group_mean_batch_norm, ngrpo and stratified (TRL 1e-4,
    verl 1e-6), and to optimal_token_baseline's sum of weights (verl 1e-8); flat groups get 0 regardless (but under
    batch_norm and ngrpo, see there)."""
    reward_range: tuple[float, float] | None = Field(strict=False)
    """(lowest, highest) reward the task gives, finite, low < high (the toy's and math's [0, 1]): ngrpo's virtual
    sample has the highest (NGRPO's r_max, arXiv 2509.18851), bnpo maps rewards onto [0, 1] with it (arXiv
    2506.02864), and a reward outside it fails the step; poise clips its probe's predictions to it (the authors'
    [0, 1], arXiv 2605.07579). Set exactly when advantage is ngrpo, bnpo or poise."""
    bnpo_params: tuple[float, float] | None = Field(strict=False)
    """BNPO's (α, β), each > 0 and finite, fixed for the whole run: (1, 1) is REINFORCE with the group baseline,
    (1.5, 1.5) GRPO's advantage with the population std, times π/8. null = the paper's rule, re-estimated each
    batch: (1 + a/3, 1 + b/3), (a, b) the method-of-moments Beta fit of the groups' success rates (arXiv
    2506.02864). Only with advantage bnpo."""
    ngrpo_single: Literal["virtual", "unit"]
    """NGRPO for a group of one response: virtual (the virtual maximum-reward sample makes two values: mean and
    std over them) or unit (the authors' code: mean 0, std 1, so A = R/(1 + ε); the `ngrpo` preset). Only with
    advantage ngrpo."""
    bnpo_max_weight: float | None = Field(gt=0, allow_inf_nan=False)
    """The largest 1/f BNPO weighs an advantage by (the authors' code caps it at 1e6, the `bnpo` preset too): a
    group whose success rate lies where the Beta density is near 0 otherwise gets an unbounded weight (100 groups at
    p = ½ and one at ⅛ give that one 4.4e9). null = no cap. Only with advantage bnpo."""
    stratum_key: str | None = Field(min_length=1)
    """The per-response property whose values are the strata of advantage stratified (Stratified GRPO, arXiv
    2510.06214): each response's value is its grade's `info[key]`, else its group's `meta[i][key]`; equal values, one
    stratum. The toy reports hidden_digit (the prompt hid a digit), hidden_operand, hidden_place, answered and
    filler_tokens (random_reward too when set); a key the task does not report is an error (at validation for the
    toy, at the first step otherwise). Set exactly when advantage is stratified."""
    stratum_blend: float = Field(ge=0, le=1)
    """α, the weight of the stratified term in Stratified GRPO's blend α·A_SAN + (1 − α)·A_GRPO (arXiv 2510.06214:
    SAN blended with the group's global normalisation for finite samples); 1 = SAN alone. Other than 1 only with
    advantage stratified."""
    poise_depth: float | None = Field(gt=0, le=1)
    """POISE's value probe (advantage poise, arXiv 2605.07579) reads the hidden states output by decoder layer
    round(depth × layers) (at least 1; 1 = the last layer's, which Llama- and Qwen-style models give after the final
    norm). The authors hook decoder layer 19 (0-based) of Qwen3-4B's 36, the output of the 20th: 0.56 (the `poise`
    preset; their OLMo-3-7B config reads the 8th of 32, 0.25). Set exactly when advantage is poise."""
    poise_pool_tokens: int | None = Field(ge=1)
    """n: the probe reads the mean hidden state of the prompt's last n tokens and that of the response's last n (all
    of them when shorter): the authors' `last_n_mean` pooling, n = 10 for Qwen3-4B (32 for OLMo-3-7B). Set exactly
    when advantage is poise."""
    poise_pca_dims: tuple[int, int] | None = Field(strict=False)
    """(prompt, response): the principal components of each pooled hidden state the probe keeps, refit with it on its
    buffer at every fit (at most the buffer's rows and the hidden size); 0 keeps the whole hidden state. The authors'
    Qwen3-4B (32, 64). Set exactly when advantage is poise."""
    poise_ridge_alpha: float | None = Field(gt=0, allow_inf_nan=False)
    """α of the probe's ridge regression on its standardised features (the authors' 100). Set exactly when advantage
    is poise."""
    poise_buffer_rows: int | None = Field(ge=2, le=1 << 20)
    """The most responses the probe is fit on: the newest whole prompt groups of the steps so far, the oldest dropped
    first (the authors' recent-rollout buffer, 4096 rows for math). Set exactly when advantage is poise."""
    poise_bootstrap_steps: int | None = Field(ge=1, le=1_000_000)
    """RL steps before the probe's first fit: meanwhile the baseline is the other responses' mean reward (RLOO), and
    each step's responses fill the buffer; the probe is fit after that many steps, then refit after every step (the
    authors' scratch bootstrap, 16 steps). Set exactly when advantage is poise."""
    spo_rho_min: float | None = Field(ge=0, lt=1)
    """SPO's value tracker (advantage spo, arXiv 2509.13232; trainer/value_tracker.py): the lowest forgetting factor
    ρ the KL-adaptive rule may give, and 1/(1 − ρ_min) the effective count of observations a tracker starts with after
    its initial samples (the authors' `rho.clip_lower` 0.875: 8). Set exactly when advantage is spo."""
    spo_rho_max: float | None = Field(gt=0, le=1)
    """The highest forgetting factor ρ (the authors' 0.96, also what a prompt seen for the first time gets). At least
    spo_rho_min. Set exactly when advantage is spo."""
    spo_d_half: float | None = Field(gt=0, allow_inf_nan=False)
    """D_half of the KL-adaptive rule ρ = 2^(−D/D_half), D the mean |Δ log π| over the tokens of the prompt's last
    response between the policy after its last visit and the policy now: a drift of D_half halves the old evidence's
    weight (the authors' 0.06). Set exactly when advantage is spo."""
    spo_init_samples: int | None = Field(ge=0, le=1024)
    """n0: responses sampled for each prompt of the pool (rollout.prompt_pool) from the initial policy before the first
    step, whose success count s sets the prompt's tracker to α = (s + ½)/(n0 + 1)·N, β = (n0 − s + ½)/(n0 + 1)·N,
    N = 1/(1 − spo_rho_min) (the authors' offline values, `offline_N` 8); 0 = none, every prompt starts at α = β = ½.
    Above 0 needs rollout.prompt_pool. Set exactly when advantage is spo."""
    spo_rho: float | None = Field(ge=0, le=1)
    """A constant forgetting factor in place of the KL-adaptive rule (the authors' `rho.type: constant`); null (the
    paper's) = ρ = clip(2^(−D/D_half), spo_rho_min, spo_rho_max). Only with advantage spo."""
    reward_components: tuple[str, ...] | None = Field(strict=False, min_length=1)
    """The reward components GDPO (advantage gdpo or gdpo_tokens, arXiv 2601.05242) normalises each within its group
    before summing them (verl's `algorithm.gdpo_reward_keys`, TRL's one reward function per component): `reward` (the
    task's reward), `overlong` (DAPO's soft overlong punishment, which then enters as its own component instead of
    being added to the reward: needs overlong_penalty, which under GDPO must be named here), or a component the task
    grades (the toy: format, 1 iff an answer `>digits;` was written). Distinct names; a component the task does not
    grade is an error (at validation for the toy, at the first step otherwise). Set exactly when advantage is gdpo or
    gdpo_tokens."""
    reward_weights: tuple[float, ...] | None = Field(strict=False, min_length=1)
    """GDPO's weight w_k of each reward component after its group normalisation (verl's
    `algorithm.gdpo_reward_weights`, TRL's `reward_weights`), finite, one per reward_components entry in its order;
    null = 1 each (both references' default). Only with reward_components."""
    aggregation: str
    """Loss aggregation, the length-normalisation switch: seq_mean_token_mean (GRPO), token_mean
    (DAPO), constant (Dr. GRPO, needs max_len), seq_mean_token_sum (verl)."""
    max_len: int | None = Field(gt=0)
    """L_max, the generation budget in tokens: the constant normaliser and the soft overlong
    punishment use it. A run fills it from its max_new_tokens when left null."""
    ratio: str
    """Importance-ratio level: token (PPO/GRPO), sequence (GSPO), sequence_token (GSPO-token), sequence_product
    (Π_t r_t, the whole response's ratio: TRL's RLOOTrainer). Ratio-level clipping only acts when the policy moves
    between sampling and update (several optimiser steps per rollout batch)."""
    surrogate: str
    """The clipping form, how the ratio enters the loss: clip (PPO's clipped surrogate; GRPO, DAPO, GSPO), cispo
    (MiniMax-M1: the ratio capped at 1 + clip_high and detached, times A·log π), sapo (a smooth gate in place of
    the clip, temperatures `sapo_temperature`), vespo (a Gamma weight of the sequence's ratio, `vespo_k` and
    `vespo_lambda`), kl_cov (KL-Cov: the unclipped ratio, with a |log r| penalty on the tokens of highest
    covariance, `kl_cov_ratio` and `kl_cov_coef`), gmpo (GMPO: the geometric mean of the token ratios, each
    clipped in log space to [−clip_low, clip_high]; one loss per response, needs seq_mean_token_mean), dppo_tv and
    dppo_kl (DPPO: −A·sg(min(r, c))·log π on the tokens inside a TV or binary-KL trust region, `dppo_bounds` and
    `dppo_ratio_cap`), dro (−A·log π + ½β(log r)², `dro_beta`), gpg (GPG: −A·log π, no ratio). vespo, gmpo, dppo_*,
    dro and gpg read the tokens' own probabilities: they need ratio token."""
    clip_low: float = Field(ge=0, lt=1)
    """ε_low: the ratio is clipped below at 1 − ε_low (0.2; GSPO 3e-4); GMPO clips each token's log-ratio below at
    −ε_low (its paper's 0.4). Used by the clip and gmpo surrogates only."""
    clip_high: float = Field(ge=0)
    """ε_high: the ratio is clipped above at 1 + ε_high (0.2; DAPO clip-higher 0.28; GSPO 4e-4); CISPO caps its
    weight at 1 + ε_high (ScaleRL's cap 5 is ε_high 4); GMPO clips each token's log-ratio above at ε_high (0.4)."""
    dppo_bounds: tuple[float, float] | None = Field(strict=False)
    """DPPO's trust region (δ_low, δ_high), each > 0 (arXiv 2602.04879): a token with A > 0 leaves the loss once
    its divergence from π_old exceeds δ_high while π rose, one with A ≤ 0 once it exceeds δ_low while π fell; the
    divergence is π − π_old under dppo_tv (the recipe's 0.15), the binary KL under dppo_kl (0.05). Set exactly when
    surrogate is dppo_tv or dppo_kl."""
    dppo_ratio_cap: float | None = Field(gt=0, allow_inf_nan=False)
    """c of DPPO's truncated importance weight sg(min(r, c)) (verl's `clip_ratio_c`; the authors' recipe 10000, so
    nearly never binding: their §5.4 warns that a low cap biases the gradient). Set exactly when surrogate is
    dppo_tv or dppo_kl."""
    dro_beta: float | None = Field(gt=0, allow_inf_nan=False)
    """β of DRO's quadratic penalty ½β(log π − log π_old)² on every loss token (verl's `policy_loss.dro_beta`, its
    PR's example 0.05). Set exactly when surrogate is dro."""
    sapo_temperature: tuple[float, float] | None = Field(strict=False)
    """SAPO's gate temperatures (τ for A > 0, τ for A < 0), each > 0 (the paper's 1.0 and 1.05); null unless
    surrogate is sapo."""
    vespo_k: tuple[float, float] | None = Field(strict=False)
    """VESPO's Gamma shape k (for A ≥ 0, for A < 0), each > 0 (2 and 3); null unless surrogate is vespo."""
    vespo_lambda: tuple[float, float] | None = Field(strict=False)
    """VESPO's Gamma rate λ (for A ≥ 0, for A < 0), each > 0 (3 and 2); null unless surrogate is vespo."""
    dual_clip: float | None = Field(gt=1)
    """Dual-clip constant c > 1: for A < 0 the loss is capped at −c·A (verl 3, DAPO recipe 10); null = off."""
    kl_coef: float = Field(ge=0)
    """β, weight of the per-token KL to the reference policy added to the loss (0 in Dr. GRPO,
    DAPO, TRL). β > 0 needs reference log-probs."""
    kl_estimator: str
    """KL estimator for the loss and the policy/kl metric: k1, k2, k3 (GRPO uses k3) or abs (|log r|, verl's
    `abs`)."""
    kl_gradient: str
    """The gradient of the KL term in the loss: estimator (its own, the default), k2_straight_through (the
    estimator's value with k2's gradient: verl's `k1+`, `k3+`, `abs+`), trl_bias_correction (ρ·k3 with the ratio
    differentiable: TRL's `use_bias_correction_kl`, on by default there; needs k3) or openrlhf_unbiased_gradient (the
    estimator's value, the gradient of sg(min(ρ, 10))·k2: OpenRLHF's `algo.kl.unbiased_gradient`). The last two have
    the same gradient, ρ·log r·∇log π, at the token level. Other than estimator only with kl_coef > 0."""
    kl_reward_coef: float = Field(ge=0, allow_inf_nan=False)
    """β of the KL penalty in the reward (verl's `use_kl_in_reward` with `kl_ctrl.kl_coef`, TRL's RLOOTrainer
    `beta`): each response's reward becomes R_i − β Σ_t kl_t before the advantage, kl_t the estimator
    `kl_reward_estimator` of log π_old(o_t) − log π_ref(o_t); no gradient flows through it. Independent of kl_coef
    (the KL in the loss): both may be on, as in verl. 0 = off (the default, no extra forward); > 0 needs the
    reference policy. See `kl_reward_penalty`."""
    kl_reward_estimator: str
    """The estimator of the KL in the reward: k1 (verl's default `algorithm.kl_penalty: kl`, TRL's RLOOTrainer,
    OpenRLHF's recommendation), k2, k3 or abs. Its own setting, as verl's `kl_penalty` is apart from the loss's
    `kl_loss_type`. Other than k1 only with kl_reward_coef > 0."""
    kl_target: float | None = Field(gt=0, allow_inf_nan=False)
    """Ziegler et al.'s adaptive KL coefficient (arXiv 1909.08593): after each RL step β ← β·(1 + clip(KL/kl_target
    − 1, ±0.2)·n/kl_horizon), n the step's responses; β starts at kl_reward_coef and adapts the KL in the reward
    (verl's `algorithm.kl_ctrl.type: adaptive` with `target_kl`) or, when the reward has none, kl_coef and the KL in
    the loss (OpenRLHF's `algo.kl.target`). null = a fixed β (the default). See trainer/objective/kl_control.py."""
    kl_horizon: int | None = Field(gt=0)
    """H, the controller's horizon in responses (verl's and OpenRLHF's 10000: β moves at most 20 % per H
    responses); set exactly when kl_target is. A batch of n ≥ 5·H responses could drive β to 0 or below: an
    error."""
    kl_cov_ratio: float | None = Field(gt=0, le=1)
    """KL-Cov's k: the share of the batch's loss tokens, those of highest covariance of log π and A, that get the
    |log r| penalty (the paper's 2e-3 for 7B models, 2e-4 for 32B); null unless surrogate is kl_cov."""
    kl_cov_coef: float | None = Field(gt=0)
    """KL-Cov's β, the weight of the penalty (the paper's 1); null unless surrogate is kl_cov."""
    clip_cov_ratio: float | None = Field(gt=0, le=1)
    """Clip-Cov's r: the share of the batch's loss tokens whose gradient is cut, drawn at random among those whose
    covariance of log π and A lies within `clip_cov_bounds` (and that the clip left alone); the paper's 2e-4.
    null = off."""
    clip_cov_bounds: tuple[float, float] | None = Field(strict=False)
    """Clip-Cov's (ω_low, ω_high), the covariance band its tokens are drawn from (the paper's 1 and 5); set exactly
    when clip_cov_ratio is."""
    entropy_coef: float = Field(ge=0)
    """Entropy bonus: the loss minus entropy_coef × the token-mean entropy of the tokens trained on (0 = off).
    With entropy_target set, the coefficient's starting value."""
    entropy_target: float | None = Field(gt=0)
    """Adaptive entropy control (Skywork-OR1): after each optimiser step the coefficient rises by
    entropy_coef_step while the trained tokens' entropy is at or below this target and falls by it above (within
    0 and entropy_coef_max), and the bonus applies only at or below the target. null = a fixed coefficient."""
    entropy_coef_step: float | None = Field(gt=0)
    """Δ of the adaptive control (TRL 0.005); required with entropy_target, else null."""
    entropy_coef_max: float | None = Field(gt=0)
    """Upper bound of the adaptive coefficient (TRL 1.0); required with entropy_target, else null."""
    top_entropy_quantile: float = Field(gt=0, le=1)
    """ρ: train only on the ρ share of loss tokens with the highest entropy (those at or above the batch's 1 − ρ
    quantile; "Beyond the 80/20 rule": 0.2). 1 = every token."""
    off_policy_threshold: float | None = Field(ge=0)
    """δ of DeepSeek-V3.2's off-policy sequence mask: a response with A < 0 whose mean per-token
    log π_rollout − log π_θ exceeds δ is left out of the loss. null = off. Not with a per-token advantage
    (optimal_token_baseline), whose sign changes within a response."""
    rollout_correction: str | None
    """Importance weight for the gap between the rollout engine's and the trainer's log-probabilities,
    w = π_old/π_rollout: token_truncate (truncated IS: w clamped to [rollout_correction_min,
    rollout_correction_max]), token_mask (tokens with w outside them dropped), sequence_truncate or sequence_mask
    (w of the whole response). null = off."""
    rollout_correction_min: float | None = Field(ge=0)
    """Lower bound of the rollout weight (null = none)."""
    rollout_correction_max: float | None = Field(gt=0)
    """Upper bound of the rollout weight (TRL's default 3); required with rollout_correction, else null."""
    rollout_correction_batch_normalize: bool
    """Divide the rollout correction's weight by its mean over the step's rollout batch, taken before any mini-batch
    split and before the rollout rejection: over the loss tokens for token_truncate and token_mask, over the responses
    with a loss token for sequence_truncate and sequence_mask, so that the weights average 1 (a mean not above 1e-8
    leaves them as they are). verl 0.9.1's `rollout_is_batch_normalize` (`compute_rollout_correction_weights`). Needs
    rollout_correction; false = off."""
    rollout_rejection: str | None
    """Rejection of what the rollout engine sampled far from the trainer's probabilities (verl 0.9.1's
    `rollout_correction.rollout_rs`; trainer/objective/rejection.py): a token, or a whole response, whose statistic
    fails leaves the loss and its normalisers (token_mean's token count, seq_mean_token_mean's T_i; B still counts a
    response rejected whole, as verl's `global_batch_size` does). With log r = log π_old − log π_rollout, clamped to
    ±20: token_k1, token_k2 and token_k3 judge each token by k1 = −log r, k2 = ½(log r)² or k3 = r − 1 − log r;
    seq_sum_k1/k2/k3, seq_mean_k1/k2/k3 (seq_mean_k1: verl's Geo-RS, on the geometric-mean ratio) and
    seq_max_k2/k3 each response by the sum, mean or largest of its tokens' values. A k1 statistic is kept within
    [log rollout_rejection_min, log rollout_rejection_max], a k2 or k3 one at or below rollout_rejection_max. Judged
    once per step from π_old before the update. null = off."""
    rollout_rejection_min: float | None = Field(gt=0, allow_inf_nan=False)
    """The lower bound of a k1 criterion (token_k1, seq_sum_k1, seq_mean_k1), on exp(k1) = π_rollout/π_old (the
    response's product of it, its geometric mean): null = 1/rollout_rejection_max, as verl reads a single threshold.
    At most rollout_rejection_max; only with a k1 criterion (verl refuses a lower bound for the others)."""
    rollout_rejection_max: float | None = Field(gt=0, allow_inf_nan=False)
    """The upper bound of the rollout rejection's statistic (verl's `rollout_rs_threshold`, which has no default):
    on exp(k1) for a k1 criterion (verl's Geo-RS presets: 1.001 with a lower 0.999), on the k2 or k3 value
    otherwise (its K3-RS presets: seq_mean_k3 at 0.01). Set exactly when rollout_rejection is; a k1 criterion with a
    bound below 1 needs rollout_rejection_min (1/max would lie above it)."""
    overlong_filter: bool
    """DAPO overlong filtering: truncated responses get loss mask 0."""
    overlong_penalty: bool
    """DAPO soft overlong punishment added to the reward (needs max_len and overlong_cache_len)."""
    overlong_cache_len: int | None = Field(gt=0)
    """L_cache: the last L_cache tokens of the budget are penalised linearly down to −1 (DAPO:
    4096 of 20480). The dapo preset defaults it to max_len // 5, the paper's proportion."""
    length_reward: str | None
    """The reward as a function of each response's correctness and length, in place of the task's reward (its
    correctness alone is read): cosine (the cosine length-scaling reward of arXiv 2502.03373, TRL's
    `get_cosine_scaled_reward`): R = r_L + ½(r_0 − r_L)(1 + cos(π·min(T/L_max, 1))), (r_0, r_L) = cosine_correct for
    a correct response and cosine_wrong for a wrong one, L_max = max_len. The soft overlong punishment is added to it
    when overlong_penalty is on. Not under gdpo (which reads reward_components). null = the task's reward (the
    default). See trainer/objective/length_rewards.py."""
    cosine_correct: tuple[float, float] | None = Field(strict=False)
    """(r_0, r_L), finite: a correct response's cosine reward at length 0 and at length max_len; r_0 > r_L favours
    the short ones (TRL's defaults (1, 0.5), the paper's §4.2 run (2, 1)). Set exactly when length_reward is
    cosine."""
    cosine_wrong: tuple[float, float] | None = Field(strict=False)
    """(r_0, r_L), finite: a wrong response's cosine reward at length 0 and at length max_len; r_0 < r_L penalises the
    short ones more, so that length is spent on what is not yet solved (TRL's (−1, −0.5), the paper's (−10, 0)). A
    response cut off without end-of-sequence is wrong. Set exactly when length_reward is cosine."""
    cosine_exceed: float | None = Field(allow_inf_nan=False)
    """r_e: the reward of a response cut off without end-of-sequence, in place of its cosine reward (the paper's
    exceed-length penalty, −10 in its §4.2 run); null = none, as TRL: it is a wrong response at length max_len. Only
    with length_reward cosine."""
    dynamic_sampling: bool
    """DAPO dynamic sampling: drop groups whose values are all equal and sample more prompts."""
    dynamic_sampling_key: Literal["reward", "correct"]
    """What must vary within a group to keep it: the (shaped) reward, or correctness (DAPO's recipe)."""
    dynamic_sampling_drop: Literal["flat", "all_best"]
    """Which groups dynamic sampling drops: flat (every value equal: DAPO) or all_best (every value the best, all
    correct: NGRPO's `filter_groups.strategy=all_correct`, which keeps all-wrong groups for their signal)."""
    pf_ppo_reweight: str | None
    """PF-PPO (arXiv 2409.06957; verl's `algorithm.use_pf_ppo` with `pf_ppo.reweight_method`): after the advantages,
    the optimisation batch's n responses are replaced by n draws with replacement, each response drawn with
    probability proportional to a weight of its reward over the batch: pow (|R|^k, k = pf_ppo_weight_pow), max_min (1
    at the batch's highest and lowest rewards, 0 elsewhere) or max_random (0.4 at the highest, 0.1 elsewhere), each
    + 1e-8. The draws come from the run's seed and step. null = off (every response trained once). See
    `trainer.objective.sampling.pf_ppo_resample`."""
    pf_ppo_weight_pow: float | None = Field(gt=0, allow_inf_nan=False)
    """k of PF-PPO's pow weights |R|^k (verl's `pf_ppo.weight_pow`, 2 by default there). Set exactly when
    pf_ppo_reweight is pow."""
    median_pivot: bool
    """MC-GRPO (arXiv 2601.22582): each prompt gets G + 1 responses (G = rollout.group_size, which must be even so
    that the group is odd), the group median is the baseline (needs advantage group_median_mad or group_median), and
    the one response at the median, the pivot, is left out of the update: G responses per prompt carry gradient, and
    every normaliser's B counts only them. false = G responses, all trained."""
    drop_correct: bool
    """NSR (arXiv 2506.01347, the authors' `batch.subset(incorrect_idx)`): the correct responses leave the
    optimisation batch, as MC-GRPO's pivot does, so B counts the wrong responses only and `token_mean` their tokens
    (the authors' verl token mean over the responses kept). A step whose responses are all correct trains nothing.
    false = every response trained."""
    positive_weight: float | None = Field(ge=0, le=1)
    """λ, the weight of responses with A > 0 in the policy loss (responses with A ≤ 0 weigh 1): 0 trains on the
    negative samples only (NSR), 0.1 is W-REINFORCE's λ (Zhu et al. 2025, arXiv 2506.01347). The normalisers still
    count every response. null = off (every response weighs 1)."""

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> ObjectiveSettings:
        """A named preset (see `PRESETS`) with any field overridden; see `preset_fields`
        for the defaults a preset derives (dapo: overlong_cache_len = max_len // 5)."""
        return cls(**preset_fields(name, overrides))

    @field_validator(
        "advantage",
        "aggregation",
        "ratio",
        "kl_estimator",
        "kl_gradient",
        "kl_reward_estimator",
        "surrogate",
        "rollout_correction",
        "length_reward",
        "pf_ppo_reweight",
        "rollout_rejection",
    )
    @classmethod
    def _registered(cls, name: str | None, info: ValidationInfo) -> str | None:
        registry = _REGISTRIES[info.field_name]
        if name is not None and name not in registry:
            raise ValueError(f"unknown {registry.kind} {name!r}; known: {', '.join(registry.names())}")
        return name

    @model_validator(mode="after")
    def _advantage_parameters(self) -> ObjectiveSettings:
        uses_range = self.advantage in _REWARD_RANGE_ADVANTAGES
        if uses_range != (self.reward_range is not None):
            raise ValueError(
                f"reward_range is set exactly when advantage is {' or '.join(_REWARD_RANGE_ADVANTAGES)} "
                f"(advantage: {self.advantage})"
            )
        if self.reward_range is not None:
            low, high = self.reward_range
            if not low < high:
                raise ValueError(f"reward_range must be (low, high) with low < high, got {list(self.reward_range)}")
        if (self.advantage in _STRATUM_ADVANTAGES) != (self.stratum_key is not None):
            raise ValueError(
                f"stratum_key is set exactly when advantage is {' or '.join(_STRATUM_ADVANTAGES)} "
                f"(advantage: {self.advantage}, stratum_key: {self.stratum_key})"
            )
        if self.stratum_blend != 1 and self.advantage not in _STRATUM_ADVANTAGES:
            raise ValueError(
                f"stratum_blend ({self.stratum_blend:g}) needs advantage {' or '.join(_STRATUM_ADVANTAGES)} "
                f"(advantage: {self.advantage})"
            )
        if self.bnpo_params is not None:
            if self.advantage != "bnpo":
                raise ValueError(f"bnpo_params needs advantage 'bnpo' (advantage: {self.advantage})")
            if min(self.bnpo_params) <= 0:
                raise ValueError(f"bnpo_params must be two Beta parameters > 0, got {list(self.bnpo_params)}")
        if self.ngrpo_single != "virtual" and self.advantage != "ngrpo":
            raise ValueError(f"ngrpo_single needs advantage 'ngrpo' (advantage: {self.advantage})")
        if self.dynamic_sampling_drop != "flat" and not self.dynamic_sampling:
            raise ValueError(f"dynamic_sampling_drop: {self.dynamic_sampling_drop} needs dynamic_sampling: true")
        if self.bnpo_max_weight is not None and self.advantage != "bnpo":
            raise ValueError(f"bnpo_max_weight needs advantage 'bnpo' (advantage: {self.advantage})")
        self._owned_fields(_VALUE_ADVANTAGES, POISE_FIELDS, (), "value probe", "poise")
        self._owned_fields(_TRACKER_ADVANTAGES, SPO_FIELDS, ("spo_rho",), "value tracker", "spo")
        if self.advantage in _TRACKER_ADVANTAGES:
            assert self.spo_rho_min is not None and self.spo_rho_max is not None
            if self.spo_rho_min > self.spo_rho_max:
                raise ValueError(
                    f"spo_rho_min ({self.spo_rho_min:g}) must not exceed spo_rho_max ({self.spo_rho_max:g})"
                )
            if self.overlong_penalty or self.kl_reward_coef > 0:
                raise ValueError(
                    f"advantage {self.advantage} tracks each prompt's success rate from rewards in [0, 1]: "
                    "overlong_penalty and kl_reward_coef move the reward outside it (turn them off)"
                )
        if self.poise_pca_dims is not None and min(self.poise_pca_dims) < 0:
            raise ValueError(
                f"poise_pca_dims must be two component counts >= 0 (0 = no projection), got {list(self.poise_pca_dims)}"
            )
        self._reward_components()
        return self

    def _owned_fields(
        self, owners: tuple[str, ...], required: tuple[str, ...], optional: tuple[str, ...], what: str, preset: str
    ) -> None:
        """Settings that belong to one estimator's component (POISE's probe, SPO's tracker): each of `required` set
        under those advantages, and none of them nor of `optional` under any other."""
        if self.advantage in owners:
            missing = [name for name in required if getattr(self, name) is None]
            if missing:
                raise ValueError(
                    f"advantage {self.advantage} needs {', '.join(missing)} (its {what}'s settings; the preset "
                    f"{preset} sets them all)"
                )
            return
        given = [name for name in (*required, *optional) if getattr(self, name) is not None]
        if given:
            raise ValueError(f"{', '.join(given)} set the {what} of advantage {preset} (advantage: {self.advantage})")

    def _reward_components(self) -> None:
        """GDPO's components and weights: set exactly under its estimators, each named once, the overlong punishment
        one of them when on (else it would leave the advantage unread), and no KL in the reward (not a component)."""
        gdpo = self.advantage in COMPONENT_ADVANTAGES
        names = self.reward_components
        if gdpo != (names is not None):
            raise ValueError(
                f"reward_components is set exactly when advantage is {' or '.join(COMPONENT_ADVANTAGES)} "
                f"(advantage: {self.advantage})"
            )
        if self.reward_weights is not None:
            if names is None:
                raise ValueError("reward_weights needs reward_components (one weight per component)")
            if len(self.reward_weights) != len(names):
                raise ValueError(
                    f"reward_weights has {len(self.reward_weights)} weights for {len(names)} reward_components "
                    f"({', '.join(names)})"
                )
        if names is None:
            return
        if len(set(names)) != len(names) or not all(names):
            raise ValueError(f"reward_components must be distinct non-empty names, got {list(names)}")
        if OVERLONG_COMPONENT in names and not self.overlong_penalty:
            raise ValueError("reward_components names overlong: it needs overlong_penalty: true")
        if self.overlong_penalty and OVERLONG_COMPONENT not in names:
            raise ValueError(
                f"overlong_penalty under advantage {self.advantage} is one of its reward components: add overlong to "
                f"reward_components ({', '.join(names)})"
            )
        if self.kl_reward_coef > 0:
            raise ValueError(
                f"kl_reward_coef ({self.kl_reward_coef:g}): advantage {self.advantage} normalises the reward's "
                "components, not the reward, so a KL in the reward would go unread (set kl_coef for a KL in the loss)"
            )

    @model_validator(mode="after")
    def _combinations(self) -> ObjectiveSettings:
        if self.aggregation == "constant" and self.max_len is None:
            raise ValueError("max_len is required when aggregation is 'constant' (Dr. GRPO divides by B·L_max)")
        if self.overlong_penalty:
            if self.max_len is None or self.overlong_cache_len is None:
                raise ValueError("overlong_penalty needs both max_len and overlong_cache_len")
            if self.overlong_cache_len > self.max_len:
                raise ValueError(
                    f"overlong_cache_len ({self.overlong_cache_len}) must not exceed max_len ({self.max_len})"
                )
        for field, owner in (("sapo_temperature", "sapo"), ("vespo_k", "vespo"), ("vespo_lambda", "vespo")):
            value = getattr(self, field)
            if (self.surrogate == owner) != (value is not None):
                raise ValueError(f"{field} is set exactly when surrogate is '{owner}' (surrogate: {self.surrogate})")
            if value is not None and min(value) <= 0:
                raise ValueError(f"{field} must be two values > 0, got {list(value)}")
        on = self.surrogate == "kl_cov"
        if on != (self.kl_cov_ratio is not None) or on != (self.kl_cov_coef is not None):
            raise ValueError("kl_cov_ratio and kl_cov_coef are set exactly when surrogate is 'kl_cov'")
        if (self.clip_cov_ratio is None) != (self.clip_cov_bounds is None):
            raise ValueError("clip_cov_ratio and clip_cov_bounds are set together or not at all")
        if self.clip_cov_bounds is not None and not self.clip_cov_bounds[0] < self.clip_cov_bounds[1]:
            raise ValueError(f"clip_cov_bounds must be (low, high) with low < high, got {list(self.clip_cov_bounds)}")
        if self.kl_reward_estimator != "k1" and self.kl_reward_coef == 0:
            raise ValueError(
                f"kl_reward_estimator ({self.kl_reward_estimator}) needs kl_reward_coef > 0 (the reward has no KL)"
            )
        self._kl_forms()
        if self.dual_clip is not None and self.surrogate != "clip":
            raise ValueError(f"dual_clip caps the clip surrogate's loss; surrogate '{self.surrogate}' has no clip")
        if self.surrogate in TOKEN_RATIO_SURROGATES and self.ratio != "token":
            raise ValueError(
                f"surrogate '{self.surrogate}' reads each token's own probabilities: it needs ratio 'token' "
                f"(ratio: {self.ratio})"
            )
        dppo = self.surrogate in ("dppo_tv", "dppo_kl")
        if dppo != (self.dppo_bounds is not None) or dppo != (self.dppo_ratio_cap is not None):
            raise ValueError(
                f"dppo_bounds and dppo_ratio_cap are set exactly when surrogate is 'dppo_tv' or 'dppo_kl' "
                f"(surrogate: {self.surrogate})"
            )
        if self.dppo_bounds is not None and not min(self.dppo_bounds) > 0:
            raise ValueError(f"dppo_bounds must be two divergences > 0, got {list(self.dppo_bounds)}")
        if (self.surrogate == "dro") != (self.dro_beta is not None):
            raise ValueError(f"dro_beta is set exactly when surrogate is 'dro' (surrogate: {self.surrogate})")
        if self.surrogate == "gmpo":
            if self.aggregation != "seq_mean_token_mean":
                raise ValueError(
                    f"surrogate 'gmpo' is one loss per response, averaged over responses: it needs aggregation "
                    f"'seq_mean_token_mean' (aggregation: {self.aggregation})"
                )
            if self.top_entropy_quantile < 1 or self.clip_cov_ratio is not None:
                raise ValueError(
                    "surrogate 'gmpo' is one loss per response: a per-token mask (top_entropy_quantile < 1, "
                    "clip_cov_ratio) does not apply to it"
                )
        adaptive = (self.entropy_target, self.entropy_coef_step, self.entropy_coef_max)
        if any(v is not None for v in adaptive) and any(v is None for v in adaptive):
            raise ValueError("entropy_target, entropy_coef_step and entropy_coef_max are set together or not at all")
        if self.entropy_coef_max is not None and self.entropy_coef > self.entropy_coef_max:
            raise ValueError(
                f"entropy_coef ({self.entropy_coef:g}) exceeds entropy_coef_max ({self.entropy_coef_max:g})"
            )
        if self.off_policy_threshold is not None and self.advantage in TOKEN_ADVANTAGES:
            raise ValueError(
                f"off_policy_threshold masks a response by the sign of its advantage; advantage {self.advantage} "
                "gives each token its own"
            )
        if (self.rollout_correction is None) != (self.rollout_correction_max is None):
            raise ValueError("rollout_correction_max is set exactly when rollout_correction is")
        if self.rollout_correction is None and self.rollout_correction_min is not None:
            raise ValueError("rollout_correction_min needs rollout_correction")
        low, high = self.rollout_correction_min, self.rollout_correction_max
        if low is not None and high is not None and low >= high:
            raise ValueError(f"rollout_correction_min ({low:g}) must be below rollout_correction_max ({high:g})")
        self._rollout_rejection()
        if self.advantage == "group_median_mad" and self.adv_eps <= 0:
            raise ValueError(
                "adv_eps must be above 0 for advantage group_median_mad (a group with one odd response out has MAD 0; "
                "the authors' ε is 1e-3)"
            )
        if self.median_pivot and self.advantage not in MEDIAN_ADVANTAGES:
            raise ValueError(
                f"median_pivot: true needs advantage {' or '.join(map(repr, MEDIAN_ADVANTAGES))} (the pivot is the "
                f"group's median response; advantage: {self.advantage})"
            )
        return self

    @model_validator(mode="after")
    def _reward_shaping(self) -> ObjectiveSettings:
        """The length reward's values (set exactly under it, within the rewards the advantage reads) and
        PF-PPO's exponent (set exactly under its pow weights)."""
        cosine = self.length_reward == "cosine"
        for field in ("cosine_correct", "cosine_wrong"):
            value = getattr(self, field)
            if cosine != (value is not None):
                raise ValueError(
                    f"{field} is set exactly when length_reward is 'cosine' (length_reward: {self.length_reward})"
                )
        if self.cosine_exceed is not None and not cosine:
            raise ValueError(f"cosine_exceed needs length_reward 'cosine' (length_reward: {self.length_reward})")
        if self.length_reward is not None:
            self._length_reward_fits()
        if (self.pf_ppo_reweight == "pow") != (self.pf_ppo_weight_pow is not None):
            raise ValueError(
                f"pf_ppo_weight_pow is set exactly when pf_ppo_reweight is 'pow' (pf_ppo_reweight: "
                f"{self.pf_ppo_reweight})"
            )
        return self

    def _length_reward_fits(self) -> None:
        """A length reward needs L_max, is not read under GDPO, and must stay within the rewards the advantage
        takes (reward_range; SPO's success rates in [0, 1])."""
        name = self.length_reward
        if self.max_len is None:
            raise ValueError(f"length_reward {name} needs max_len (L_max, the length its schedule ends at)")
        if self.advantage in COMPONENT_ADVANTAGES:
            raise ValueError(
                f"length_reward {name} under advantage {self.advantage} would go unread: it normalises "
                "reward_components, not the reward (turn length_reward off)"
            )
        if self.reward_range is not None:
            bounds, why = self.reward_range, "reward_range"
        elif self.advantage in _TRACKER_ADVANTAGES:
            bounds, why = (0.0, 1.0), "its tracker's success rates"
        else:
            return
        values = [*(self.cosine_correct or ()), *(self.cosine_wrong or ())]
        values += [] if self.cosine_exceed is None else [self.cosine_exceed]
        outside = [v for v in values if not bounds[0] <= v <= bounds[1]]
        if outside:
            raise ValueError(
                f"length_reward {name} gives rewards outside [{bounds[0]:g}, {bounds[1]:g}] ({outside[0]:g}), which "
                f"advantage {self.advantage} reads as {why}: set cosine_correct, cosine_wrong and cosine_exceed "
                "within it"
            )

    def _rollout_rejection(self) -> None:
        """The rollout rejection's bounds (verl's `rollout_rs_threshold` rules) and the weights' batch mean."""
        if self.rollout_correction_batch_normalize and self.rollout_correction is None:
            raise ValueError(
                "rollout_correction_batch_normalize divides the rollout correction's weights by their mean: it needs "
                "rollout_correction"
            )
        criterion, low, high = self.rollout_rejection, self.rollout_rejection_min, self.rollout_rejection_max
        if (criterion is None) != (high is None):
            raise ValueError("rollout_rejection_max is set exactly when rollout_rejection is")
        if criterion is None:
            if low is not None:
                raise ValueError("rollout_rejection_min needs rollout_rejection")
            return
        assert high is not None
        band = criterion in RATIO_BAND_REJECTIONS
        if low is not None and not band:
            raise ValueError(
                f"rollout_rejection_min bounds a k1 criterion ({', '.join(RATIO_BAND_REJECTIONS)}) from below; "
                f"rollout_rejection {criterion} keeps a divergence at or below rollout_rejection_max only"
            )
        if low is not None and low > high:
            raise ValueError(f"rollout_rejection_min ({low:g}) must not exceed rollout_rejection_max ({high:g})")
        if band and low is None and high < 1:
            raise ValueError(
                f"rollout_rejection_max ({high:g}) below 1 with no rollout_rejection_min: the k1 band "
                f"[1/max, max] = [{1 / high:g}, {high:g}] is empty (set rollout_rejection_min)"
            )

    def _kl_forms(self) -> None:
        """The KL term's gradient form and the adaptive coefficient: each needs the KL it shapes."""
        if self.kl_gradient != "estimator" and self.kl_coef == 0:
            raise ValueError(f"kl_gradient ({self.kl_gradient}) shapes the KL in the loss: it needs kl_coef > 0")
        if self.kl_gradient == "trl_bias_correction" and self.kl_estimator != "k3":
            raise ValueError(f"kl_gradient trl_bias_correction weighs TRL's k3 (kl_estimator: {self.kl_estimator})")
        if self.kl_gradient == "k2_straight_through" and self.kl_estimator == "k2":
            raise ValueError("kl_gradient k2_straight_through with kl_estimator k2 is k2's own gradient: use estimator")
        if (self.kl_target is None) != (self.kl_horizon is None):
            raise ValueError("kl_target and kl_horizon are set together or not at all")
        if self.kl_target is not None and not self.needs_reference:
            raise ValueError("kl_target adapts the KL's β: it needs kl_reward_coef > 0 or kl_coef > 0")

    @property
    def per_sequence_ratio(self) -> bool:
        """Whether the ratio (and so clipping) acts per sequence."""
        return bool(RATIOS.meta(self.ratio)["per_sequence"])

    @property
    def needs_reference(self) -> bool:
        """Whether the objective reads the reference policy's log-probs: a KL in the loss or in the reward."""
        return self.kl_coef > 0 or self.kl_reward_coef > 0

    @property
    def entropy_bonus(self) -> bool:
        """Whether the loss carries an entropy term (so the entropy needs its gradient)."""
        return self.entropy_coef > 0 or self.entropy_target is not None

    @property
    def needs_batch_entropy(self) -> bool:
        """Whether the loss needs the whole optimisation batch's entropies first (the top-entropy quantile)."""
        return self.top_entropy_quantile < 1

    @property
    def needs_batch_covariance(self) -> bool:
        """Whether the loss picks tokens by the covariance of log π and A over the whole batch (Clip-Cov, KL-Cov)."""
        return self.clip_cov_ratio is not None or self.kl_cov_ratio is not None

    @property
    def needs_rollout_gap(self) -> bool:
        """Whether the loss reads π_old against the rollout engine over the whole rollout batch before its
        mini-batches: the rollout rejection, or the rollout correction's weights normalised by their batch mean."""
        return self.rollout_rejection is not None or self.rollout_correction_batch_normalize

    @property
    def needs_greedy(self) -> bool:
        """Whether the advantage needs one greedy (temperature-0) response per prompt, graded and not trained on
        (ReMax's baseline): what the estimator registered (`needs_greedy`)."""
        return bool(ADVANTAGES.meta(self.advantage).get("needs_greedy", False))

    @property
    def needs_values(self) -> bool:
        """Whether the advantage needs each response's value from the policy's internal states, predicted by the
        trainer's value probe (POISE's baseline): what the estimator registered (`needs_values`)."""
        return bool(ADVANTAGES.meta(self.advantage).get("needs_values", False))

    @property
    def needs_prompt_values(self) -> bool:
        """Whether the advantage needs each prompt's value from the trainer's persistent per-prompt tracker (SPO's
        baseline): what the estimator registered (`needs_prompt_values`)."""
        return bool(ADVANTAGES.meta(self.advantage).get("needs_prompt_values", False))

    @property
    def needs_token_probs(self) -> bool:
        """Whether the advantage needs each response token's probability and its position's Σ_v π² under the policy
        before the update (the optimal token baseline's energy): what the estimator registered (`needs_token_probs`)."""
        return bool(ADVANTAGES.meta(self.advantage).get("needs_token_probs", False))

    @property
    def tracks_prompts(self) -> bool:
        """Whether the advantage's baseline is the trainer's per-prompt value tracker (the spo_* fields), by name, so
        that validating a config imports no torch."""
        return self.advantage in _TRACKER_ADVANTAGES

    @property
    def one_response(self) -> bool:
        """Whether the advantage has a signal with one response per prompt: its baseline is not the group's own
        rewards (a group of one is flat, and a group baseline gives it 0): `ONE_RESPONSE_ADVANTAGES`."""
        return self.advantage in ONE_RESPONSE_ADVANTAGES

    @property
    def extra_samples(self) -> int:
        """Responses a group draws beyond rollout.group_size: 1 under MC-GRPO's median pivot, not trained on."""
        return 1 if self.median_pivot else 0


OVERLONG_COMPONENT = "overlong"
"""The reward component that is DAPO's soft overlong punishment (objective.overlong_penalty), for GDPO."""
TASK_REWARD_COMPONENT = "reward"
"""The reward component that is the task's reward itself (a grade's `reward`), for GDPO."""

_REWARD_RANGE_ADVANTAGES = ("ngrpo", "bnpo", "poise")
"""The advantage estimators that read reward_range."""

_VALUE_ADVANTAGES = ("poise",)
"""The advantage estimators whose baseline is the trainer's value probe (the poise_* fields)."""

POISE_FIELDS = (
    "poise_depth",
    "poise_pool_tokens",
    "poise_pca_dims",
    "poise_ridge_alpha",
    "poise_buffer_rows",
    "poise_bootstrap_steps",
)
"""The value probe's settings: set exactly when the advantage is poise."""

_TRACKER_ADVANTAGES = ("spo",)
"""The advantage estimators whose baseline is the trainer's per-prompt value tracker (the spo_* fields)."""

SPO_FIELDS = ("spo_rho_min", "spo_rho_max", "spo_d_half", "spo_init_samples")
"""The value tracker's settings: set exactly when the advantage is spo (spo_rho, a constant ρ, optional there)."""

_STRATUM_ADVANTAGES = ("stratified",)
"""The advantage estimators that read each response's stratum (stratum_key)."""

TOKEN_RATIO_SURROGATES = ("vespo", "gmpo", "dppo_tv", "dppo_kl", "dro", "gpg")
"""The surrogates that compute from each token's own log-ratio or log-probability: they need ratio token."""

MEDIAN_ADVANTAGES = ("group_median_mad", "group_median")
"""The advantage estimators with a median baseline, whose median response median_pivot leaves out."""

_REGISTRIES: dict[str, Registry] = {
    "advantage": ADVANTAGES,
    "aggregation": AGGREGATIONS,
    "ratio": RATIOS,
    "kl_estimator": KL_ESTIMATORS,
    "kl_gradient": KL_GRADIENTS,
    "kl_reward_estimator": KL_ESTIMATORS,
    "surrogate": SURROGATES,
    "rollout_correction": ROLLOUT_CORRECTIONS,
    "length_reward": LENGTH_REWARDS,
    "pf_ppo_reweight": PF_PPO_WEIGHTS,
    "rollout_rejection": ROLLOUT_REJECTIONS,
}

_COMMON: dict[str, Any] = dict(
    adv_eps=1e-6,
    reward_range=None,
    bnpo_params=None,
    bnpo_max_weight=None,
    stratum_key=None,
    stratum_blend=1.0,
    reward_components=None,
    reward_weights=None,
    max_len=None,
    dual_clip=None,
    kl_coef=0.0,
    kl_estimator="k3",
    kl_gradient="estimator",
    kl_target=None,
    kl_horizon=None,
    kl_reward_coef=0.0,
    kl_reward_estimator="k1",
    overlong_filter=False,
    overlong_penalty=False,
    overlong_cache_len=None,
    length_reward=None,
    cosine_correct=None,
    cosine_wrong=None,
    cosine_exceed=None,
    dynamic_sampling=False,
    dynamic_sampling_key="correct",
    dynamic_sampling_drop="flat",
    pf_ppo_reweight=None,
    pf_ppo_weight_pow=None,
    ngrpo_single="virtual",
    median_pivot=False,
    drop_correct=False,
    positive_weight=None,
    poise_depth=None,
    poise_pool_tokens=None,
    poise_pca_dims=None,
    poise_ridge_alpha=None,
    poise_buffer_rows=None,
    poise_bootstrap_steps=None,
    spo_rho_min=None,
    spo_rho_max=None,
    spo_d_half=None,
    spo_init_samples=None,
    spo_rho=None,
    surrogate="clip",
    sapo_temperature=None,
    vespo_k=None,
    vespo_lambda=None,
    kl_cov_ratio=None,
    kl_cov_coef=None,
    dppo_bounds=None,
    dppo_ratio_cap=None,
    dro_beta=None,
    clip_cov_ratio=None,
    clip_cov_bounds=None,
    entropy_coef=0.0,
    entropy_target=None,
    entropy_coef_step=None,
    entropy_coef_max=None,
    top_entropy_quantile=1.0,
    off_policy_threshold=None,
    rollout_correction=None,
    rollout_correction_min=None,
    rollout_correction_max=None,
    rollout_correction_batch_normalize=False,
    rollout_rejection=None,
    rollout_rejection_min=None,
    rollout_rejection_max=None,
)
"""Every preset's value of the switches it does not name: off."""

PRESETS: dict[str, dict[str, Any]] = {
    # GRPO (arXiv 2402.03300) as TRL ships it, β = 0 (verl's loss adds a dual clip, c = 3: objective.dual_clip: 3).
    "grpo": {
        **_COMMON,
        "advantage": "group_std",
        "aggregation": "seq_mean_token_mean",
        "ratio": "token",
        "clip_low": 0.2,
        "clip_high": 0.2,
    },
    # Dr. GRPO (arXiv 2503.20783): no std, constant normaliser B·L_max.
    "dr_grpo": {
        **_COMMON,
        "advantage": "group_mean",
        "aggregation": "constant",
        "ratio": "token",
        "clip_low": 0.2,
        "clip_high": 0.2,
    },
    # DAPO (arXiv 2503.14476): clip-higher, token-level loss, dynamic sampling, overlong
    # filtering + soft punishment (overlong_cache_len derived from max_len: see _DERIVED).
    "dapo": {
        **_COMMON,
        "advantage": "group_std",
        "aggregation": "token_mean",
        "ratio": "token",
        "clip_low": 0.2,
        "clip_high": 0.28,
        "dynamic_sampling": True,
        "overlong_filter": True,
        "overlong_penalty": True,
    },
    # GSPO (arXiv 2507.18071): sequence ratio, tiny clip range, mean over sequences.
    "gspo": {
        **_COMMON,
        "advantage": "group_std",
        "aggregation": "seq_mean_token_mean",
        "ratio": "sequence",
        "clip_low": 3e-4,
        "clip_high": 4e-4,
    },
    # CISPO (MiniMax-M1, arXiv 2506.13585, eq. 4): the weight capped and detached, token-level loss; cap 5
    # (ScaleRL, arXiv 2510.13786; TRL's recommended epsilon_high).
    "cispo": {
        **_COMMON,
        "advantage": "group_std",
        "aggregation": "token_mean",
        "ratio": "token",
        "surrogate": "cispo",
        "clip_low": 0.2,
        "clip_high": 4.0,
    },
    # SAPO (arXiv 2511.20347): the soft gate with τ_pos 1.0, τ_neg 1.05, GRPO's per-response mean.
    "sapo": {
        **_COMMON,
        "advantage": "group_std",
        "aggregation": "seq_mean_token_mean",
        "ratio": "token",
        "surrogate": "sapo",
        "sapo_temperature": (1.0, 1.05),
        "clip_low": 0.2,
        "clip_high": 0.2,
    },
    # LUSPO (arXiv 2602.05261): GSPO with each response's loss scaled by its length (sum over its tokens).
    "luspo": {
        **_COMMON,
        "advantage": "group_std",
        "aggregation": "seq_mean_token_sum",
        "ratio": "sequence",
        "clip_low": 3e-4,
        "clip_high": 4e-4,
    },
    # VESPO (arXiv 2602.10693): Gamma weights of the sequence ratio, k 2/3 and λ 3/2 (A ≥ 0 / A < 0), token mean.
    "vespo": {
        **_COMMON,
        "advantage": "group_std",
        "aggregation": "token_mean",
        "ratio": "token",
        "surrogate": "vespo",
        "vespo_k": (2.0, 3.0),
        "vespo_lambda": (3.0, 2.0),
        "clip_low": 0.2,
        "clip_high": 0.2,
    },
    # Lite PPO ("Tricks or Traps?", arXiv 2508.08221): group-mean baseline with the batch's std, token-level
    # loss, vanilla PPO clip; nothing else.
    "lite_ppo": {
        **_COMMON,
        "advantage": "batch_std",
        "aggregation": "token_mean",
        "ratio": "token",
        "clip_low": 0.2,
        "clip_high": 0.2,
    },
    # NGRPO (arXiv 2509.18851; nangongrui-ngr/NGRPO, compute_ngrpo_outcome_advantage and
    # train_qwen2.5-math-7b_ngrpo.sh): advantage calibration by a virtual reward-1 sample (a group of one: mean 0,
    # std 1), asymmetric clip ε_low 0.16 / ε_high 0.24 (looser for A > 0, tighter for A < 0: PPO's clip already lets
    # only ε_high bind at A > 0 and only ε_low at A < 0), token-level loss, and all-correct groups dropped and the
    # batch refilled (their filter_groups.strategy=all_correct: here dynamic sampling dropping all_best groups).
    "ngrpo": {
        **_COMMON,
        "advantage": "ngrpo",
        "ngrpo_single": "unit",
        "dynamic_sampling": True,
        "dynamic_sampling_key": "correct",
        "dynamic_sampling_drop": "all_best",
        "reward_range": (0.0, 1.0),
        "aggregation": "token_mean",
        "ratio": "token",
        "clip_low": 0.16,
        "clip_high": 0.24,
    },
    # MC-GRPO as released (arXiv 2601.22582; lotusroot-kim/MC-GRPO, src/open_r1/grpo_trainer_gsm.py with mc=True,
    # loss_type grpo): G + 1 responses, median baseline scaled by the MAD + 1e-3, each group's non-zero advantages
    # rescaled by (G + 1) / #non-zero, the median response left out, no std scaling. Departs from the authors'
    # release: KL off as in harness's GRPO (their recipes set beta 0.04: objective.kl_coef sets it).
    "mc_grpo": {
        **_COMMON,
        "advantage": "group_median_mad",
        "adv_eps": 1e-3,
        "median_pivot": True,
        "aggregation": "seq_mean_token_mean",
        "ratio": "token",
        "clip_low": 0.2,
        "clip_high": 0.2,
    },
    # BNPO as released (arXiv 2506.02864; changyi7231/BNPO, recipe/bnpo/run.sh and bnpo_ray_trainer.py's
    # compute_bnpo_outcome_advantage): the Beta-normalised advantage with 1/f capped at 1e6, verl's
    # seq-mean-token-sum, clip 0.2 / 0.28, dual clip c = 10, no KL.
    "bnpo": {
        **_COMMON,
        "advantage": "bnpo",
        "reward_range": (0.0, 1.0),
        "bnpo_max_weight": 1e6,
        "aggregation": "seq_mean_token_sum",
        "ratio": "token",
        "clip_low": 0.2,
        "clip_high": 0.28,
        "dual_clip": 10.0,
    },
    # REINFORCE++ as verl 0.9.1 computes it (arXiv 2501.03262; verl's reinforce_plus_plus and
    # reinforce_plus_plus_baseline): the reward whitened over the batch's tokens, without and with the group mean;
    # verl's token-mean loss and clip 0.2, without the dual clip verl's vanilla loss always applies (c = 3: add
    # objective.dual_clip: 3 for verl's exact loss); the KL off (verl's examples put it in the reward:
    # objective.kl_reward_coef).
    "reinforce_pp": {
        **_COMMON,
        "advantage": "batch_norm_tokens",
        "aggregation": "token_mean",
        "ratio": "token",
        "clip_low": 0.2,
        "clip_high": 0.2,
    },
    "reinforce_pp_baseline": {
        **_COMMON,
        "advantage": "group_mean_batch_norm_tokens",
        "aggregation": "token_mean",
        "ratio": "token",
        "clip_low": 0.2,
        "clip_high": 0.2,
    },
    # GMPO (arXiv 2507.20673; verl's examples/gmpo_trainer, TRL's GMPOConfig): the geometric mean of the token
    # ratios, each clipped in log space to [−0.4, 0.4], one loss per response, GRPO's advantage. KL off as in
    # harness's GRPO (verl's example adds a k3 KL in the loss at 0.001: objective.kl_coef).
    "gmpo": {
        **_COMMON,
        "advantage": "group_std",
        "aggregation": "seq_mean_token_mean",
        "ratio": "token",
        "surrogate": "gmpo",
        "clip_low": 0.4,
        "clip_high": 0.4,
    },
    # DPPO-Binary-TV and -KL as their authors' recipe trains them (arXiv 2602.04879; verl's
    # examples/dppo_trainer/run_qwen3_30b_a3b_megatron.sh): GRPO's advantage, δ 0.15 (TV) or 0.05 (KL) both ways,
    # the weight's cap 10000, verl's seq-mean-token-sum-norm (here constant: Σ ℓ / (B·L_max)), no KL.
    "dppo_tv": {
        **_COMMON,
        "advantage": "group_std",
        "aggregation": "constant",
        "ratio": "token",
        "surrogate": "dppo_tv",
        "dppo_bounds": (0.15, 0.15),
        "dppo_ratio_cap": 10000.0,
        "clip_low": 0.2,
        "clip_high": 0.2,
    },
    "dppo_kl": {
        **_COMMON,
        "advantage": "group_std",
        "aggregation": "constant",
        "ratio": "token",
        "surrogate": "dppo_kl",
        "dppo_bounds": (0.05, 0.05),
        "dppo_ratio_cap": 10000.0,
        "clip_low": 0.2,
        "clip_high": 0.2,
    },
    # GPG (arXiv 2504.02546; AMAP-ML/GPG's gpg_trainer.py, verl's examples/gpg_trainer): −A·log π with A = α(R −
    # mean_g), α = B/(B − M), no std, a token mean, no clip, no KL.
    "gpg": {
        **_COMMON,
        "advantage": "gpg",
        "aggregation": "token_mean",
        "ratio": "token",
        "surrogate": "gpg",
        "clip_low": 0.2,
        "clip_high": 0.2,
    },
    # ReMax (arXiv 2310.10505, Algorithm 1; verl's adv_estimator=remax): REINFORCE with the greedy response's reward
    # as the baseline, no std, the paper's Σ_t over a response's tokens averaged over responses, one optimiser step
    # per batch (so the ratio is 1 and the clip inert), no KL in the loss. The paper samples one response per prompt;
    # rollout.group_size is at least 2 here, and each of a prompt's G responses gets the one greedy baseline (verl's
    # rollout.n).
    "remax": {
        **_COMMON,
        "advantage": "remax",
        "aggregation": "seq_mean_token_sum",
        "ratio": "token",
        "clip_low": 0.2,
        "clip_high": 0.2,
    },
    # SPO (arXiv 2509.13232; the authors' verl recipe, recipe/spo: run_spo.sh, config/spo_trainer.yaml,
    # spo_ray_trainer.py): one response per prompt, A = R − v̂(x) from a Beta tracker of the prompt's success rate,
    # whitened over the batch with ε 1e-8; ρ = clip(2^(−D/0.06), 0.875, 0.96); trackers initialised from 8 samples per
    # prompt (offline_N); verl's token mean, clip 0.2 / 0.28, dual clip 10, no KL. The sampling half of the recipe
    # (rollout.group_size: 1, rollout.prompt_pool, rollout.prompt_sampling: value_priority) is the rollout section's.
    "spo": {
        **_COMMON,
        "advantage": "spo",
        "adv_eps": 1e-8,
        "spo_rho_min": 0.875,
        "spo_rho_max": 0.96,
        "spo_d_half": 0.06,
        "spo_init_samples": 8,
        "aggregation": "token_mean",
        "ratio": "token",
        "clip_low": 0.2,
        "clip_high": 0.28,
        "dual_clip": 10.0,
    },
    # POISE (arXiv 2605.07579; holi-lab/POISE: scripts/train/_poise.sh, scripts/train/lib/config.sh,
    # src/poise/config/*_qwen3_4b.json): each response's baseline is its sibling's value, from a probe (PCA 32/64,
    # standardised, ridge α 100, clipped to [0, 1]) on the policy's layer-20-of-36 hidden states (the last 10 tokens of
    # prompt and response, pooled) and its mean token entropy, refit after each step on the newest 4096 responses, RLOO
    # for the first 16 steps; verl's token mean, clip 0.2 / 0.28, dual clip 10, no KL. Their rollout.n is 2 (G ≥ 2 is
    # required here too).
    "poise": {
        **_COMMON,
        "advantage": "poise",
        "reward_range": (0.0, 1.0),
        "poise_depth": 0.56,
        "poise_pool_tokens": 10,
        "poise_pca_dims": (32, 64),
        "poise_ridge_alpha": 100.0,
        "poise_buffer_rows": 4096,
        "poise_bootstrap_steps": 16,
        "aggregation": "token_mean",
        "ratio": "token",
        "clip_low": 0.2,
        "clip_high": 0.28,
        "dual_clip": 10.0,
    },
    # The optimal token baseline (arXiv 2602.07078) as verl trains it (examples/otb_trainer/run_qwen2_5-7b.sh with
    # verl 0.9.1's defaults): adv_estimator=optimal_token_baseline (ε 1e-8, the zero tail), the token-mean loss, clip
    # 0.2 with verl's always-on dual clip 3, no KL, no entropy bonus; rollout.n 8 is rollout.group_size.
    "otb": {
        **_COMMON,
        "advantage": "optimal_token_baseline",
        "adv_eps": 1e-8,
        "aggregation": "token_mean",
        "ratio": "token",
        "clip_low": 0.2,
        "clip_high": 0.2,
        "dual_clip": 3.0,
    },
    # Negative-sample reinforcement as released (arXiv 2506.01347; TianHongZXY/RLVR-Decomposed,
    # run_qwen3-4b_psr_nsr.sh with advantage=negative / weighted): no baseline (wrong −1, correct +1), verl's token
    # mean, PPO clip 0.2, KL 0. NSR trains on the wrong responses only; W-REINFORCE weighs the correct ones λ = 0.1.
    "nsr": {
        **_COMMON,
        "advantage": "baseline_free",
        "drop_correct": True,
        "aggregation": "token_mean",
        "ratio": "token",
        "clip_low": 0.2,
        "clip_high": 0.2,
    },
    "w_reinforce": {
        **_COMMON,
        "advantage": "baseline_free",
        "positive_weight": 0.1,
        "aggregation": "token_mean",
        "ratio": "token",
        "clip_low": 0.2,
        "clip_high": 0.2,
    },
}


def _fifth_of_budget(fields: dict[str, Any]) -> int | None:
    max_len = fields.get("max_len")
    return max(1, max_len // 5) if isinstance(max_len, int) and not isinstance(max_len, bool) else None


_DERIVED: dict[str, dict[str, Any]] = {
    # DAPO generates up to 20480 tokens, the last 4096 of them the soft punishment's cache
    # (arXiv 2503.14476, §4.1): the same proportion when only max_len is given.
    "dapo": {"overlong_cache_len": _fifth_of_budget},
}


_REQUIRED: dict[str, dict[str, tuple[Any, ...]]] = {
    # LUSPO's length scaling is defined on GSPO's sequence-level loss (arXiv 2602.05261).
    "luspo": {"ratio": ("sequence", "sequence_token")},
}
"""Values a preset's definition needs: an override outside them is an error, not another method."""


def preset_fields(name: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """The fields of preset `name` with `overrides` applied, then the preset's derived defaults filled
    where the field is left None: dapo's overlong_cache_len = max_len // 5 (at least 1), DAPO's 4096
    of 20480 (arXiv 2503.14476, §4.1). An explicit value wins; without max_len it stays None and
    validation says so. The one home of this rule: `ObjectiveSettings.preset` and the run config call it."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    fields = {**PRESETS[name], **overrides}
    for key, allowed in _REQUIRED.get(name, {}).items():
        if fields.get(key) not in allowed:
            raise ValueError(f"{key}: preset {name} needs {' or '.join(map(str, allowed))}, got {fields.get(key)}")
    for key, derive in _DERIVED.get(name, {}).items():
        if fields.get(key) is None:
            fields[key] = derive(fields)
    return fields
