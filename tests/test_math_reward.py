"""grade_math on real MATH-500 golds, on perturbed and equivalent answers, on garbage and off the main thread."""

from __future__ import annotations

import math
import re
import sys
import threading
import time
from pathlib import Path

import pytest

from trainer.data import load_records
from trainer.data.benchmarks import benchmark_path
from trainer.rewards import grade_math
from trainer.rewards.grade import Grade

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from grader_adversarial import GOLD, _cpu_s, cases  # the benchmark's battery: one home

RUNAWAY = "\\boxed{9^{9^{9^{9}}}}"
"""A comparison sympy would not finish."""


@pytest.fixture(scope="module")
def math500() -> list[dict]:
    return load_records(benchmark_path("math500"))


def test_reference_answers_grade_correct(math500):
    items = math500[:100]
    grades = [
        grade_math(f"Adding it all up, the answer is \\boxed{{{item['answer']}}}.", item["answer"]) for item in items
    ]
    rate = sum(g.correct for g in grades) / len(items)
    misses = [item["answer"] for item, g in zip(items, grades) if not g.correct]
    print(f"MATH-500 first {len(items)}: boxed reference answers graded correct {rate:.2%}; misses {misses}")
    assert rate == 1.0, misses  # measured 500/500 over the whole file
    assert all(g.reward == 1.0 and g.info["extracted"] for g in grades)


def test_reference_solutions_grade_correct(math500):
    """The full worked solution, whose last box holds the answer, also grades correct."""
    items = math500[:50]
    misses = [item["answer"] for item in items if not grade_math(item["solution"], item["answer"]).correct]
    assert not misses


def test_perturbed_answers_grade_wrong(math500):
    items = math500[:100]
    integers = [item for item in items if re.fullmatch(r"-?\d+", item["answer"].strip())]
    assert len(integers) > 30
    for item in integers:
        grade = grade_math(f"the answer is \\boxed{{{int(item['answer']) + 1}}}", item["answer"])
        assert not grade.correct and grade.reward == 0.0, item["answer"]
    # every item against its neighbour's answer: math-verify itself accepts `x=5` for a gold `5`
    accepted = [
        (item["answer"], other["answer"])
        for item, other in zip(items, items[1:] + items[:1])
        if grade_math(f"the answer is \\boxed{{{other['answer']}}}", item["answer"]).correct
    ]
    assert set(accepted) <= {("5", "x=5")}, accepted


@pytest.mark.parametrize(
    "gold, answer, correct",
    [
        ("\\frac{1}{2}", "0.5", True),
        ("0.5", "\\frac{1}{2}", True),
        ("\\frac12", "\\dfrac{1}{2}", True),
        ("3\\sqrt{13}", "\\sqrt{117}", True),
        ("x^2+2x+1", "(x+1)^2", True),
        ("1000", "1{,}000", True),
        ("5", "x=5", True),  # an assignment's right-hand side counts
        ("\\frac{1}{3}", "0.333333", True),  # numbers compared to 6 decimals
        ("\\frac{1}{3}", "0.33", False),
        ("(1, 2]", "[1,2]", False),
        ("\\pi", "3.14159", False),
        ("\\boxed{7}", "7", True),  # a gold that is already boxed is not boxed twice
    ],
)
def test_equivalent_forms_as_math_verify_decides(gold, answer, correct):
    """Pins math-verify's verdicts, so that an upgrade that changes them shows up here."""
    assert grade_math(f"so the answer is \\boxed{{{answer}}}", gold).correct is correct


def test_several_boxed_answers_are_read_as_a_set():
    """math-verify does not take the last box: it reads all of them as one set of answers."""
    assert not grade_math("first \\boxed{3}, no wait: \\boxed{4}", "4").correct
    assert grade_math("first \\boxed{3}, no wait: \\boxed{4}", "\\{3, 4\\}").correct
    assert grade_math("\\boxed{3} was wrong; the final answer is 4", "4").correct


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "   ",
        "}}}{{",
        "\\boxed{",
        "\\boxed{\\frac{",
        "$$$",
        "\\\\\\",
        "🙂 ∑∫ \x00",
        "9" * 5000,
        "\\boxed{}" * 200,
        None,
    ],
)
def test_garbage_grades_zero_without_raising(garbage):
    grade = grade_math(garbage, "42")
    assert grade.reward == 0.0 and grade.correct is False and isinstance(grade.info["extracted"], str)


def test_budget_must_be_a_positive_finite_number():
    for bad in (0, -1, 0.0, math.nan, math.inf, "5", True, None):
        with pytest.raises(ValueError, match="budget_s"):
            grade_math("\\boxed{5}", "5", budget_s=bad)
    assert grade_math("\\boxed{5}", "5", budget_s=0.5).correct


def _grade_runaway() -> tuple[Grade, float, bool]:
    """grade_math on RUNAWAY, the grader warm: (the grade; the CPU seconds it cost, this process's and the grader's;
    whether the grader's helper is the same process after it). The budget is CPU time (1 s), which a busy machine
    hardly changes where it stretches wall-clock time; the same helper shows that its child was killed at that budget,
    not the helper at the caller's wall-clock ceiling (WALL_FACTOR x the budget + 5 s)."""
    from trainer.rewards import math_verify

    assert grade_math("\\boxed{5}", "5").correct  # warm: starting the helper is not this call's cost
    helper, cpu = math_verify._HELPER._process.pid, _cpu_s()
    grade = grade_math(RUNAWAY, "5")
    cpu = _cpu_s() - cpu
    return grade, cpu, math_verify._HELPER._process is not None and math_verify._HELPER._process.pid == helper


