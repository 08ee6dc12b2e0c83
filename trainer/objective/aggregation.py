"""Loss aggregation (the length-normalisation switch).

Every mode divides by counts taken over the whole optimisation batch
(`Normaliser`), and returns one micro-batch's *contribution*: summing the
contributions of any split of the batch gives exactly the full-batch loss and
gradient. Dividing by micro-batch counts instead (a pitfall frameworks have shipped) makes the gradient depend on
how the batch is split.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.objective.registry import AGGREGATIONS


@dataclass(frozen=True)
class Normaliser:
    """Counts over the whole optimisation batch."""

    num_sequences: int
    """B: every response of the batch, a fully masked one (e.g. overlong-filtered) included, as in
    GRPO's 1/G, Dr. GRPO's B·L_max and TRL; so filtering does not move the divisor."""
    num_tokens: int
    """Σ_i T_i: loss tokens in the batch."""
    num_scored: int
    """Responses with at least one loss token: the denominator of per-sequence metrics (GSPO's
    clip fraction, ratio mean), which a fully masked response has no value for. Not used by the loss."""
    max_len: int | None = None
    """L_max, the generation budget (constant normaliser only)."""
    entropy_floor: float | None = None
    """The batch's loss-token entropy at its 1 − ρ quantile (top_entropy_quantile ρ < 1), else None."""
    num_trained: int | None = None
    """Loss tokens the policy trains on: those at or above `entropy_floor` when it is set, else every loss token
    (the entropy bonus's denominator)."""
    num_rejected: int = 0
    """Loss tokens the rollout rejection took out of the loss (objective.rollout_rejection), which none of the counts
    above includes (verl's normalisers read its rejected response mask): `num_tokens + num_rejected` tokens were
    sampled for the loss."""
    rollout_weight_mean: float | None = None
    """w̄, the rollout correction's mean weight over the whole rollout batch, which every weight is divided by under
    objective.rollout_correction_batch_normalize (`trainer.objective.masks.rollout_weight_mean`); None when off."""

    @classmethod
    def from_mask(
        cls,
        mask: torch.Tensor,
        max_len: int | None = None,
        *,
        entropy: torch.Tensor | None = None,
        top_entropy_quantile: float = 1.0,
        kept: torch.Tensor | None = None,
    ) -> Normaliser:
        """The counts of the batch `mask` covers, less the tokens the rollout rejection did not keep (`kept`, [B, T]
        bool, when on); with ρ = `top_entropy_quantile` < 1, also the 1 − ρ quantile (linear interpolation) of the
        loss tokens' `entropy` and how many tokens reach it."""
        rejected = 0
        if kept is not None:
            rejected = int((mask.bool() & ~kept.bool()).sum())
            mask = mask * kept.to(mask.dtype)
        lengths = mask.sum(-1)
        num_tokens = int(lengths.sum())
        floor, trained = None, num_tokens
        if top_entropy_quantile < 1:
            if entropy is None:
                raise ValueError("top_entropy_quantile < 1 needs the batch's entropies")
            m = mask.bool()
            values = entropy.detach()[m].double()
            if values.numel():
                floor = float(torch.quantile(values, 1.0 - top_entropy_quantile))
                trained = int(at_or_above(entropy, mask, floor).sum())
            else:
                trained = 0
        return cls(mask.shape[0], num_tokens, int((lengths > 0).sum()), max_len, floor, trained, rejected)


def at_or_above(entropy: torch.Tensor, mask: torch.Tensor, floor: float) -> torch.Tensor:
    """The loss tokens whose entropy is at or above `floor` ([B, T] bool), compared in float64: the one rule for
    the top-entropy mask and its count."""
    m = mask.bool()
    return (entropy.detach().double() * m >= floor) & m


def masked(loss: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """loss where mask is set, 0 elsewhere (a `where`, so NaN on padding cannot leak)."""
    return torch.where(mask.bool(), loss, torch.zeros_like(loss))


@AGGREGATIONS.register("seq_mean_token_mean")
def seq_mean_token_mean(loss: torch.Tensor, mask: torch.Tensor, norm: Normaliser) -> torch.Tensor:
    """L = (1/B) Σ_i (1/T_i) Σ_t m_it ℓ_it.

    GRPO: Shao et al. 2024 (arXiv 2402.03300), eq. 3. The 1/T_i makes each token of a long
    response count less, so long wrong answers are penalised less per token (Dr. GRPO,
    arXiv 2503.20783, §3.1). With a sequence-level ratio this is GSPO's mean over sequences.
    """
    lengths = mask.sum(-1).to(loss.dtype).clamp(min=1)
    return (masked(loss, mask).sum(-1) / lengths).sum() / max(norm.num_sequences, 1)


@AGGREGATIONS.register("token_mean")
def token_mean(loss: torch.Tensor, mask: torch.Tensor, norm: Normaliser) -> torch.Tensor:
    """L = Σ_i Σ_t m_it ℓ_it / Σ_i Σ_t m_it: every token of the batch weighs the same.

    DAPO's token-level loss: Yu et al. 2025 (arXiv 2503.14476), eq. 12.
    """
    return masked(loss, mask).sum() / max(norm.num_tokens, 1)


@AGGREGATIONS.register("constant")
def constant(loss: torch.Tensor, mask: torch.Tensor, norm: Normaliser) -> torch.Tensor:
    """L = Σ_i Σ_t m_it ℓ_it / (B · L_max), L_max the generation budget (a constant).

    Dr. GRPO: Liu et al. 2025 (arXiv 2503.20783), §3.2 and eq. 4 (oat's `constant_normalizer`).
    """
    if norm.max_len is None:
        raise ValueError("aggregation 'constant' needs max_len (L_max)")
    return masked(loss, mask).sum() / (max(norm.num_sequences, 1) * norm.max_len)


@AGGREGATIONS.register("seq_mean_token_sum")
def seq_mean_token_sum(loss: torch.Tensor, mask: torch.Tensor, norm: Normaliser) -> torch.Tensor:
    """L = (1/B) Σ_i Σ_t m_it ℓ_it: per-response sums, averaged over responses.

    verl's `seq-mean-token-sum` (Sheng et al. 2024, HybridFlow, arXiv 2409.19256); longer
    responses weigh proportionally more.
    """
    return masked(loss, mask).sum() / max(norm.num_sequences, 1)


@AGGREGATIONS.register("token_sum")
def token_sum(loss: torch.Tensor, mask: torch.Tensor, norm: Normaliser) -> torch.Tensor:
    """L = Σ_i Σ_t m_it ℓ_it: every loss token's term, not divided by anything.

    verl's `token-sum` (Sheng et al. 2024, HybridFlow, arXiv 2409.19256; `verl/trainer/ppo/core_algos.py`,
    `agg_loss`, on one data-parallel rank). No normaliser, so
    the update's size grows with the batch's loss tokens: the same direction as `token_mean`, Σ_i T_i times longer.
    """
    return masked(loss, mask).sum()
