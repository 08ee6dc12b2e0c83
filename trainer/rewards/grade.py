"""A grader's verdict on one completion: what every task's grader returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
