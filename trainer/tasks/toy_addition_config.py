"""Settings of the toy addition task, apart from the task (no numpy), so a run config validates fast."""

from __future__ import annotations

import string

from pydantic import BaseModel, Field, model_validator

from trainer.config import STRICT

FILLER_ALPHABET = string.ascii_lowercase
"""Filler blocks are prefixes of this: every next filler token is trivial, only block ends are choices."""


class ToyAdditionConfig(BaseModel):
    """Settings of the toy addition task (problem mix, hidden digits, filler)."""

    model_config = STRICT

    min_digits: int = Field(1, ge=1, le=9)
    """Fewest digits of an operand; each operand draws its digit count uniformly in [min, max]."""
    max_digits: int = Field(4, ge=1, le=9)
    """Most digits of an operand (4 keeps the longest trace at 68 tokens with 2 filler blocks)."""
    hide_prob: float = Field(0.4, ge=0.0, le=1.0)
    """Chance that a sample's prompt hides one digit (uniform over the digits of both operands) as `?`:
    the visible failure signal the length bias needs."""
    filler_block_len: int = Field(16, ge=1, le=len(FILLER_ALPHABET))
    """Tokens per filler block. With 16 the bias showed in every seed tried; with 9 in one of three."""
    max_filler_blocks: int = Field(2, ge=0)
    """Target traces append 0..max filler blocks, drawn uniformly and independently of correctness,
    so the SFT model starts with no length/correctness link; the grader accepts any amount."""

    @model_validator(mode="after")
    def _check_digits(self) -> "ToyAdditionConfig":
        if self.min_digits > self.max_digits:
            raise ValueError("min_digits must not exceed max_digits")
        return self

    @property
    def max_prompt_len(self) -> int:
        """Tokens of the longest prompt `a+b=` (characters are tokens)."""
        return 2 * self.max_digits + 2
