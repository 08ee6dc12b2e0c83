"""End to end on the real benchmark files: reference solutions fed as completions through MathTask.grade.

All 500 MATH-500 solutions must grade correct (about 2 s on 2 cores, so the full set runs here); the
other sets' agreement rates are printed (`pytest -s`) and pinned loosely. Full table:
`python benchmarks/grading_agreement.py`.
"""

from __future__ import annotations

import time

import pytest

from trainer.data import load_benchmark
from trainer.tasks.base import Group
from trainer.tasks.math import MathTask


def _agreement(problems, completions, template="qwen_math"):
    task = MathTask(problems, template=template)
    start = time.perf_counter()
    misses = [
        (p.answer, c[-80:])
        for p, c in zip(problems, completions)
        if not task.grade(Group(problem_id=p.id, answer=p.answer, prompts=("",)), 0, c).correct
    ]
    return 1 - len(misses) / len(problems), misses, time.perf_counter() - start


@pytest.mark.slow
def test_math500_reference_solutions_all_grade_correct():
    problems = load_benchmark("math500")
    assert len(problems) == 500
    rate, misses, seconds = _agreement(problems, [p.solution for p in problems])
    print(f"math500: {rate:.2%} of 500 reference solutions graded correct in {seconds:.1f} s")
    assert not misses, misses


@pytest.mark.parametrize("template", ["r1", "none"])
def test_math500_under_other_templates(template):
    """Under R1 a solution without `<answer>` tags falls back to its last box."""
    problems = load_benchmark("math500", limit=100)
    assert _agreement(problems, [p.solution for p in problems], template)[0] == 1.0


@pytest.mark.slow
@pytest.mark.parametrize("name, floor", [("gsm8k", 1.0), ("aime24", 0.9), ("math_test5000", 1.0)])
def test_other_sets_agreement_reported(name, floor):
    """GSM8K: the answer text with its `####` line; AIME: AoPS solutions, some without a box (28/30)."""
    problems = load_benchmark(name)
    rate, misses, seconds = _agreement(problems, [p.solution for p in problems])
    print(f"{name}: {rate:.2%} of {len(problems)} graded correct in {seconds:.1f} s; misses {misses[:3]}")
    assert rate >= floor, misses


@pytest.mark.slow
@pytest.mark.parametrize("name", ["amc23", "amc22_23", "olympiad_bench", "minerva"])
def test_answer_only_sets_grade_their_own_boxed_gold(name):
    problems = load_benchmark(name)
    rate, misses, _ = _agreement(problems, [f"The final answer is \\boxed{{{p.answer}}}." for p in problems])
    print(f"{name}: {rate:.2%} of {len(problems)} boxed golds graded correct")
    assert rate == 1.0, misses
