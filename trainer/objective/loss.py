"""The composed objective: what the training loop calls, and a public API of its own.

`policy_loss` returns one micro-batch's contribution to the batch loss and to each
metric; `merge_metrics` combines the contributions of all micro-batches.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from trainer import metric_names as M
from trainer.objective.advantages import ADVANTAGES
from trainer.objective.aggregation import AGGREGATIONS, Normaliser, masked
from trainer.objective.kl import KL_ESTIMATORS, KL_GRADIENTS
from trainer.objective.length_rewards import LENGTH_REWARDS
from trainer.objective.masks import (
    TOKEN_WEIGHTS,
    covariance_selection,
    off_policy_mask,
    rollout_weight,
    rollout_weight_mean,
    trained_tokens,
)
from trainer.objective.overlong import overlong_filter, soft_overlong_penalty
from trainer.objective.ratios import RATIOS
from trainer.objective.regularisers import entropy_bonus
from trainer.objective.rejection import kept_tokens
from trainer.objective.settings import ObjectiveSettings
from trainer.objective.surrogates import SURROGATES
from trainer.objective.terms import PolicyTerms
from trainer.objective.token_advantages import TokenProbabilities

_MIN_METRICS = (M.RATIO_MIN,)
_MAX_METRICS = (M.RATIO_MAX,)


@dataclass
class ObjectiveOutput:
    loss: torch.Tensor
    """Scalar with graph: this micro-batch's share of the batch loss."""
    metrics: dict[str, torch.Tensor]
    """Detached scalars: this micro-batch's share of each metric (see `merge_metrics`)."""


def shape_rewards(
    rewards: torch.Tensor,
    lengths: torch.Tensor,
    s: ObjectiveSettings,
    correct: torch.Tensor | None = None,
    truncated: torch.Tensor | None = None,
) -> torch.Tensor:
    """R'_i = L(c_i, T_i) + P(T_i): L the length reward objective.length_reward names (`LENGTH_REWARDS`: the cosine
    length-scaling reward, arXiv 2502.03373), from response i's correctness c_i (`correct`), length T_i and whether
    it was cut off (`truncated`), in place of the task's R_i (which stays when no length reward is set); P DAPO's soft
    overlong punishment when overlong_penalty is on (arXiv 2503.14476, eq. 13), else 0. All [N]."""
    out = rewards
    if s.length_reward is not None:
        if correct is None or truncated is None:
            raise ValueError(f"length_reward {s.length_reward} needs each response's correctness and truncation")
        kwargs = {name: getattr(s, name) for name in LENGTH_REWARDS.meta(s.length_reward).get("params", ())}
        shaped = LENGTH_REWARDS[s.length_reward](correct.view(-1), lengths.view(-1), truncated.view(-1), **kwargs)
        out = shaped.to(rewards.dtype).view_as(rewards)
    if not s.overlong_penalty:
        return out
    return out + soft_overlong_penalty(lengths, s.max_len, s.overlong_cache_len).to(rewards.dtype)


def loss_mask(mask: torch.Tensor, truncated: torch.Tensor, s: ObjectiveSettings) -> torch.Tensor:
    """m_it ← m_it · 1[response i not truncated] when overlong_filter is on (DAPO, arXiv 2503.14476), else m."""
    return overlong_filter(mask, truncated) if s.overlong_filter else mask


