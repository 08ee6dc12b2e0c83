"""Planning time for large sweep grids (target: < 1 s for 10,000 jobs).

    python benchmarks/plan_speed.py

Prints a table and writes results/benchmarks/plan_speed.json.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import yaml
from _report import write_json

from harness.config.plan import plan_sweep

ROOT = Path(__file__).resolve().parents[1]
SHAPES = {  # name: (grid, seeds)
    "3,200 arms x 5 seeds": (
        {
            "train.lr": [1e-4 * (i + 1) for i in range(20)],
            "objective.clip_high": [0.2 + 0.01 * i for i in range(10)],
            "objective.aggregation": ["seq_mean_token_mean", "token_mean", "constant", "seq_mean_token_sum"],
            "objective.advantage": ["group_std", "group_mean", "batch_std", "group_median"],
        },
        5,
    ),
    "10,000 arms x 1 seed": (
        {
            "train.lr": [1e-5 * (i + 1) for i in range(100)],
            "objective.clip_high": [0.2 + 0.001 * i for i in range(100)],
        },
        1,
    ),
}


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "toy_run.yaml").write_text((ROOT / "ablations" / "toy_run.yaml").read_text())
        for name, (grid, n_seeds) in SHAPES.items():
            path = Path(tmp) / "sweep.yaml"
            path.write_text(
                yaml.safe_dump({"name": "bench", "base": "toy_run.yaml", "grid": grid, "seeds": list(range(n_seeds))})
            )
            start = time.perf_counter()
            plan = plan_sweep(path, max_jobs=10**6)  # above the default limit on purpose
            seconds = time.perf_counter() - start
            rows.append(
                {
                    "shape": name,
                    "jobs": len(plan.jobs),
                    "seconds": seconds,
                    "us_per_job": 1e6 * seconds / len(plan.jobs),
                }
            )
    print(f"{'shape':24} {'jobs':>7} {'seconds':>8} {'us/job':>8}")
    for r in rows:
        print(f"{r['shape']:24} {r['jobs']:>7} {r['seconds']:8.3f} {r['us_per_job']:8.1f}")
    write_json("plan_speed", rows)


if __name__ == "__main__":
    main()
