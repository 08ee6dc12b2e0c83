"""The GRPO-family objective as pure torch functions (no I/O, nothing from `harness`).

    from trainer.objective import ObjectiveSettings, policy_loss, compute_advantages
    s = ObjectiveSettings.preset("dr_grpo", max_len=3000)
    adv = compute_advantages(rewards, s)            # [groups, G]
    out = policy_loss(logp, old_logp, adv.flatten(), mask, s, entropy=entropy)
    out.loss.backward(); out.metrics                # policy/clip_frac, policy/entropy, ...

Each switch is a registered function (ADVANTAGES, RATIOS, SURROGATES, AGGREGATIONS, KL_ESTIMATORS, KL_GRADIENTS,
ROLLOUT_CORRECTIONS, ROLLOUT_REJECTIONS, LENGTH_REWARDS, PF_PPO_WEIGHTS) or a token weight in TOKEN_WEIGHTS; a new
variant is one decorated function.
"""

import importlib
from typing import Any

# Imported on first use, so that `trainer.objective.settings` (a config's validation) needs no torch.
_HOMES = {
    "advantages": ["ADVANTAGES", "advantage_metrics", "leave_one_out_targets"],
    "masks": [
        "ROLLOUT_CORRECTIONS",
        "TOKEN_WEIGHTS",
        "correction_weight",
        "covariance_selection",
        "rollout_weight_mean",
    ],
    "rejection": ["ROLLOUT_REJECTIONS", "kept_tokens"],
    "regularisers": ["EntropyCoefficient", "entropy_bonus"],
    "surrogates": ["SURROGATES"],
    "terms": ["PolicyTerms"],
    "aggregation": ["AGGREGATIONS", "Normaliser"],
    "clipping": ["Surrogate", "clipped_surrogate"],
    "kl": [
        "KL_ESTIMATORS",
        "KL_GRADIENTS",
        "kl_reward_mean",
        "kl_reward_penalty",
        "token_entropy",
        "token_logprobs",
        "token_sum_pi_squared",
    ],
    "kl_control": ["KLCoefficient", "adaptive_kl_coef"],
    "loss": ["ObjectiveOutput", "compute_advantages", "loss_mask", "merge_metrics", "policy_loss", "shape_rewards"],
    "overlong": ["overlong_filter", "soft_overlong_penalty"],
    "length_rewards": ["LENGTH_REWARDS", "cosine_scaled_reward"],
    "ratios": ["RATIOS"],
    "sampling": [
        "GroupFilter",
        "dynamic_sampling_filter",
        "group_outcome_metrics",
        "median_pivot",
        "PF_PPO_WEIGHTS",
        "pf_ppo_metrics",
        "pf_ppo_resample",
        "pf_ppo_weights",
        "sign_flip_metrics",
        "trained_samples",
    ],
    "settings": ["PRESETS", "ObjectiveSettings", "preset_fields"],
    "token_advantages": ["TokenProbabilities", "response_advantages"],
}
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "KL_GRADIENTS",
    "RATIOS",
    "SURROGATES",
    "ROLLOUT_CORRECTIONS",
    "ROLLOUT_REJECTIONS",
    "TOKEN_WEIGHTS",
    "LENGTH_REWARDS",
    "PF_PPO_WEIGHTS",
    "cosine_scaled_reward",
    "pf_ppo_resample",
    "pf_ppo_weights",
    "pf_ppo_metrics",
    "correction_weight",
    "covariance_selection",
    "rollout_weight_mean",
    "kept_tokens",
    "EntropyCoefficient",
    "entropy_bonus",
    "PolicyTerms",
    "PRESETS",
    "preset_fields",
    "ObjectiveSettings",
    "ObjectiveOutput",
    "Normaliser",
    "Surrogate",
    "GroupFilter",
    "policy_loss",
    "merge_metrics",
    "compute_advantages",
    "shape_rewards",
    "loss_mask",
    "advantage_metrics",
    "leave_one_out_targets",
    "clipped_surrogate",
    "overlong_filter",
    "soft_overlong_penalty",
    "dynamic_sampling_filter",
    "group_outcome_metrics",
    "median_pivot",
    "trained_samples",
    "sign_flip_metrics",
    "kl_reward_penalty",
    "kl_reward_mean",
    "KLCoefficient",
    "adaptive_kl_coef",
    "token_entropy",
    "token_logprobs",
    "token_sum_pi_squared",
    "TokenProbabilities",
    "response_advantages",
]


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module 'trainer.objective' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"trainer.objective.{_MODULE_OF[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
