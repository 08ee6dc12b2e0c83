"""Length rewards: the reward as a function of a response's correctness and length, in place of the task's reward
(`objective.length_reward`). DAPO's soft overlong punishment, added to the reward, is in trainer/objective/overlong.py.
"""

from __future__ import annotations

import math

import torch

from trainer.objective.registry import LENGTH_REWARDS

# Each entry: (correct [N] bool, lengths [N] tokens, truncated [N] bool, **the settings it registered as `params`) →
# [N] float64 rewards.


@LENGTH_REWARDS.register("cosine", params=("max_len", "cosine_correct", "cosine_wrong", "cosine_exceed"))
def cosine_scaled_reward(
    correct: torch.Tensor,
    lengths: torch.Tensor,
    truncated: torch.Tensor,
    max_len: int,
    cosine_correct: tuple[float, float],
    cosine_wrong: tuple[float, float],
    cosine_exceed: float | None = None,
) -> torch.Tensor:
    """R_i = r_L + ½ (r_0 − r_L) (1 + cos(π · min(T_i / L_max, 1))), with (r_0, r_L) = cosine_correct when response i is
    correct and cosine_wrong when it is not; R_i = r_e (cosine_exceed) for a truncated response when r_e is set.

    r_0 is the reward at length 0 and r_L at the budget L_max: a correct response earns more the shorter it is (r_0^c >
    r_L^c), a wrong one is penalised less the longer it is (r_0^w < r_L^w), so that the policy spends length only on
    what it has not solved. Cosine length-scaling reward of Yeo et al. 2025, Demystifying Long Chain-of-Thought
    Reasoning in LLMs (arXiv 2502.03373, §4); what was read: the abstract, the authors' code
    (eddycmu/demystify-long-cot, `openrlhf/openrlhf/reward/cosine.py`: `CosineScaledSparseReward.reward`, and its
    §4.2 script: r_0^c 2, r_L^c 1, r_0^w −10, r_L^w 0, r_e −10), and TRL 1.16's `get_cosine_scaled_reward`
    (`trl/rewards/accuracy_rewards.py`; defaults r_0^c 1, r_L^c 0.5, r_0^w −1, r_L^w −0.5, no r_e); the paper's body
    was not stored. As TRL: the ratio is capped at 1 (cos is periodic: past L_max the reward would climb back).
    Departs from the authors' code: their r_e goes to every response within 16 tokens of the budget (a margin
    against off-by-one lengths), here to a response cut off without end-of-sequence, which harness grades wrong; and
    their wrong responses may carry a repetition penalty, not built. T_i is the response's token count and L_max
    `objective.max_len` (the run's max_new_tokens unless set).
    """
    if max_len <= 0:
        raise ValueError(f"max_len must be > 0, got {max_len}")
    t = lengths.to(torch.float64)
    cosine = torch.cos(math.pi * torch.clamp(t / max_len, max=1.0))
    ok = correct.bool()
    value = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    r0 = torch.where(ok, value(cosine_correct[0]), value(cosine_wrong[0]))
    r_l = torch.where(ok, value(cosine_correct[1]), value(cosine_wrong[1]))
    reward = r_l + 0.5 * (r0 - r_l) * (1.0 + cosine)
    if cosine_exceed is None:
        return reward
    return torch.where(truncated.bool(), torch.full_like(reward, cosine_exceed), reward)
