"""What a task is: groups of prompts with a gold answer, and a grader.

A group is one problem answered G times. Most tasks show every sample the same
prompt; the toy task shows each sample its own noisy copy of the problem, so
prompts are per sample.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from trainer.rewards.grade import Grade


@dataclass(frozen=True)
class Group:
    """One problem and the G prompts its samples see."""

    problem_id: str
    """Stable id of the problem (the same problem gets the same id in every run)."""
    answer: str
    """Gold answer, as the grader expects it."""
    prompts: tuple[str, ...]
    """Prompt text of each sample (length G)."""
    meta: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    """Per-sample task facts (e.g. which digit was hidden); empty or length G."""


class Task(Protocol):
    """A source of training groups and a grader for their completions: the contract a task class of the user's
    (`task.custom.class`, docs/tasks.md) implements. `sample_groups` must draw from its `rng` only, so a seed makes
    the run reproducible; `grade` should bound its own time when a model's output can make it slow
    (`trainer.rewards.bounded.BoundedService`)."""

    name: str

    def sample_groups(self, rng: np.random.Generator, num_groups: int, group_size: int) -> list[Group]:
        """Draw `num_groups` problems, each with `group_size` prompts, from `rng` only."""
        ...

    def grade(self, group: Group, index: int, completion: str) -> Grade:
        """Grade the completion of sample `index` of `group` (text after the prompt, special tokens removed)."""
        ...

    def step_metrics(
        self, groups: Sequence[Group], grades: Sequence[Sequence[Grade]], lengths: Sequence[Sequence[int]]
    ) -> dict[str, float]:
        """Task metrics for one step (names from `trainer.metric_names.task_metric`); may be empty."""
        ...


class HintingTask(Task, Protocol):
    """A task that gives hints (rollout.hint, trainer/hints.py): what Scaf-GRPO and HiLL's reasoner update add to the
    prompt of a group whose every response is wrong."""

    def hints(self, group: Group, index: int) -> tuple[str, ...]:
        """Sample `index`'s prompt with a hint added, one prompt per level of its hint ladder, the most abstract first
        (Scaf-GRPO's ladder runs from a concept to a concrete step); empty when the sample has no hint. A hinted
        response is graded as sample `index`'s (`grade(group, index, completion)`), so the hint must keep its
        answer."""
        ...
