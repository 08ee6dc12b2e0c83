"""A fixed pool of prompts drawn once from the task, and the samplers that draw each step's prompts from it.

A persistent per-prompt statistic (SPO's value tracker, trainer/value_tracker.py) needs its prompts to come back. A
task with a finite problem set does that by itself (math, a custom dataset, a reasoning-gym pool); the toy's problems
(two operands of 1 to 4 digits) almost never recur. `rollout.prompt_pool` makes the training set finite for any task:
N problems drawn once, before training, with a stream of their own (so the task's draws are unchanged), deduplicated
by problem id. Each step then draws rollout.prompts_per_step of them with a registered sampler's weights (without
replacement while the pool holds enough, as the authors' `np.random.choice(M, size, replace=size > M, p)`):

  uniform          w = 1
  value_priority   w = √(v̂(1 − v̂)) + ε   (SPO's prioritized sampling, arXiv 2509.13232; the authors' verl recipe,
                                           recipe/spo/spo_ray_trainer.py `fit`, ε = 0.05: the standard deviation of
                                           a Bernoulli(v̂) reward, so prompts neither solved nor hopeless come first)

v̂ the tracker's value of the prompt. Departs from the authors' release: they weigh a candidate batch of 14,000 prompts
drawn uniformly from the 17k training set (`gen_batch_size`), this weighs the whole pool.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from trainer.tasks.base import Group, Task

POOL_STREAM = 0x5B0
"""The pool's draw: np.random.default_rng([seed, POOL_STREAM]), apart from the trainer's own stream."""

PromptValue = Callable[[str], float]
"""A prompt's tracked value v̂ by problem id."""


def uniform_weights(ids: list[str], value: PromptValue | None, eps: float) -> np.ndarray:
    """w = 1 for every prompt."""
    return np.ones(len(ids))


def value_priority_weights(ids: list[str], value: PromptValue | None, eps: float) -> np.ndarray:
    """w = √(v̂(1 − v̂)) + ε, v̂ each prompt's tracked success rate (SPO's prioritized sampling)."""
    if value is None:
        raise ValueError("rollout.prompt_sampling: value_priority reads a per-prompt tracker (objective.advantage spo)")
    v = np.array([value(p) for p in ids], dtype=np.float64)
    return np.sqrt(np.clip(v * (1.0 - v), 0.0, None)) + eps


SAMPLERS: dict[str, Callable[[list[str], PromptValue | None, float], np.ndarray]] = {
    "uniform": uniform_weights,
    "value_priority": value_priority_weights,
}
"""rollout.prompt_sampling → the weight of each pool prompt."""


@dataclass(frozen=True)
class PromptPool:
    """The problems a run trains on, each with the prompts it was drawn with."""

    groups: tuple[Group, ...]

    @classmethod
    def draw(cls, task: Task, size: int, group_size: int, seed: int) -> PromptPool:
        """`size` problems from `task` with the pool's own stream, the first of each problem id kept."""
        rng = np.random.default_rng([seed, POOL_STREAM])
        seen: dict[str, Group] = {}
        for group in task.sample_groups(rng, size, group_size):
            seen.setdefault(group.problem_id, group)
        return cls(tuple(seen.values()))

    @property
    def ids(self) -> list[str]:
        return [g.problem_id for g in self.groups]

    def sample(self, rng: np.random.Generator, n: int, weights: np.ndarray) -> list[Group]:
        """`n` groups drawn with probability ∝ `weights`, without replacement while the pool holds n of weight > 0."""
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (len(self.groups),) or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
            raise ValueError(f"prompt weights must be {len(self.groups)} finite values >= 0 with a positive sum")
        picks = rng.choice(len(self.groups), size=n, replace=n > np.count_nonzero(w), p=w / w.sum())
        return [self.groups[int(i)] for i in picks]
