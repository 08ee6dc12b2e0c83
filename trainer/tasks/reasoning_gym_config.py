"""Settings of a reasoning-gym task (`task.name: reasoning_gym`), apart from the task, so a run config validates
fast: reasoning-gym itself is imported only in the task's bounded helper process (trainer/tasks/reasoning_gym.py)."""

from __future__ import annotations

import re

from pydantic import BaseModel, Field, field_validator

from trainer.config import STRICT, Seed
from trainer.tasks.custom_config import MAX_BUDGET_S, OptionValue

GENERATOR_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
"""What a generator's name looks like (reasoning-gym's registry keys: `chain_sum`, `spell_backward`)."""
MAX_POOL = 1_000_000
"""The most problems a pool may hold: the pool crosses from the helper process as JSON, a few hundred bytes each."""


class ReasoningGymConfig(BaseModel):
    """Problems from one of reasoning-gym's seeded generators, scored by the generator's own `score_answer`."""

    model_config = STRICT

    generator: str
    """The generator's name in reasoning-gym's registry (`reasoning_gym.create_dataset(name, ...)`), e.g.
    `chain_sum`, `basic_arithmetic`, `spell_backward`, `letter_counting`; a name that is not there is a one-line
    error listing the close ones."""
    config: dict[str, OptionValue | list[OptionValue]] = {}
    """The generator's own settings, passed as keywords to its config class (e.g. `{min_terms: 2, max_terms: 3}`
    for chain_sum); what is not given keeps reasoning-gym's default, which the pinned release (0.1.25) fixes."""
    seed: Seed = 0
    """The generator's seed: the same seed, settings and release give the same pool of problems. Not the run's
    seed, which draws problems from the pool, so every seed of a sweep trains on one pool."""
    size: int = Field(10_000, ge=1, le=MAX_POOL)
    """Problems in the pool, generated once per job; each step draws `rollout.prompts_per_step` of them uniformly
    (distinct within a step). A toy base model built for the task is trained on the same pool."""
    correct_threshold: float = Field(1.0, ge=0.0, le=1.0)
    """A completion is correct when `score_answer` gives at least this (the default, 1.0, is full credit; some
    generators give partial credit, which is the reward either way)."""
    budget_s: float = Field(1.0, gt=0, le=MAX_BUDGET_S)
    """Time bound of one `score_answer` call, in CPU seconds, as math grading's: a call past it grades wrong
    (reward 0) and counts in train/grade_timeouts."""
    start_s: float = Field(120.0, gt=0, le=3600)
    """Time bound, in wall-clock seconds, of importing reasoning-gym and generating the pool in the helper."""

    @field_validator("generator")
    @classmethod
    def _name(cls, value: str) -> str:
        if not GENERATOR_NAME.match(value):
            raise ValueError(f"{value!r} is not a generator name (lower-case letters, digits and _)")
        return value

    @field_validator("config")
    @classmethod
    def _own_keys(cls, value: dict) -> dict:
        for key in ("seed", "size"):
            if key in value:
                raise ValueError(f"{key}: give it as task.reasoning_gym.{key}, not in the generator's config")
        return value
