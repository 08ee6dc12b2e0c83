"""How long the math grader takes on adversarial completions: every case must grade wrong in ≤ 1 s.

    python benchmarks/grader_adversarial.py

Each completion goes through the training loop's path (`MathTask.grade`: answer extraction, then
`grade_math` on the boxed answer) and through `grade_math` on the raw text (math-verify's own
extraction). seconds = the slower of the two in wall-clock time, grader warm (the loop builds its task
before step 1); cpu s = the CPU time it used, this process and the grader's together, which is what the
wall-clock time is on an idle machine (the budget is CPU time: see trainer/rewards/math_verify.py).
Prints a table (case, seconds, cpu s, graded, timed out) and writes results/benchmarks/grader_adversarial.json;
the acceptance is max seconds ≤ 1 on an idle machine (exit status 1 otherwise).
`CASES` is also the adversarial battery of tests/test_math_reward.py.
"""

from __future__ import annotations

import os
import sys
import time

GOLD = "5"


def cases(sentinel: str) -> list[tuple[str, str]]:
    """(name, completion) pairs, all of them wrong answers to `GOLD`; `sentinel` is a path that code
    execution would create."""
    run = f"__import__('os').system('touch {sentinel}')"
    frac = "\\frac{1}{" * 300 + "2" + "}" * 300
    matrix = " \\\\ ".join(" & ".join(str(i * 30 + j) for j in range(30)) for i in range(30))
    return [
        # inputs known to hang naive graders: a power tower, deep nesting, long sums, a large matrix
        ("power tower 10^10^10^10", "\\boxed{10^{10^{10^{10}}}}"),
        ("\\frac nested 300 deep", f"the answer is \\boxed{{{frac}}}"),
        ("1+1+... 100 kB", "so " + "1+" * 50_000 + "1"),
        ("boxed 1+1+... 20 kB", "\\boxed{" + "1+" * 10_000 + "1}"),
        ("pmatrix 30x30", f"\\boxed{{\\begin{{pmatrix}} {matrix} \\end{{pmatrix}}}}"),
        ("#### 1 1 1 ... 100 kB", "#### " + "1 " * 50_000),
        # our own
        ("power tower 9^9^9^9 plain", "so the answer is 9^{9^{9^9}}"),
        ("power tower 9^9^9^9 no braces", "the answer is 9^9^9^9"),
        ("power 9^{9^9} boxed", "\\boxed{9^{9^9}}"),
        ("factorial 100000!", "\\boxed{100000!}"),
        ("double factorial tower", "\\boxed{(10!)!}"),
        ("deep parentheses 5000", "\\boxed{" + "(" * 5000 + "1" + ")" * 5000 + "}"),
        ("deep sqrt 100", "\\boxed{" + "\\sqrt{" * 100 + "2" + "}" * 100 + "}"),
        ("huge integer 15k digits", "\\boxed{" + "9" * 15_000 + "}"),
        ("polynomial expansion", "\\boxed{(x+1)^{100000}}"),
        ("sum to 10^9", "\\boxed{\\sum_{n=1}^{10^{9}} n^n}"),
        ("integral of a tower", "\\boxed{\\int_0^1 x^{x^{x^{x}}} dx}"),
        ("2000 boxes", "\\boxed{1}, " * 2000),
        ("1 MB of text", "x+" * 500_000),
        ("unicode", "\\boxed{🙂∑∫ℵ₀ " + "ü" * 5000 + "}"),
        ("NUL and control characters", "\\boxed{\x00\x01\x1b[2J\x7f}"),
        ("python in a box", f"\\boxed{{{run}}}"),
        ("python as plain text", f"the answer is {run}"),
        ("python in an answer tag", f"<answer>{run}</answer>"),
        ("python in \\text", f"\\boxed{{\\text{{{run}}}}}"),
        ("eval in a box", f'\\boxed{{eval("{run}")}}'),
        ("lambda in a box", f"\\boxed{{(lambda: {run})()}}"),
        ("sympy Function call", f"\\boxed{{Lambda(x, {run})(1)}}"),
    ]


def measure(sentinel: str) -> list[dict[str, object]]:
    from trainer.data.records import Problem
    from trainer.rewards import grade_math
    from trainer.tasks.base import Group
    from trainer.tasks.math import MathTask

    task = MathTask([Problem(id="p", question="q", answer=GOLD)], template="r1")
    group = Group(problem_id="p", answer=GOLD, prompts=("",))
    assert task.grade(group, 0, "\\boxed{5}").correct  # the grader is started and warm
    rows = []
    for name, completion in cases(sentinel):
        cpu0, start = _cpu_s(), time.perf_counter()
        via_task = task.grade(group, 0, completion)
        cpu1, mid = _cpu_s(), time.perf_counter()
        raw = grade_math(completion, GOLD)
        cpu2, end = _cpu_s(), time.perf_counter()
        rows.append(
            {
                "case": name,
                "seconds": round(max(mid - start, end - mid), 3),
                "cpu_s": round(max(cpu1 - cpu0, cpu2 - cpu1), 3),
                "graded": "right" if via_task.correct or raw.correct else "wrong",
                "timed_out": via_task.timed_out or raw.timed_out,
            }
        )
    return rows


def _cpu_s() -> float:
    """CPU seconds of this process, the grader helper, its reaped children and its live one (Linux)."""
    from trainer.rewards.math_verify import _HELPER

    def proc(pid: int, reaped: bool) -> float:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            return 0.0
        ticks = sum(int(x) for x in fields[11 : 15 if reaped else 13])
        return ticks / os.sysconf("SC_CLK_TCK")

    if _HELPER._process is None:
        return time.process_time()
    helper = _HELPER._process.pid
    try:
        with open(f"/proc/{helper}/task/{helper}/children") as f:
            live = [int(pid) for pid in f.read().split()]
    except FileNotFoundError:
        live = []
    return time.process_time() + proc(helper, True) + sum(proc(pid, False) for pid in live)


def main() -> None:
    from _report import write_json

    sentinel = "/tmp/harness_grader_sentinel"
    if os.path.exists(sentinel):
        os.remove(sentinel)
    rows = measure(sentinel)
    executed = os.path.exists(sentinel)
    width = max(len(r["case"]) for r in rows)
    print(f"{'case':<{width}}  seconds  cpu s  graded  timed out")
    for r in rows:
        print(f"{r['case']:<{width}}  {r['seconds']:7.3f}  {r['cpu_s']:5.2f}  {r['graded']:<6}  {r['timed_out']}")
    worst, worst_cpu = max(r["seconds"] for r in rows), max(r["cpu_s"] for r in rows)
    load = os.getloadavg()
    print(
        f"max {worst:.3f} s ({worst_cpu:.2f} CPU s) over {len(rows)} cases; "
        f"all wrong: {all(r['graded'] == 'wrong' for r in rows)}; "
        f"code executed: {executed}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    write_json(
        "grader_adversarial",
        {"max_seconds": worst, "max_cpu_s": worst_cpu, "code_executed": executed, "load_average": load, "cases": rows},
    )
    sys.exit(1 if executed or worst > 1.0 or any(r["graded"] != "wrong" for r in rows) else 0)


if __name__ == "__main__":
    main()
