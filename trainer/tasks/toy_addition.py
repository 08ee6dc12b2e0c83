"""The toy default task: multi-digit addition with a column-by-column scratchpad.

It is built to *demonstrate* GRPO's length bias, not to show that the bias
appears by itself at this scale. The bias needs two things, and the task gives
both on purpose:

- a failure the policy can see while generating: each sample of a group sees
  its own noisy copy of the problem, where with probability `hide_prob` one
  digit is shown as `?`; the scratchpad then writes a guessed digit for that
  column and marks the column with `?`, so the answer is almost always wrong
  and the model knows it guessed (`hide_scope: group` draws once for all G samples instead, as a real group shares
  one prompt);
- a length choice the reward ignores: after the answer come 0..`max_filler_blocks`
  filler blocks (`abcdefghijklmnop` for length 16) before end-of-sequence.

Trace format (prompt, then response), e.g. 457+68 with the tens digit of 457 hidden:

    prompt    4?7+68=
    response  7+8=15,3+6=10?4+0=05,>505!abcdefghijklmnop

Columns run from the units up as `a+b=ss`, where `ss` is the two-digit sum of
both digits and the carry from the column before; `,` ends a column and `?`
ends a guessed one. `>` opens the answer; `;` closes it, or `!` when the answer
rests on a guess. The reward checks only the answer (exact match with the true
sum) and ignores all that follows.

Why the guess shows at the answer's end: the length choice is made right after
it, and the bias needs the policy's state *there* to differ between failing and
succeeding samples. With the guess visible only in the scratchpad, one
large-batch update moved P(stop after the answer) identically for hidden-digit
and clean samples (+0.00042 vs +0.00041 under GRPO), so GRPO's 1/T pressure
moved every sample's length together and no bias appeared in 200 steps.
The tokenizer is character-level, so characters and tokens are the same count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from trainer.metric_names import task_metric
from trainer.rewards.grade import Grade, RewardComponent
from trainer.tasks.base import Group
from trainer.tasks.toy_addition_config import FILLER_ALPHABET, ToyAdditionConfig

CHARS = "0123456789+=,?>;!" + FILLER_ALPHABET
"""Every character a prompt or trace uses (the toy tokenizer's vocabulary)."""
ANSWER_OPEN, ANSWER_CLOSE, GUESSED_ANSWER_CLOSE = ">", ";", "!"
COLUMN_END, GUESSED_COLUMN_END = ",", "?"
HIDDEN = "?"


def _draw_operand(rng: np.random.Generator, config: ToyAdditionConfig) -> int:
    digits = int(rng.integers(config.min_digits, config.max_digits + 1))
    low = 0 if digits == 1 else 10 ** (digits - 1)
    return int(rng.integers(low, 10**digits))


def _operands(group: Group) -> tuple[str, str]:
    a, b = group.problem_id.split("+")
    return a, b


class ToyAdditionTask:
    """Addition problems with hidden digits (per sample, or per group) and a free filler length (see module doc)."""

    name = "toy_addition"

    def __init__(self, config: ToyAdditionConfig):
        self.config = config

    def sample_groups(self, rng: np.random.Generator, num_groups: int, group_size: int) -> list[Group]:
        """Draw problems `a+b`; each of the G samples hides a digit with `hide_prob`, independently, or all of them
        by one draw with hide_scope group."""
        groups = []
        for _ in range(num_groups):
            a, b = str(_draw_operand(rng, self.config)), str(_draw_operand(rng, self.config))
            shared = self._hide(rng, a, b) if self.config.hide_scope == "group" else None
            prompts, meta = [], []
            for _ in range(group_size):
                prompt, info = shared if shared is not None else self._hide(rng, a, b)
                info = dict(info)
                if self.config.random_reward is not None:  # drawn only when set: the default stream is unchanged
                    info["random_reward"] = float(rng.random() < self.config.random_reward)
                prompts.append(prompt)
                meta.append(info)
            groups.append(
                Group(problem_id=f"{a}+{b}", answer=str(int(a) + int(b)), prompts=tuple(prompts), meta=tuple(meta))
            )
        return groups

    def _hide(self, rng: np.random.Generator, a: str, b: str) -> tuple[str, dict[str, Any]]:
        """One prompt for `a+b`: with `hide_prob`, one digit (uniform over both operands') shown as `?`."""
        if rng.random() >= self.config.hide_prob:
            return f"{a}+{b}=", {"hidden_digit": False, "hidden_operand": None, "hidden_place": None}
        shown = [a, b]
        slot = int(rng.integers(len(a) + len(b)))
        operand, index = (0, slot) if slot < len(a) else (1, slot - len(a))
        text = shown[operand]
        shown[operand] = text[:index] + HIDDEN + text[index + 1 :]
        info = {"hidden_digit": True, "hidden_operand": operand, "hidden_place": len(text) - 1 - index}  # from units
        return f"{shown[0]}+{shown[1]}=", info

    def grade(self, group: Group, index: int, completion: str) -> Grade:
        """Reward 1 iff the text between the first `>` and the next `;` is the true sum.

        Everything after `;` is filler and ignored (counted in `info["filler_tokens"]`). One reward component beyond
        the reward (for GDPO, objective.reward_components): `format`, 1 iff the completion wrote an answer in the
        form `>digits;` (or `!`), right or wrong (`info["answered"]`).
        The completion has its special tokens removed, so a response truncated
        without end-of-sequence cannot be told apart here: the trainer must count
        it wrong from the rollout's `truncated` flag.
        """
        hidden = bool(group.meta[index]["hidden_digit"]) if group.meta else False
        answer, filler = parse_completion(completion)
        correct = answer is not None and answer == group.answer
        reward = group.meta[index].get("random_reward") if group.meta else None  # the random-reward control
        return Grade(
            reward=(1.0 if correct else 0.0) if reward is None else reward,
            correct=correct,
            info={"filler_tokens": filler, "hidden_digit": hidden, "answered": answer is not None},
            components=(RewardComponent("format", 1.0 if answer is not None else 0.0),),
        )

    def hints(self, group: Group, index: int) -> tuple[str, ...]:
        """Sample `index`'s hint ladder (rollout.hint): one level, its hidden digit shown where its prompt has `?`,
        i.e. the problem's clean prompt `a+b=` (`4?7+68=` → `457+68=`), which the base model reads as it reads every
        clean prompt of its SFT; none for a sample that hides nothing. The hint is the fact the prompt withheld, the
        most concrete hint there is (Scaf-GRPO's solution tier): the toy has no concept or plan to point to."""
        if not group.meta or not group.meta[index]["hidden_digit"]:
            return ()
        a, b = _operands(group)
        return (f"{a}+{b}=",)

    def step_metrics(
        self, groups: Sequence[Group], grades: Sequence[Sequence[Grade]], lengths: Sequence[Sequence[int]]
    ) -> dict[str, float]:
        """Filler and length split by correctness, accuracy split by hidden digit; undefined keys are left out."""
        flat = [(g, n) for gs, ns in zip(grades, lengths, strict=True) for g, n in zip(gs, ns, strict=True)]
        if not flat:
            return {}
        correct = [(g, n) for g, n in flat if g.correct]
        incorrect = [(g, n) for g, n in flat if not g.correct]
        hidden = [g for g, _ in flat if g.info["hidden_digit"]]
        clean = [g for g, _ in flat if not g.info["hidden_digit"]]
        out = {task_metric("hidden_digit_frac"): len(hidden) / len(flat)}
        if correct:
            out[task_metric("filler_tokens_correct_mean")] = _mean(g.info["filler_tokens"] for g, _ in correct)
        if incorrect:
            out[task_metric("filler_tokens_incorrect_mean")] = _mean(g.info["filler_tokens"] for g, _ in incorrect)
        if correct and incorrect:
            out[task_metric("length_gap")] = _mean(n for _, n in incorrect) - _mean(n for _, n in correct)
        if clean:
            out[task_metric("accuracy_clean")] = _mean(float(g.correct) for g in clean)
        if hidden:
            out[task_metric("accuracy_hidden")] = _mean(float(g.correct) for g in hidden)
        return out


def _mean(values) -> float:
    values = list(values)
    return float(sum(values) / len(values))


def parse_completion(completion: str) -> tuple[str | None, int]:
    """(answer digits or None when malformed, number of characters after the answer's `;` or `!`)."""
    start = completion.find(ANSWER_OPEN)
    ends = [i for i in (completion.find(c, start + 1) for c in (ANSWER_CLOSE, GUESSED_ANSWER_CLOSE)) if i >= 0]
    if start < 0 or not ends:
        return None, 0
    end = min(ends)
    answer = completion[start + 1 : end]
    filler = len(completion) - end - 1
    return (answer if answer.isdigit() and answer.isascii() else None), filler


PEAK_GUESS = 5
"""The habitual guess when `guess_peak` is set (a possible value of every digit, leading ones included)."""


def _guess(config: ToyAdditionConfig, rng: np.random.Generator) -> int:
    """SFT's guess for a hidden digit: uniform 0-9, or PEAK_GUESS with probability `guess_peak` and else
    uniform among the other nine."""
    if config.guess_peak is None:
        return int(rng.integers(10))
    if rng.random() < config.guess_peak:
        return PEAK_GUESS
    return [d for d in range(10) if d != PEAK_GUESS][int(rng.integers(9))]


def _slip(total: int, slip_prob: float | None, rng: np.random.Generator) -> int:
    """The column sum SFT's tutor writes: `total`, or with `slip_prob` one off (no draw at all when unset, so the
    traces of a config without slips are those of the toy before slips existed)."""
    if not slip_prob or rng.random() >= slip_prob:
        return total
    if total in (0, 19):  # 19 = 9 + 9 + carry, the largest column sum
        return 1 if total == 0 else 18
    return total + (1 if rng.random() < 0.5 else -1)


def target_trace(config: ToyAdditionConfig, group: Group, index: int, rng: np.random.Generator) -> str:
    """The full response SFT teaches for sample `index`: scratchpad, answer, filler (no EOS).

    A hidden digit is replaced by a guess (uniform 0-9 by default: right one time in ten),
    and the answer follows from the guess, so the trace stays consistent. The
    number of filler blocks is uniform in 0..max by default, independent of everything
    else; `filler_probs` and `guess_peak` make either choice peaked instead. With `slip_prob` a column's sum is
    written one off now and then, and what follows is computed from what was written.
    """
    a, b = _operands(group)
    info = group.meta[index] if group.meta else {"hidden_digit": False}
    guess = _guess(config, rng) if info["hidden_digit"] else None
    if config.filler_probs is None:
        blocks = int(rng.integers(config.max_filler_blocks + 1))
    else:
        blocks = int(
            rng.choice(config.max_filler_blocks + 1, p=np.asarray(config.filler_probs) / sum(config.filler_probs))
        )
    columns, carry, answer = [], 0, 0
    for place in range(max(len(a), len(b))):
        digits = [int(x[-1 - place]) if place < len(x) else 0 for x in (a, b)]
        guessed = guess is not None and place == info["hidden_place"]
        if guessed:
            digits[info["hidden_operand"]] = guess
        total = _slip(digits[0] + digits[1] + carry, config.slip_prob, rng)
        columns.append(f"{digits[0]}+{digits[1]}={total:02d}" + (GUESSED_COLUMN_END if guessed else COLUMN_END))
        answer += (total % 10) * 10**place
        carry = total // 10
    answer += carry * 10 ** max(len(a), len(b))
    filler = FILLER_ALPHABET[: config.filler_block_len] * blocks
    close = GUESSED_ANSWER_CLOSE if guess is not None else ANSWER_CLOSE
    return "".join(columns) + ANSWER_OPEN + str(answer) + close + filler
