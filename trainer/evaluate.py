"""Benchmark evaluation: k samples per problem, graded as in training; avg@k, pass@k, maj@k and the
length of correct vs incorrect responses, logged as `eval/<benchmark>/...`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trainer import metric_names as M
from trainer.data.answers import extract_answer
from trainer.data.records import Problem
from trainer.data.templates import render_prompt
from trainer.rollout.base import RolloutBackend, SamplingParams
from trainer.tasks.base import Group
from trainer.tasks.math import MathTask


@dataclass
class Scored:
    """One benchmark's samples: correct [P, k], lengths [P, k], extracted answers [P][k]."""

    correct: np.ndarray
    lengths: np.ndarray
    answers: list[list[str | None]]


def avg_at_k(correct: np.ndarray) -> float:
    """avg@k = mean over problems of c_i / k: the expected accuracy of one sample."""
    return float(correct.mean()) if correct.size else float("nan")


def pass_at_k(correct: np.ndarray, k: int | None = None) -> float:
    """pass@k with the unbiased estimator of Chen et al. 2021 (arXiv 2107.03374):
    mean over problems of 1 − C(n − c_i, k) / C(n, k), n samples of which c_i correct (k ≤ n)."""
    n = correct.shape[1]
    k = n if k is None else k
    c = correct.sum(axis=1)
    # 1 - prod_{j=n-c+1}^{n} (1 - k/j), the numerically stable form of the binomial ratio
    fail = np.array([np.prod(1.0 - k / np.arange(n - ci + 1, n + 1)) if n - ci >= k else 0.0 for ci in c])
    return float(np.mean(1.0 - fail)) if len(c) else float("nan")


def maj_at_k(correct: np.ndarray, answers: Sequence[Sequence[str | None]]) -> float:
    """maj@k: the share of problems whose most frequent extracted answer (ties: the first seen; no answer
    never wins) is graded correct."""
    hits = []
    for row, ans in zip(correct, answers):
        votes = Counter(_norm(a) for a in ans if a is not None)
        if not votes:
            hits.append(False)
            continue
        top = votes.most_common(1)[0][0]
        hits.append(bool(row[[i for i, a in enumerate(ans) if a is not None and _norm(a) == top][0]]))
    return float(np.mean(hits)) if hits else float("nan")


def _norm(answer: str) -> str:
    return "".join(answer.split())


def metrics(benchmark: str, s: Scored) -> dict[str, float]:
    """eval/<benchmark>/{accuracy (= avg@k), pass_at_k, maj_at_k, length_correct_mean, length_incorrect_mean,
    length_mean, problems, k}; the length splits only when defined."""
    out = {
        M.eval_metric(benchmark, "accuracy"): avg_at_k(s.correct),
        M.eval_metric(benchmark, "pass_at_k"): pass_at_k(s.correct),
        M.eval_metric(benchmark, "maj_at_k"): maj_at_k(s.correct, s.answers),
        M.eval_metric(benchmark, "length_mean"): float(s.lengths.mean()),
        M.eval_metric(benchmark, "problems"): float(s.correct.shape[0]),
        M.eval_metric(benchmark, "k"): float(s.correct.shape[1]),
    }
    for name, sel in (("length_correct_mean", s.correct), ("length_incorrect_mean", ~s.correct)):
        if sel.any():
            out[M.eval_metric(benchmark, name)] = float(s.lengths[sel].mean())
    return out


def evaluate(
    backend: RolloutBackend,
    benchmarks: dict[str, list[Problem]],
    *,
    template: str,
    k: int,
    params: SamplingParams,
    seed: int,
    batch_problems: int = 32,
) -> dict[str, float]:
    """Sample k responses per problem of every benchmark and score them; plus eval/mean/* over benchmarks."""
    out: dict[str, float] = {}
    for b, (name, problems) in enumerate(benchmarks.items()):
        task = MathTask(problems, template=template, name=name)
        correct, lengths, answers = [], [], []
        for start in range(0, len(problems), batch_problems):
            chunk = problems[start : start + batch_problems]
            prompts = [render_prompt(template, p.question) for p in chunk for _ in range(k)]
            batch = backend.generate(prompts, params, seed=seed + 1_000_003 * b + start)
            for i, p in enumerate(chunk):
                group = Group(problem_id=p.id, answer=p.answer, prompts=tuple(prompts[i * k : (i + 1) * k]))
                texts = batch.texts[i * k : (i + 1) * k]
                grades = [
                    task.grade(group, j, t) if not bool(batch.truncated[i * k + j]) else None
                    for j, t in enumerate(texts)
                ]
                correct.append([g is not None and g.correct for g in grades])
                lengths.append(batch.lengths[i * k : (i + 1) * k].tolist())
                answers.append([extract_answer(t) for t in texts])
        out.update(metrics(name, Scored(np.array(correct, bool), np.array(lengths, float), answers)))
    for what in ("accuracy", "pass_at_k", "maj_at_k"):
        vals = [out[M.eval_metric(n, what)] for n in benchmarks]
        if len(vals) > 1:
            out[M.eval_metric("mean", what)] = float(np.mean(vals))
    return out
