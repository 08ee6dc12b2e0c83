"""The GRPO-family objective as pure torch functions (no I/O, nothing from `harness`).

    from trainer.objective import ObjectiveSettings, policy_loss, compute_advantages
    s = ObjectiveSettings.preset("dr_grpo", max_len=3000)
    adv = compute_advantages(rewards, s)            # [groups, G]
    out = policy_loss(logp, old_logp, adv.flatten(), mask, s, entropy=entropy)
    out.loss.backward(); out.metrics                # policy/clip_frac, policy/entropy, ...

Each switch is a registered function (ADVANTAGES, RATIOS, AGGREGATIONS, KL_ESTIMATORS);
a new variant is one decorated function.
"""

from trainer.objective.advantages import ADVANTAGES, advantage_metrics
from trainer.objective.aggregation import AGGREGATIONS, Normaliser
from trainer.objective.clipping import Surrogate, clipped_surrogate
from trainer.objective.kl import KL_ESTIMATORS, token_entropy, token_logprobs
from trainer.objective.loss import (ObjectiveOutput, compute_advantages, loss_mask, merge_metrics,
                                    policy_loss, shape_rewards)
from trainer.objective.overlong import overlong_filter, soft_overlong_penalty
from trainer.objective.ratios import RATIOS
from trainer.objective.sampling import GroupFilter, dynamic_sampling_filter, group_outcome_metrics
from trainer.objective.settings import PRESETS, ObjectiveSettings, preset_fields

__all__ = [
    "ADVANTAGES", "AGGREGATIONS", "KL_ESTIMATORS", "RATIOS", "PRESETS", "preset_fields",
    "ObjectiveSettings", "ObjectiveOutput", "Normaliser", "Surrogate", "GroupFilter",
    "policy_loss", "merge_metrics", "compute_advantages", "shape_rewards", "loss_mask",
    "advantage_metrics", "clipped_surrogate", "overlong_filter", "soft_overlong_penalty",
    "dynamic_sampling_filter", "group_outcome_metrics", "token_entropy", "token_logprobs",
]