def compute_advantages(
    rewards: torch.Tensor,
    s: ObjectiveSettings,
    strata: torch.Tensor | None = None,
    lengths: torch.Tensor | None = None,
    greedy: torch.Tensor | None = None,
    values: torch.Tensor | None = None,
    components: torch.Tensor | None = None,
    prompt_values: torch.Tensor | None = None,
    token_probs: TokenProbabilities | None = None,
) -> torch.Tensor:
    """A = estimator(R, ε, **its params) for grouped rewards R [groups, G], the estimator named by `s.advantage`; the
    settings fields it registered as `params` (ngrpo's and bnpo's reward_range, bnpo's bnpo_params and
    bnpo_max_weight, stratified's stratum_blend) by name, and `strata` ([groups, G] stratum labels, the values of
    `s.stratum_key`) to an estimator registered `needs_strata`, which is given them exactly when it is named (an
    error otherwise); each response's length to one registered `needs_lengths`, and `greedy` ([groups, 1] or
    [groups, G], the reward of one greedy response to each response's prompt) to one registered `needs_greedy`
    (ReMax), `values` ([groups, G], each response's value from the policy's internal states, the trainer's value
    probe's) to one registered `needs_values` (POISE), and `components` ([groups, G, K], each response's
    objective.reward_components) to one registered `needs_components` (GDPO), and `prompt_values` ([groups, G], the
    success rate of each response's prompt from the trainer's per-prompt tracker) to one registered
    `needs_prompt_values` (SPO), and `token_probs` (each response token's probability and Σ_v π² under the policy before
    the update) to one registered `needs_token_probs` (the optimal token baseline), whose advantages are per token,
    [groups, G, L]; every other estimator's are [groups, G]."""
    meta = ADVANTAGES.meta(s.advantage)
    kwargs = {name: getattr(s, name) for name in meta.get("params", ())}
    if meta.get("needs_strata", False) != (strata is not None):
        raise ValueError(
            f"advantage {s.advantage}: stratum labels are given exactly to an estimator that reads them "
            f"(objective.stratum_key: {s.stratum_key}; labels {'given' if strata is not None else 'missing'})"
        )
    if strata is not None:
        kwargs["strata"] = strata
    if meta.get("needs_lengths", False):  # each response's token count, [groups, G]
        if lengths is None:
            raise ValueError(f"advantage {s.advantage} whitens over tokens: it needs each response's length")
        kwargs["lengths"] = lengths
    if meta.get("needs_greedy", False):  # the reward of a greedy response to each prompt
        if greedy is None:
            raise ValueError(f"advantage {s.advantage} needs the reward of a greedy response to each prompt")
        kwargs["greedy"] = greedy
    if meta.get("needs_values", False):  # each response's value from the policy's internal states
        if values is None:
            raise ValueError(f"advantage {s.advantage} needs each response's value from the trainer's value probe")
        kwargs["values"] = values
    if meta.get("needs_components", False):  # each response's reward components, normalised one by one
        if components is None:
            raise ValueError(f"advantage {s.advantage} needs each response's reward components")
        kwargs["components"] = components
    if meta.get("needs_prompt_values", False):  # each response's prompt's value from the trainer's tracker
        if prompt_values is None:
            raise ValueError(f"advantage {s.advantage} needs each prompt's value from the trainer's value tracker")
        kwargs["prompt_values"] = prompt_values
    if meta.get("needs_token_probs", False):  # each response token's probability and Σ_v π² before the update
        if token_probs is None:
            raise ValueError(
                f"advantage {s.advantage} needs each response token's probability and Σ_v π² under the policy"
            )
        kwargs["token_probs"] = token_probs
    return ADVANTAGES[s.advantage](rewards, s.adv_eps, **kwargs)


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    settings: ObjectiveSettings,
    *,
    ref_logp: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    norm: Normaliser | None = None,
    rollout_logp: torch.Tensor | None = None,
    entropy_coef: float | None = None,
    cov_selected: torch.Tensor | None = None,
    kl_coef: float | None = None,
    kept: torch.Tensor | None = None,
) -> ObjectiveOutput:
    """L = agg_{i,t}( ℓ_it·Π_w w_it + β·KL_it ) − c·H̄, ℓ_it the configured surrogate at the configured ratio
    level, w the token weights (trainer.objective.masks), KL_it the estimator in the configured gradient form
    (`kl_gradient`) and H̄ the trained tokens' mean entropy.

    logp, old_logp, ref_logp, rollout_logp, entropy and mask are [B, T] (response tokens only); advantages [B], or
    [B, T] under a per-token advantage (the optimal token baseline's).
    `entropy` carries its graph when the loss has an entropy bonus; `entropy_coef` overrides the settings' (the
    adaptive coefficient's value this step) and `kl_coef` the settings' β (the adaptive KL controller's). `norm`
    holds the counts of the whole optimisation batch (and the rollout correction's mean weight over the rollout
    batch), `cov_selected` Clip-Cov's or KL-Cov's tokens picked over it (`covariance_selection`) and `kept` the tokens
    the rollout rejection keeps, judged from π_old before the update (`trainer.objective.rejection.kept_tokens`); leave
    them None when the tensors are the whole batch. A token not kept leaves `mask`, so the loss, its normalisers and
    the token metrics. GRPO (arXiv 2402.03300, eq. 3) with the switches of Dr. GRPO (arXiv 2503.20783), DAPO (arXiv
    2503.14476), GSPO (arXiv 2507.18071) and their successors.
    """
    s = settings
    if kept is None and s.rollout_rejection is not None:  # the tensors are the whole batch
        kept = kept_tokens(old_logp, rollout_logp, mask, s)
    norm = norm or Normaliser.from_mask(
        mask, s.max_len, entropy=entropy, top_entropy_quantile=s.top_entropy_quantile, kept=kept
    )
    if norm.max_len is None and s.max_len is not None:
        norm = replace(norm, max_len=s.max_len)
    if s.rollout_correction_batch_normalize and norm.rollout_weight_mean is None:  # the tensors are the whole batch
        norm = replace(norm, rollout_weight_mean=rollout_weight_mean(old_logp, rollout_logp, mask, s))
    sampled = mask  # the loss tokens before the rollout rejection
    if kept is not None:
        mask = mask * kept.to(mask.dtype)
    terms = PolicyTerms(
        logp,
        old_logp,
        RATIOS[s.ratio](logp, old_logp, mask),
        advantages,
        mask,
        rollout_logp,
        entropy,
        norm.entropy_floor,
    )
    if cov_selected is None and s.needs_batch_covariance:  # the tensors are the whole batch
        gen = torch.Generator().manual_seed(0)
        cov_selected = covariance_selection(logp.detach(), old_logp, advantages, mask, s, gen)
    terms = replace(
        terms, rollout_weight=rollout_weight(terms, s, norm.rollout_weight_mean, sampled), cov_selected=cov_selected
    )
    sur = SURROGATES[s.surrogate](terms, s)
    per_token = sur.loss
    for weight in TOKEN_WEIGHTS:
        w = weight(terms, s)
        if w is not None:
            per_token = per_token * w
    kl = None
    if ref_logp is not None:
        kl = KL_ESTIMATORS[s.kl_estimator](logp, ref_logp)
        if s.kl_coef > 0:
            beta = s.kl_coef if kl_coef is None else kl_coef
            per_token = per_token + beta * KL_GRADIENTS[s.kl_gradient](kl, ref_logp, terms)
    elif s.kl_coef > 0:
        raise ValueError("kl_coef > 0 needs ref_logp (log-probs of the reference policy)")
    loss = AGGREGATIONS[s.aggregation](per_token, mask, norm)
    coef = s.entropy_coef if entropy_coef is None else entropy_coef
    trained = trained_tokens(terms, s)
    if s.entropy_bonus:
        if entropy is None:
            raise ValueError("an entropy bonus needs the tokens' entropy (with its graph)")
        loss = loss + entropy_bonus(entropy, trained, norm.num_trained or 0, coef)

    with torch.no_grad():
        metrics = {M.LOSS: loss.detach()}
        m = mask.bool()
        n_tok = max(norm.num_tokens, 1)

        def token_share(ind: torch.Tensor) -> torch.Tensor:  # of the batch's loss tokens
            return (ind & m).sum().double() / n_tok

        def seq_share(ind: torch.Tensor) -> torch.Tensor:  # of the batch's responses with a loss token
            return (ind & m).any(-1).sum().double() / max(norm.num_scored, 1)

        if s.per_sequence_ratio:  # clipping decides per sequence: the ratio's own unit is sequences (GSPO)
            share = seq_share
            has_tokens = m.any(-1)
            values = sur.ratio[:, 0][has_tokens] if sur.ratio.shape[1] else sur.ratio.new_zeros(0)
            metrics[M.RATIO_MEAN] = values.double().sum() / max(norm.num_scored, 1)
        else:
            share = token_share
            values = sur.ratio[m]
            metrics[M.RATIO_MEAN] = values.double().sum() / n_tok
        metrics[M.RATIO_MIN] = values.min() if values.numel() else torch.tensor(float("inf"))
        metrics[M.RATIO_MAX] = values.max() if values.numel() else torch.tensor(float("-inf"))
        metrics[M.CLIP_FRAC_LOW] = share(sur.clipped_low)
        metrics[M.CLIP_FRAC_HIGH] = share(sur.clipped_high)
        metrics[M.CLIP_FRAC] = metrics[M.CLIP_FRAC_LOW] + metrics[M.CLIP_FRAC_HIGH]
        # in fixed units under every ratio: a sequence ratio's clip covers every token of its response
        metrics[M.CLIP_FRAC_TOKENS] = token_share(sur.clipped)
        metrics[M.CLIP_FRAC_SEQS] = seq_share(sur.clipped)
        if s.dual_clip is not None:
            metrics[M.DUAL_CLIP_FRAC] = share(sur.dual_clipped)
        if entropy is not None:  # a token mean whatever the aggregation: comparable across arms
            metrics[M.ENTROPY] = masked(entropy.detach(), m).sum().double() / n_tok
            if s.entropy_bonus or s.needs_batch_entropy:
                n_trained = max(norm.num_trained or 0, 1)
                metrics[M.ENTROPY_TRAINED] = masked(entropy.detach(), trained).sum().double() / n_trained
        if s.entropy_bonus:  # this micro-batch's share of the coefficient, so the merged metric is the coefficient
            share = len(mask) / max(norm.num_sequences, 1)
            metrics[M.ENTROPY_COEF] = torch.tensor(coef * share, dtype=torch.float64)
        if s.off_policy_threshold is not None:
            kept = off_policy_mask(terms, s)
            metrics[M.OFF_POLICY_MASKED_FRAC] = seq_share((kept == 0).expand_as(m))
        if cov_selected is not None:
            metrics[M.COV_SELECTED_FRAC] = token_share(cov_selected)
        if terms.rollout_weight is not None:
            weight = terms.rollout_weight.expand_as(logp).detach()
            metrics[M.ROLLOUT_WEIGHT_MEAN] = masked(weight, m).sum().double() / n_tok
        if kept is not None:  # of the loss tokens sampled, before the rejection
            rejected = sampled.bool() & ~kept.bool()
            metrics[M.ROLLOUT_REJECTED_FRAC] = rejected.sum().double() / max(norm.num_tokens + norm.num_rejected, 1)
        if kl is not None:
            metrics[M.KL] = masked(kl.detach(), m).sum().double() / n_tok
    return ObjectiveOutput(loss=loss, metrics=metrics)


def merge_metrics(parts: list[dict[str, torch.Tensor]]) -> dict[str, float]:
    """metric = Σ_k contribution_k over micro-batches k (each already divided by batch-wide counts);
    policy/ratio_min = min_k, policy/ratio_max = max_k."""
    out: dict[str, float] = {}
    for key in parts[0]:
        vals = torch.stack([torch.as_tensor(p[key], dtype=torch.float64) for p in parts])
        if key in _MIN_METRICS:
            out[key] = vals.min().item()
        elif key in _MAX_METRICS:
            out[key] = vals.max().item()
        else:
            out[key] = vals.sum().item()
    return out
