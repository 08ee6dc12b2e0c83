"""The example's reward functions: partial credit for the sum, and a format check.

harness calls each as `f(completion=..., reference=..., prompt=...)`: `completion` is the response text, `reference`
the dataset row (here `problem`, `answer` and `hidden`), `prompt` the prompt the model saw. The toy model answers as
`7+8=15,3+6=10,4+0=05,>505;` then filler: column sums from the units up, `>` before the answer, `;` after it
(`!` when it guessed a hidden digit).
"""

from __future__ import annotations


def _answer(completion: str) -> str | None:
    """The digits between the first `>` and the next `;` or `!`, None when there are none."""
    start = completion.find(">")
    ends = [i for i in (completion.find(c, start + 1) for c in ";!") if i >= 0]
    if start < 0 or not ends:
        return None
    answer = completion[start + 1 : min(ends)]
    return answer if answer.isdigit() and answer.isascii() else None


def partial_credit(completion: str, reference: dict, prompt: str) -> dict:
    """1 for the exact sum (correct); else half the share of the sum's digits right, place by place from the units.

    Besides `reward` and `correct`, the mapping's numbers are logged as task/<name> each step: `answered` (an answer
    was found) and `digits_right` (the share of the sum's places right)."""
    answer, gold = _answer(completion), str(reference["answer"])
    if answer is None:
        return {"reward": 0.0, "correct": False, "answered": 0.0, "digits_right": 0.0}
    places = max(len(answer), len(gold))
    right = sum(a == b for a, b in zip(reversed(answer), reversed(gold))) / places
    correct = answer == gold
    return {"reward": 1.0 if correct else 0.5 * right, "correct": correct, "answered": 1.0, "digits_right": right}


def well_formed(completion: str, reference: dict, prompt: str) -> float:
    """Format check: 1.0 when the scratchpad has one column per place of the longer operand before the answer."""
    a, b = prompt.rstrip("=").split("+")
    head = completion.partition(">")[0]
    columns = head.count(",") + head.count("?")
    return 1.0 if _answer(completion) is not None and columns == max(len(a), len(b)) else 0.0
