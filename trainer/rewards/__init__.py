"""Verifiable rewards: graders that turn a completion and a gold answer into a `Grade`."""

from trainer.rewards.math_verify import grade_math

__all__ = ["grade_math"]
