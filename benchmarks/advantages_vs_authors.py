"""Each advantage variant against its authors' released formula, on random cases, in float64.

    python benchmarks/advantages_vs_authors.py [--cases 300] [--seed 0]

For each variant: harness's estimator and a transcription, written in NumPy from reading the authors' code (named
below; none of it is copied, and nothing here imports it), run on the same random rewards. The cases cover groups
of 1, 2, odd and even sizes, 0/1 and continuous rewards, flat groups, ties at the median, and several groups at
once. Prints the largest absolute difference per variant and case family, and the cases where the authors' code is
not defined; writes results/benchmarks/advantages_vs_authors.json.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
import torch
from _report import write_json

from trainer.objective.registry import ADVANTAGES


def mc_grpo_authors(rewards: np.ndarray, eps: float = 1e-3) -> np.ndarray:
    """MC-GRPO, `lotusroot-kim/MC-GRPO`, `src/open_r1/grpo_trainer_gsm.py`, `_generate_and_score_completions` with
    `mc=True` in training: per group of n = G + 1, the lower median m (`Tensor.median`), MAD = lower median of
    |R − m|, A = (R − m) / (MAD + 1e-3); then in each group the advantages not within 1e-6 of 0 are multiplied by
    n / their count; no std scaling."""
    out = np.empty_like(rewards)
    for g, row in enumerate(rewards):
        n = row.size
        m = np.sort(row)[(n - 1) // 2]
        mad = np.sort(np.abs(row - m))[(n - 1) // 2]
        a = (row - m) / (mad + eps)
        nonzero = ~np.isclose(a, 0.0, rtol=1e-5, atol=1e-6)  # torch.isclose's defaults, atol as the authors set
        if nonzero.any():
            a = np.where(nonzero, a * n / nonzero.sum(), a)
        out[g] = a
    return out


def _cases(rng: np.random.Generator, count: int) -> list[tuple[str, np.ndarray]]:
    """(family, rewards [groups, n]) drawn across the families the docstring lists."""
    out = []
    for i in range(count):
        n = int(rng.choice([1, 2, 3, 4, 5, 6, 8, 9, 17]))
        groups = int(rng.integers(1, 6))
        family = ("binary", "continuous", "ties", "flat")[i % 4]
        if family == "binary":
            r = rng.integers(0, 2, (groups, n)).astype(float)
        elif family == "continuous":
            r = rng.normal(size=(groups, n))
        elif family == "ties":  # a few distinct values, many ties at the median
            r = rng.choice([0.0, 0.25, 0.5, 1.0], size=(groups, n))
        else:
            r = np.repeat(rng.normal(size=(groups, 1)), n, axis=1)
        out.append((f"{family}, n {'1' if n == 1 else '2' if n == 2 else 'odd' if n % 2 else 'even'}", r))
    return out


VARIANTS: dict[str, tuple[str, float, Callable[[np.ndarray], np.ndarray]]] = {
    "MC-GRPO (mc_grpo)": ("group_median_mad", 1e-3, mc_grpo_authors),
}
"""Variant → (harness's estimator, its ε, the authors' formula)."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    cases = _cases(rng, args.cases)
    report = {}
    print(f"{'variant':24} {'case family':22} {'cases':>5} {'largest |difference|':>21}")
    for variant, (name, eps, authors) in VARIANTS.items():
        worst: dict[str, float] = {}
        counts: dict[str, int] = {}
        for family, rewards in cases:
            ours = ADVANTAGES[name](torch.from_numpy(rewards), eps).numpy()
            theirs = authors(rewards)
            diff = float(np.max(np.abs(ours - theirs)))
            worst[family] = max(worst.get(family, 0.0), diff)
            counts[family] = counts.get(family, 0) + 1
        for family in sorted(worst):
            print(f"{variant:24} {family:22} {counts[family]:5d} {worst[family]:21.3g}")
        overall = max(worst.values())
        print(f"{variant:24} {'all':22} {sum(counts.values()):5d} {overall:21.3g}")
        report[variant] = {"estimator": name, "eps": eps, "largest": overall, "by_family": worst, "cases": counts}
    write_json("advantages_vs_authors", {"cases": args.cases, "seed": args.seed, "variants": report})


if __name__ == "__main__":
    main()