def test_runaway_comparison_is_cut_at_the_budget():
    grade, cpu, same_helper = _grade_runaway()
    assert not grade.correct and grade.timed_out and cpu < 1.5 and same_helper, (grade, cpu, same_helper)
    assert grade_math("\\boxed{5}", "5").correct  # and the next answer is graded as usual


def test_grades_from_another_thread():
    results = {}

    def work():
        results["right"] = grade_math("the answer is \\boxed{\\dfrac{1}{2}}", "0.5")
        results["wrong"] = grade_math("the answer is \\boxed{3}", "0.5")

    worker = threading.Thread(target=work)
    worker.start()
    worker.join(60)
    assert results["right"].correct and results["right"].reward == 1.0
    assert not results["wrong"].correct


def test_runaway_comparison_times_out_in_another_thread():
    """Any thread may grade; a runaway is killed at the budget, and the next grade works."""
    results = {}

    def work():
        results["runaway"], results["cpu"], results["same helper"] = _grade_runaway()
        results["after"] = grade_math("\\boxed{5}", "5")

    worker = threading.Thread(target=work)
    worker.start()
    worker.join(120)  # a hang guard: the grader's own ceiling is 15 s
    runaway = results["runaway"]
    assert not runaway.correct and runaway.timed_out and results["cpu"] < 1.5 and results["same helper"], results
    assert results["after"].correct and not results["after"].timed_out


@pytest.mark.slow
def test_a_dead_helper_is_restarted():
    from trainer.rewards import math_verify

    def grade(out):
        out.append(grade_math("\\boxed{\\frac{2}{4}}", "0.5"))

    first, second = [], []
    for out in (first, None, second):
        if out is None:  # kill the helper between the two grades
            math_verify._HELPER._process.kill()
            math_verify._HELPER._process.wait()
            continue
        worker = threading.Thread(target=grade, args=(out,))
        worker.start()
        worker.join(120)
    assert first[0].correct and second[0].correct


# ---- adversarial completions: bounded CPU time, graded wrong, nothing executed ----------


@pytest.mark.slow
def test_adversarial_completions_grade_wrong_within_the_cpu_budget_and_run_nothing(tmp_path):
    """Each case through the training loop's path and through grade_math on the raw text: wrong, within
    a generous bound of CPU time (the budget is 1 s of CPU time, which is wall-clock time on an idle
    machine: see the benchmark; a busy test machine stretches wall-clock time), and the sentinel file
    that executing the Python in some of them would create never appears."""
    from trainer.data.records import Problem
    from trainer.tasks.base import Group
    from trainer.tasks.math import MathTask

    sentinel = tmp_path / "executed"
    task = MathTask([Problem(id="p", question="q", answer=GOLD)], template="r1")
    group = Group(problem_id="p", answer=GOLD, prompts=("",))
    assert task.grade(group, 0, "so \\boxed{5}").correct
    for name, completion in cases(str(sentinel)):
        for path, grade in (("task", lambda c: task.grade(group, 0, c)), ("raw", lambda c: grade_math(c, GOLD))):
            cpu, start = _cpu_s(), time.perf_counter()
            g = grade(completion)
            cpu, seconds = _cpu_s() - cpu, time.perf_counter() - start
            assert not g.correct and g.reward == 0.0, (name, path)
            # 15 s of wall-clock time: the grader's own ceiling (WALL_FACTOR x the budget + 5 s), a hang guard
            assert cpu < 1.5 and seconds < 15, (name, path, cpu, seconds)
            assert not sentinel.exists(), (name, path)
    # normal answers are still graded right after all those kills
    for answer, gold in [("\\frac{1}{2}", "0.5"), ("3\\sqrt{13}", "\\sqrt{117}"), ("(x+1)^2", "x^2+2x+1")]:
        assert task.grade(Group(problem_id="p", answer=gold, prompts=("",)), 0, f"\\boxed{{{answer}}}").correct


@pytest.mark.parametrize("expr", ["__import__('os').system('touch X')", "eval('1')", "x", "1+a", "().__class__"])
def test_parse_expr_guard_refuses_anything_but_arithmetic(expr):
    """math-verify hands plain-text matches to sympy's parse_expr, which evals: the grader's guard lets
    only numbers and arithmetic operators through."""
    from trainer.rewards.math_verify import _safe_parse_expr

    with pytest.raises(ValueError, match="refused"):
        _safe_parse_expr(expr)
    assert _safe_parse_expr("2**3 + (4 - 1)/2", evaluate=False).equals(9.5)


def test_too_long_or_too_deep_is_wrong_without_parsing():
    from trainer.rewards.math_verify import MAX_CHARS, MAX_DEPTH, too_complex

    assert too_complex("1" * (MAX_CHARS + 1)) and not too_complex("1" * MAX_CHARS)
    assert too_complex("{" * (MAX_DEPTH + 1)) and not too_complex("{" * MAX_DEPTH + "}" * MAX_DEPTH)
    assert not too_complex("\\boxed{\\frac{\\sqrt{3}}{2}}")
