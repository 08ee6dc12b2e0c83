"""The cosine length reward (objective.length_reward: cosine) against TRL's own function, on random cases.

    python benchmarks/cosine_reward_vs_trl.py [--cases 300] [--seed 0]

harness's `cosine_scaled_reward` against TRL 1.16's `trl.rewards.get_cosine_scaled_reward`, imported and called as a
trainer calls it: completions, solutions and completion ids, correctness graded by TRL's own `accuracy_reward`
(math_verify). Each case draws a budget L_max (1-4096 tokens), the four values (TRL's defaults, the paper's §4.2 run
(2, 1) / (−10, 0), or drawn in [−10, 10]) and 8 responses: a length in [0, 1.5·L_max] (past the budget too, where TRL
caps the ratio at 1; exactly 0 and L_max in every case) and a right or wrong boxed integer answer against the case's
solution. TRL maps to harness's pairs as max_value_correct = r_0^c, min_value_correct = r_L^c, min_value_wrong =
r_0^w, max_value_wrong = r_L^w. No response is truncated (TRL has no value for one: harness's cosine_exceed is not
compared). Prints the largest absolute difference per case family and overall, and whether TRL's grade agreed with
the answer drawn each time; writes results/benchmarks/cosine_reward_vs_trl.json. Both in float64 (TRL in Python
floats).
"""

from __future__ import annotations

import numpy as np
import torch
from _report import random_cases_args, write_json

from trainer.objective import cosine_scaled_reward

FAMILIES = ("TRL's defaults", "the paper's §4.2", "drawn values", "short budgets")
RESPONSES = 8


def _case(rng: np.random.Generator, family: str) -> dict:
    """One parameter set and its 8 responses (lengths, right or wrong)."""
    max_len = int(rng.integers(1, 9)) if family == "short budgets" else int(rng.integers(1, 4097))
    if family == "TRL's defaults":
        correct, wrong = (1.0, 0.5), (-1.0, -0.5)
    elif family == "the paper's §4.2":
        correct, wrong = (2.0, 1.0), (-10.0, 0.0)
    else:
        correct, wrong = tuple(rng.uniform(-10, 10, 2)), tuple(rng.uniform(-10, 10, 2))
    lengths = rng.integers(0, int(1.5 * max_len) + 1, RESPONSES)
    lengths[:2] = (0, max_len)
    return {
        "max_len": max_len,
        "correct": tuple(map(float, correct)),
        "wrong": tuple(map(float, wrong)),
        "lengths": [int(t) for t in lengths],
        "right": [bool(x) for x in rng.random(RESPONSES) < 0.5],
        "answer": int(rng.integers(0, 10_000)),
    }


def trl_rewards(case: dict) -> tuple[list[float], list[bool]]:
    """TRL's rewards for the case's responses, and TRL's own verdicts (its `accuracy_reward`)."""
    from trl.rewards import accuracy_reward, get_cosine_scaled_reward

    reward = get_cosine_scaled_reward(
        max_len=case["max_len"],
        min_value_wrong=case["wrong"][0],
        max_value_wrong=case["wrong"][1],
        min_value_correct=case["correct"][1],
        max_value_correct=case["correct"][0],
    )
    given = [case["answer"] if ok else case["answer"] + 1 for ok in case["right"]]
    completions = [[{"role": "assistant", "content": f"So the answer is \\boxed{{{a}}}."}] for a in given]
    solution = [str(case["answer"])] * RESPONSES
    ids = [[1] * t for t in case["lengths"]]
    verdicts = [bool(v) for v in accuracy_reward(completions, solution)]
    return reward(completions, solution, ids), verdicts


def harness_rewards(case: dict) -> list[float]:
    return cosine_scaled_reward(
        torch.tensor(case["right"]),
        torch.tensor(case["lengths"]),
        torch.zeros(RESPONSES, dtype=torch.bool),
        case["max_len"],
        case["correct"],
        case["wrong"],
    ).tolist()


def main() -> None:
    args, rng = random_cases_args(__doc__)
    worst: dict[str, float] = {}
    counts: dict[str, int] = {}
    disagreements = 0
    past_budget = 0
    for i in range(args.cases):
        family = FAMILIES[i % len(FAMILIES)]
        case = _case(rng, family)
        theirs, verdicts = trl_rewards(case)
        disagreements += sum(v != r for v, r in zip(verdicts, case["right"]))
        past_budget += sum(t > case["max_len"] for t in case["lengths"])
        diff = float(np.max(np.abs(np.array(harness_rewards(case)) - np.array(theirs))))
        worst[family] = max(worst.get(family, 0.0), diff)
        counts[family] = counts.get(family, 0) + 1
    print(f"{'case family':20} {'cases':>5} {'responses':>9} {'largest |difference|':>21}")
    for family in FAMILIES:
        print(f"{family:20} {counts[family]:5d} {counts[family] * RESPONSES:9d} {worst[family]:21.3g}")
    overall = max(worst.values())
    print(f"{'all':20} {args.cases:5d} {args.cases * RESPONSES:9d} {overall:21.3g}")
    print(f"responses past the budget (TRL's cap at 1): {past_budget}")
    print(f"responses TRL graded unlike the answer drawn: {disagreements}")
    write_json(
        "cosine_reward_vs_trl",
        {
            "cases": args.cases,
            "seed": args.seed,
            "responses": args.cases * RESPONSES,
            "largest": overall,
            "by_family": worst,
            "cases_by_family": counts,
            "past_budget": past_budget,
            "grade_disagreements": disagreements,
        },
    )


if __name__ == "__main__":
    main()
