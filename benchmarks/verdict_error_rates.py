"""How often a verdict is wrong when nothing is there: the health claim's false "contradicted" with every arm
exactly at its threshold (4 and 6 arms), and the null decision rate of a fixed look followed by `--until-decided`
on the same seeds, with the fixed look counted as the design's first (harness now) and not counted (before).

    python benchmarks/verdict_error_rates.py [--draws 4000]

Each draw goes through harness's own functions (`claims.evidence` and `claims.decide` for the health claim;
`sequential.boundaries` for the designs). Prints a table, writes results/benchmarks/verdict_error_rates.json.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import pandas as pd
from _report import write_json
from scipy import stats as sps

from harness.analysis import sequential as seq
from harness.analysis.claims import decide, evidence
from harness.config.claims import Claim

HEALTH = Claim.model_validate(
    {
        "id": "health",
        "statement": "Training raises accuracy in every arm.",
        "metric": "train/accuracy",
        "contrast": {"since": "first-10"},
        "direction": "increase",
    }
)


def health_false_contradicted(arms: int, seeds: int, draws: int, rng: np.random.Generator) -> tuple[float, float]:
    """P(contradicted) with every arm's true change exactly 0, now (Bonferroni across arms) and as before (the
    falling arm's own p, recomputed from the same draws)."""
    now = before = 0
    labels = [f"arm{i}" for i in range(arms)]
    settings = {a: {} for a in labels}
    for _ in range(draws):
        values = rng.normal(0.0, 1.0, (arms, seeds))
        frame = pd.DataFrame(
            [(f"{a}-{s}", a, s, values[i, s]) for i, a in enumerate(labels) for s in range(seeds)],
            columns=["run_id", "arm", "seed", "value"],
        )
        [v] = decide([HEALTH], [evidence(HEALTH, frame, [], settings)])
        now += v.verdict == "contradicted"
        before += v.effect < 0 and v.per_arm[0].p < 0.05
    return now / draws, before / draws


def fixed_then_sequential(draws: int, rng: np.random.Generator, counted: bool) -> float:
    """P(any efficacy decision) under the null: a fixed z-test at α on the first 3 of 7 seeds, then `--until-decided`
    (+2 seeds a round) on the same seeds; `counted`: the fixed look is the design's first (`fixed_first` 1)."""
    n = np.array([3.0, 5.0, 7.0])
    design = seq.Design(3, 2, 7, fixed_first=1.0 if counted else 0.0)
    c = np.array(seq.boundaries(tuple(n / 7), 0.05, design.fixed_first))
    w = np.cumsum(rng.standard_normal((draws, 3)) * np.sqrt(np.diff(n, prepend=0.0)), axis=1)
    z = w / np.sqrt(n)
    fixed = np.abs(z[:, 0]) >= sps.norm.isf(0.025)
    return float(np.mean(fixed | (np.abs(z) >= c).any(axis=1)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=4000)
    ap.add_argument("--seeds", type=int, default=5, help="runs per arm of the health claim (default 5)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    rows = []
    for arms in (4, 6):
        now, before = health_false_contradicted(arms, args.seeds, args.draws, rng)
        rows.append({"case": f"health claim, {arms} arms at the threshold", "harness now": now, "before": before})
    seq_draws = 200_000
    rows.append(
        {
            "case": "fixed look at α, then --until-decided on its seeds (3, 5, 7 seeds)",
            "harness now": fixed_then_sequential(seq_draws, rng, counted=True),
            "before": fixed_then_sequential(seq_draws, rng, counted=False),
        }
    )
    se = {r["case"]: math.sqrt(0.05 * 0.95 / (args.draws if "health" in r["case"] else seq_draws)) for r in rows}
    print(f"{'case':72} {'harness now':>12} {'before':>8}  (±1 SE at 5 %)")
    for r in rows:
        print(f"{r['case']:72} {r['harness now']:12.4f} {r['before']:8.4f}  ±{se[r['case']]:.4f}")
    took = time.perf_counter() - start
    print(f"goal: at most 0.025 for the health claim's one-sided error, 0.05 for a design; {took:.0f} s")
    write_json("verdict_error_rates", {"draws": args.draws, "sequential_draws": seq_draws, "seeds": args.seeds,
                                       "rows": rows})  # fmt: skip


if __name__ == "__main__":
    main()
