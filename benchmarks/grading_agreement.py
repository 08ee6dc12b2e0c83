"""Does the grading path accept the references? Reference text fed as a completion through MathTask.grade.

    python benchmarks/grading_agreement.py [--limit N] [--sets math500 gsm8k ...] [--template qwen_math]

Completion per set: the worked `solution` where the set has one (math500, math_test5000, aime24), GSM8K's
answer text with its `####` line, else `The final answer is \\boxed{<raw answer>}` for every raw answer value
(every alternative of a list answer, floats as written: 27.0). Agreement = share graded correct.
Prints a table and writes results/benchmarks/grading_agreement.json.
"""

from __future__ import annotations

import argparse
import time

from _report import write_json

from trainer.data.benchmarks import BENCHMARKS, benchmark_path, data_dir, load_benchmark
from trainer.data.records import load_records, normalise_question
from trainer.tasks.base import Group
from trainer.tasks.math import MathTask


def reference_completions(name: str, limit: int | None = None) -> list[tuple[object, str, str]]:
    """(problem, completion, kind) pairs for benchmark `name`."""
    spec = BENCHMARKS[name]
    problems = load_benchmark(name, limit=limit)
    if spec.answer_format == "gsm8k" or spec.fields.solution:
        kind = "#### answer text" if spec.answer_format == "gsm8k" else "solution"
        return [(p, p.solution, kind) for p in problems if p.solution]
    by_question = {normalise_question(p.question): p for p in problems}
    out = []
    for row in load_records(benchmark_path(name)):
        p = by_question.get(normalise_question(row[spec.fields.question]))
        raw = row.get(spec.fields.answer)
        if p is None or raw in (None, ""):
            continue
        for value in raw if isinstance(raw, list) else [raw]:
            out.append((p, f"The final answer is \\boxed{{{str(value).strip()}}}.", "boxed raw answer"))
    return out


def agreement(name: str, limit: int | None, template: str) -> dict:
    """Grade every reference completion of `name`; rate, misses (first 10) and timing."""
    pairs = reference_completions(name, limit)
    task = MathTask([p for p, _, _ in pairs] or load_benchmark(name, limit=1), template=template, name=name)
    start = time.perf_counter()
    misses = []
    for p, completion, _ in pairs:
        grade = task.grade(Group(problem_id=p.id, answer=p.answer, prompts=("",)), 0, completion)
        if not grade.correct:
            misses.append({"id": p.id, "gold": p.answer, "extracted": grade.info["answer"]})
    seconds = time.perf_counter() - start
    n = len(pairs)
    return {
        "set": name,
        "completion": pairs[0][2] if pairs else "-",
        "n": n,
        "agree": n - len(misses),
        "rate": (n - len(misses)) / n if n else float("nan"),
        "seconds": seconds,
        "misses": misses[:10],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", nargs="*", default=list(BENCHMARKS))
    parser.add_argument("--limit", type=int, default=None, help="first N problems of each set (default: all)")
    parser.add_argument("--template", default="qwen_math")
    args = parser.parse_args()
    rows = [agreement(name, args.limit, args.template) for name in args.sets]
    print(f"{'set':16} {'completion':18} {'n':>6} {'agree':>6} {'rate':>8} {'seconds':>8}")
    for r in rows:
        print(f"{r['set']:16} {r['completion']:18} {r['n']:>6} {r['agree']:>6} {r['rate']:8.2%} {r['seconds']:8.1f}")
    for r in rows:
        for m in r["misses"][:3]:
            print(f"  miss {r['set']}: gold {m['gold']!r} extracted {m['extracted']!r}")
    write_json(
        "grading_agreement", {"limit": args.limit, "template": args.template, "data_dir": str(data_dir()), "sets": rows}
    )


if __name__ == "__main__":
    main()
