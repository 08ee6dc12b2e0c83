"""A grader's verdict on one completion: what every task's grader returns."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class RewardComponent:
    """One named part of a completion's reward, graded apart from the others (e.g. its format), for an advantage that
    normalises each part on its own (GDPO: objective.reward_components)."""

    name: str
    """The component's name, as objective.reward_components names it (not `reward` nor `overlong`, which are the
    task's reward and DAPO's soft overlong punishment)."""
    value: float
    """Its value for this completion."""


@dataclass(frozen=True)
class Grade:
    """The verdict on one completion."""

    reward: float
    """Task reward before any shaping (overlong punishment is added by the trainer)."""
    correct: bool
    """Whether the final answer is right."""
    info: dict[str, Any] = field(default_factory=dict)
    """Task-specific facts for metrics (e.g. filler tokens written); JSON-serialisable scalars."""
    timed_out: bool = False
    """Whether grading ran out of its time budget (the answer is then graded wrong); the training
    loop counts these per step."""
    components: tuple[RewardComponent, ...] = ()
    """The task's reward components beyond `reward` itself, one per name (the toy's `format`); empty for a task that
    grades none. Only an advantage that reads them (GDPO, objective.reward_components) uses them."""

    def component(self, name: str) -> float | None:
        """The value of component `name`, or None when this grade has none of that name."""
        return next((c.value for c in self.components if c.name == name), None)

    def unanswered(self) -> Grade:
        """This grade for a response cut off at the token budget, with no final answer: reward 0, wrong, and every
        component 0."""
        return replace(
            self, reward=0.0, correct=False, components=tuple(replace(c, value=0.0) for c in self.components)
        )
