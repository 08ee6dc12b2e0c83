"""The math sets by name, and de-duplication of training pools against evaluation sets.

The sets ship with the package, gzipped, in trainer/data/files (provenance, licences and checksums: its
SOURCES.md); `$HARNESS_DATA_DIR` names another directory of the same layout, plain or gzipped.
A ~12k MATH training pool here is `math_train` + (`math_test5000` minus MATH-500):

    evals = [load_benchmark("math500")]
    pool, removed = dedupe(load_benchmark("math_test5000") + load_benchmark("math_train"), evals)
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from trainer.data.records import (
    FieldMap,
    Problem,
    Problems,
    load_problems,
    normalise_question,
)

ENV_VAR = "HARNESS_DATA_DIR"
SHIPPED = Path(__file__).with_name("files")


@dataclass(frozen=True)
class BenchmarkSpec:
    """Where a set lives under the data dir and how its records read."""

    path: str
    fields: FieldMap = FieldMap()
    answer_format: Literal["plain", "gsm8k"] = "plain"
    role: Literal["eval", "train"] = "eval"


_ANSWER_ONLY = FieldMap(solution=None)
_GSM8K = FieldMap(question="question", answer="answer", solution="answer")  # the answer text is the solution

BENCHMARKS: dict[str, BenchmarkSpec] = {
    "math500": BenchmarkSpec("math500/test.jsonl", FieldMap(id="unique_id")),
    "aime24": BenchmarkSpec("aime24/test.jsonl", FieldMap(id="id")),
    "amc23": BenchmarkSpec("amc23/test.jsonl", FieldMap(solution=None, id="id")),  # float answers
    "gsm8k": BenchmarkSpec("gsm8k/test.jsonl", _GSM8K, "gsm8k"),
    "minerva": BenchmarkSpec("drgrpo_eval/minerva.jsonl", _ANSWER_ONLY),  # list answers
    "olympiad_bench": BenchmarkSpec("drgrpo_eval/olympiad_bench.jsonl", _ANSWER_ONLY),  # list answers, `$..$`
    "amc22_23": BenchmarkSpec("drgrpo_eval/amc22_23.jsonl", _ANSWER_ONLY),  # float answers
    "drgrpo_math500": BenchmarkSpec("drgrpo_eval/math500.jsonl", _ANSWER_ONLY),
    "drgrpo_aime24": BenchmarkSpec("drgrpo_eval/aime24.jsonl", _ANSWER_ONLY),
    # no answer field: answers come from the solutions' last box; ids from the question (idx is a row number)
    "math_test5000": BenchmarkSpec("math_test5000/test.jsonl", FieldMap()),
    "math_train": BenchmarkSpec("math_train/train.jsonl", _ANSWER_ONLY, role="train"),  # 4 null/empty skipped
    "gsm8k_train": BenchmarkSpec("gsm8k/train.jsonl", _GSM8K, "gsm8k", role="train"),
}
"""Name -> spec. math_test5000 holds all of MATH-500: dedupe it before training on it."""


def data_dir() -> Path:
    """`$HARNESS_DATA_DIR`, else the files shipped with the package."""
    env = os.environ.get(ENV_VAR)
    return Path(env) if env else SHIPPED


_default_dir = data_dir


def benchmark_path(name: str, data_dir: str | Path | None = None) -> Path:
    """The file of benchmark `name` under `data_dir` (default `data_dir()`): its path, or that path + `.gz`."""
    try:
        spec = BENCHMARKS[name]
    except KeyError:
        raise KeyError(f"unknown benchmark {name!r}; known: {sorted(BENCHMARKS)}") from None
    path = Path(data_dir if data_dir is not None else _default_dir()) / spec.path
    for candidate in (path, path.with_name(path.name + ".gz")):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"benchmark {name!r}: no file {path} or {path.name}.gz "
        f"(${ENV_VAR} names the data directory; unset, the shipped files are used)"
    )


def load_benchmark(name: str, data_dir: str | Path | None = None, limit: int | None = None) -> Problems:
    """The problems of benchmark `name` (`Problem.source` = name; `.skipped` as in `load_problems`)."""
    path = benchmark_path(name, data_dir)
    spec = BENCHMARKS[name]
    return load_problems(path, fields=spec.fields, answer_format=spec.answer_format, limit=limit, name=name)


def dedupe(pool: Iterable[Problem], against: Iterable[Iterable[Problem]]) -> tuple[list[Problem], int]:
    """(pool without the problems whose normalised question is in any set of `against`, number removed)."""
    pool = list(pool)
    seen = {normalise_question(p.question) for problems in against for p in problems}
    kept = [p for p in pool if normalise_question(p.question) not in seen]
    return kept, len(pool) - len(kept)


__all__ = [
    "BENCHMARKS",
    "BenchmarkSpec",
    "benchmark_path",
    "data_dir",
    "dedupe",
    "load_benchmark",
    "normalise_question",
]
