"""The objective's settings: one validated object, and the named presets (grpo, dr_grpo, dapo, gspo)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator

from trainer.config import STRICT
from trainer.objective.registry import (
    ADVANTAGES,
    AGGREGATIONS,
    KL_ESTIMATORS,
    RATIOS,
    Registry,
)


class ObjectiveSettings(BaseModel):
    """Every switch of the GRPO-family objective. No field has a default: start from
    `ObjectiveSettings.preset(name, **overrides)` or spell every field out."""

    model_config = STRICT

    advantage: str
    """Advantage estimator: group_std (GRPO), group_mean (Dr. GRPO: no std), batch_std (TRL
    "batch"), group_median (MC-GRPO). The std switch of the Dr. GRPO ablation."""
    adv_eps: float = Field(ge=0)
    """ε added to the std in group_std / batch_std (TRL 1e-4, verl 1e-6); flat groups get 0 regardless."""
    aggregation: str
    """Loss aggregation, the length-normalisation switch: seq_mean_token_mean (GRPO), token_mean
    (DAPO), constant (Dr. GRPO, needs max_len), seq_mean_token_sum (verl)."""
    max_len: int | None = Field(gt=0)
    """L_max, the generation budget in tokens: the constant normaliser and the soft overlong
    punishment use it. A run fills it from its max_new_tokens when left null."""
    ratio: str
    """Importance-ratio level: token (PPO/GRPO), sequence (GSPO), sequence_token (GSPO-token).
    Ratio-level clipping only acts when the policy moves between sampling and update (several
    optimiser steps per rollout batch)."""
    clip_low: float = Field(ge=0, lt=1)
    """ε_low: the ratio is clipped below at 1 − ε_low (0.2; GSPO 3e-4)."""
    clip_high: float = Field(ge=0)
    """ε_high: the ratio is clipped above at 1 + ε_high (0.2; DAPO clip-higher 0.28; GSPO 4e-4)."""
    dual_clip: float | None = Field(gt=1)
    """Dual-clip constant c > 1: for A < 0 the loss is capped at −c·A (verl 3, DAPO recipe 10); null = off."""
    kl_coef: float = Field(ge=0)
    """β, weight of the per-token KL to the reference policy added to the loss (0 in Dr. GRPO,
    DAPO, TRL). β > 0 needs reference log-probs."""
    kl_estimator: str
    """KL estimator for the loss and the policy/kl metric: k1, k2 or k3 (GRPO uses k3)."""
    overlong_filter: bool
    """DAPO overlong filtering: truncated responses get loss mask 0."""
    overlong_penalty: bool
    """DAPO soft overlong punishment added to the reward (needs max_len and overlong_cache_len)."""
    overlong_cache_len: int | None = Field(gt=0)
    """L_cache: the last L_cache tokens of the budget are penalised linearly down to −1 (DAPO:
    4096 of 20480). The dapo preset defaults it to max_len // 5, the paper's proportion."""
    dynamic_sampling: bool
    """DAPO dynamic sampling: drop groups whose values are all equal and sample more prompts."""
    dynamic_sampling_key: Literal["reward", "correct"]
    """What must vary within a group to keep it: the (shaped) reward, or correctness (DAPO's recipe)."""

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> ObjectiveSettings:
        """A named preset (grpo, dr_grpo, dapo, gspo) with any field overridden; see `preset_fields`
        for the defaults a preset derives (dapo: overlong_cache_len = max_len // 5)."""
        return cls(**preset_fields(name, overrides))

    @field_validator("advantage", "aggregation", "ratio", "kl_estimator")
    @classmethod
    def _registered(cls, name: str, info: ValidationInfo) -> str:
        registry = _REGISTRIES[info.field_name]
        if name not in registry:
            raise ValueError(f"unknown {registry.kind} {name!r}; known: {', '.join(registry.names())}")
        return name

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
        return self

    @property
    def per_sequence_ratio(self) -> bool:
        """Whether the ratio (and so clipping) acts per sequence."""
        return bool(RATIOS.meta(self.ratio)["per_sequence"])


_REGISTRIES: dict[str, Registry] = {
    "advantage": ADVANTAGES,
    "aggregation": AGGREGATIONS,
    "ratio": RATIOS,
    "kl_estimator": KL_ESTIMATORS,
}

_COMMON: dict[str, Any] = dict(
    adv_eps=1e-6,
    max_len=None,
    dual_clip=None,
    kl_coef=0.0,
    kl_estimator="k3",
    overlong_filter=False,
    overlong_penalty=False,
    overlong_cache_len=None,
    dynamic_sampling=False,
    dynamic_sampling_key="correct",
)

PRESETS: dict[str, dict[str, Any]] = {
    # GRPO (arXiv 2402.03300) as TRL/verl ship it, β = 0.
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
}


def _fifth_of_budget(fields: dict[str, Any]) -> int | None:
    max_len = fields.get("max_len")
    return max(1, max_len // 5) if isinstance(max_len, int) and not isinstance(max_len, bool) else None


_DERIVED: dict[str, dict[str, Any]] = {
    # DAPO generates up to 20480 tokens, the last 4096 of them the soft punishment's cache
    # (arXiv 2503.14476, §4.1): the same proportion when only max_len is given.
    "dapo": {"overlong_cache_len": _fifth_of_budget},
}


def preset_fields(name: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """The fields of preset `name` with `overrides` applied, then the preset's derived defaults filled
    where the field is left None: dapo's overlong_cache_len = max_len // 5 (at least 1), DAPO's 4096
    of 20480 (arXiv 2503.14476, §4.1). An explicit value wins; without max_len it stays None and
    validation says so. The one home of this rule: `ObjectiveSettings.preset` and the run config call it."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    fields = {**PRESETS[name], **overrides}
    for key, derive in _DERIVED.get(name, {}).items():
        if fields.get(key) is None:
            fields[key] = derive(fields)
    return fields
