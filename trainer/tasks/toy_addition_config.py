"""Settings of the toy addition task, apart from the task (no numpy), so a run config validates fast."""

from __future__ import annotations

import math
import string
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

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
    hide_scope: Literal["sample", "group"] = "sample"
    """What one hiding draw covers. sample (the default toy): each of a group's G prompts hides a digit on its own, so
    a group mixes hidden and clean prompts and GRPO sees reward variance within it. group: one draw per group, the same
    digit hidden (or none) in all G prompts, as a real group shares one prompt; a baseline read from a sibling's
    response (POISE's probe) can then know this response's prompt. An RL setting (task.toy_addition): SFT draws one
    prompt per problem, so model.toy.task refuses any scope but sample."""
    filler_block_len: int = Field(16, ge=1, le=len(FILLER_ALPHABET))
    """Tokens per filler block. With 16 the bias showed in every seed tried; with 9 in one of three."""
    max_filler_blocks: int = Field(2, ge=0)
    """Target traces append 0..max filler blocks, drawn uniformly and independently of correctness,
    so the SFT model starts with no length/correctness link; the grader accepts any amount."""

    filler_probs: tuple[Annotated[float, Field(ge=0.0, le=1.0)], ...] | None = Field(None, strict=False)
    """SFT traces: the probabilities of 0, 1, ..., max_filler_blocks filler blocks (null = uniform, the default
    toy). A peaked choice (say 0.8/0.1/0.1) has the shape DAPO's clip-higher argument is about: rare tokens that
    an update may raise by at most a factor 1 + eps_high."""
    guess_peak: float | None = Field(None, gt=0.0, lt=1.0)
    """SFT traces: a hidden digit is guessed as 5 with this probability, else uniformly among the other nine
    (null = uniformly among all ten, the default toy). 5 is a possible value of every digit, leading ones
    included, so the habit costs no accuracy; it only makes the guess a peaked choice."""
    slip_prob: float | None = Field(None, ge=0.0, lt=1.0)
    """SFT traces: each column's written sum is off by one (up or down, at random; 0 and 19 only move inward) with
    this probability, and the carry and the answer follow what was written, so the trace is consistent and wrong
    (null = no slips). A tutor that slips leaves the SFT model slipping at the same rate, a gap RL can close: on a
    clean prompt the reward tells a slipped sample from a right one of the same group, and the slip is one token."""

    random_reward: float | None = Field(None, ge=0.0, le=1.0)
    """RL grading: the reward is 1 with this probability, drawn per sample independently of its response, and 0
    otherwise (a truncated response still gets 0); correctness is still graded and logged (train/accuracy). The
    random-reward control of arXiv 2509.26114: what clipping does to entropy when the reward carries no signal
    (null = the true reward)."""

    @model_validator(mode="after")
    def _check_digits(self) -> ToyAdditionConfig:
        if self.min_digits > self.max_digits:
            raise ValueError("min_digits must not exceed max_digits")
        if self.filler_probs is not None:
            if len(self.filler_probs) != self.max_filler_blocks + 1:
                raise ValueError(
                    f"filler_probs needs max_filler_blocks + 1 = {self.max_filler_blocks + 1} "
                    f"probabilities, got {len(self.filler_probs)}"
                )
            if not math.isclose(sum(self.filler_probs), 1.0, abs_tol=1e-6):
                raise ValueError(f"filler_probs must sum to 1, got {sum(self.filler_probs):g}")
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict:
        """Unset peaked-choice fields and hide_scope at its default are left out of dumps, so the default toy's build
        hash and every job id that does not use them stay what they were before the fields existed."""
        data = handler(self)
        for key in ("filler_probs", "guess_peak", "slip_prob", "random_reward"):
            if data.get(key, 0) is None:
                del data[key]
        if data.get("hide_scope") == "sample":
            del data["hide_scope"]
        return data

    @property
    def reported_keys(self) -> tuple[str, ...]:
        """The per-sample facts the toy reports (what objective.stratum_key may name), sorted: its groups' `meta`
        (hidden_digit, hidden_operand, hidden_place; random_reward when set) and its grades' `info` (hidden_digit,
        answered, filler_tokens)."""
        keys = {"hidden_digit", "hidden_operand", "hidden_place", "answered", "filler_tokens"}
        return tuple(sorted(keys | ({"random_reward"} if self.random_reward is not None else set())))

    @property
    def reward_components(self) -> tuple[str, ...]:
        """The reward components the toy grades beyond its reward (what objective.reward_components may name besides
        `reward` and `overlong`): format (an answer in the form `>digits;` was written)."""
        return ("format",)

    @property
    def max_prompt_len(self) -> int:
        """Tokens of the longest prompt `a+b=` (characters are tokens)."""
        return 2 * self.max_digits + 2
