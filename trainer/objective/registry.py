"""Name → function registries: each switch value is one small registered function.

Each registry declares its names and the module whose functions register under them, so a config's
switch names validate without importing that module (torch); looking a function up imports it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Generic, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class Registry(Generic[F]):
    """Functions registered under a name, with optional metadata (e.g. a ratio's level)."""

    def __init__(self, kind: str, module: str, names: tuple[str, ...]):
        self.kind = kind
        self.module = module
        """The module whose functions register here."""
        self._names = names
        self._fns: dict[str, F] = {}
        self._meta: dict[str, dict[str, Any]] = {}

    def register(self, name: str, **meta: Any) -> Callable[[F], F]:
        def add(fn: F) -> F:
            if name not in self._names:
                raise ValueError(f"{self.kind} {name!r} is not declared in trainer/objective/registry.py")
            if name in self._fns:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._fns[name] = fn
            self._meta[name] = meta
            return fn

        return add

    def __getitem__(self, name: str) -> F:
        importlib.import_module(self.module)
        try:
            return self._fns[name]
        except KeyError:
            raise ValueError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def meta(self, name: str) -> dict[str, Any]:
        self[name]  # raise the helpful error for unknown names
        return self._meta[name]

    def names(self) -> tuple[str, ...]:
        return self._names


ADVANTAGES: Registry = Registry(
    "advantage estimator",
    "trainer.objective.advantages",
    (
        "group_std",
        "group_mean",
        "batch_std",
        "rloo",
        "opo",
        "gpg",
        "gpg_nonzero",
        "passk",
        "group_median",
        "group_median_mad",
        "baseline_free",
        "batch_norm",
        "batch_norm_tokens",
        "group_mean_batch_norm",
        "group_mean_batch_norm_tokens",
        "batch_mean",
        "batch_mean_tokens",
        "group_mean_batch_mean_tokens",
        "ngrpo",
        "bnpo",
        "stratified",
        "remax",
        "poise",
        "gdpo",
        "gdpo_tokens",
        "spo",
        "optimal_token_baseline",
    ),
)
COMPONENT_ADVANTAGES = ("gdpo", "gdpo_tokens")
TOKEN_ADVANTAGES = ("optimal_token_baseline",)
"""The estimators whose advantage is one per response token, [groups, G, L], not one per response: the optimal token
baseline's. Declared here, not at registration, so validating a config imports no torch."""
"""The estimators that read each response's reward components (objective.reward_components) instead of its reward:
GDPO's. Declared here, not at registration, so validating a config imports no torch."""
ONE_RESPONSE_ADVANTAGES = (
    "baseline_free",
    "batch_norm",
    "batch_norm_tokens",
    "group_mean_batch_norm_tokens",  # verl: a group of one is not centred, so this is batch_norm_tokens
    "batch_mean",
    "batch_mean_tokens",
    "ngrpo",
    "remax",
    "spo",
)
"""The estimators with a signal at one response per prompt (`rollout.group_size: 1`): their baseline is not the group's
own rewards, which a group of one would cancel. Declared here, not at registration, so validating a config imports no
torch."""
AGGREGATIONS: Registry = Registry(
    "loss aggregation",
    "trainer.objective.aggregation",
    ("seq_mean_token_mean", "token_mean", "constant", "seq_mean_token_sum", "token_sum"),
)
RATIOS: Registry = Registry(
    "importance ratio level",
    "trainer.objective.ratios",
    ("token", "sequence", "sequence_token", "sequence_product"),
)
KL_ESTIMATORS: Registry = Registry("KL estimator", "trainer.objective.kl", ("k1", "k2", "k3", "abs"))
KL_GRADIENTS: Registry = Registry(
    "KL gradient form",
    "trainer.objective.kl",
    ("estimator", "k2_straight_through", "trl_bias_correction", "openrlhf_unbiased_gradient"),
)
SURROGATES: Registry = Registry(
    "surrogate (clipping form)",
    "trainer.objective.surrogates",
    ("clip", "cispo", "sapo", "vespo", "kl_cov", "gmpo", "dppo_tv", "dppo_kl", "dro", "gpg"),
)
ROLLOUT_CORRECTIONS: Registry = Registry(
    "rollout correction",
    "trainer.objective.masks",
    ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask"),
)
LENGTH_REWARDS: Registry = Registry("length reward", "trainer.objective.length_rewards", ("cosine",))
"""The reward as a function of each response's correctness and length, in place of the task's
(objective.length_reward)."""
PF_PPO_WEIGHTS: Registry = Registry(
    "PF-PPO reweight method", "trainer.objective.sampling", ("pow", "max_min", "max_random")
)
"""PF-PPO's sampling weight of each trained response from its reward (objective.pf_ppo_reweight)."""
ROLLOUT_REJECTIONS: Registry = Registry(
    "rollout rejection criterion",
    "trainer.objective.rejection",
    (
        "token_k1",
        "token_k2",
        "token_k3",
        "seq_sum_k1",
        "seq_sum_k2",
        "seq_sum_k3",
        "seq_mean_k1",
        "seq_mean_k2",
        "seq_mean_k3",
        "seq_max_k2",
        "seq_max_k3",
    ),
)
RATIO_BAND_REJECTIONS = ("token_k1", "seq_sum_k1", "seq_mean_k1")
"""The rejection criteria on k1 = −log r, kept within a band [log min, log max] (a lower and an upper bound, verl's
`"low_high"` threshold); the others keep a divergence at or below its upper bound. Declared here, not at
registration, so validating a config imports no torch."""
