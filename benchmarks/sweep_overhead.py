"""Per-job scheduling overhead of the local executor: wall time per job minus the time it trained.

    python benchmarks/sweep_overhead.py [--jobs 6] [--workers 1]

Each job is a 1-step toy run, so what remains is the executor's cost per job: a process forked from the
fork server (whose imports of torch, transformers and MLflow are paid once, by the first job to start),
loading the cached toy model, and creating and ending the MLflow run.
Prints a table and writes results/benchmarks/sweep_overhead.json.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import yaml
from _report import write_json
from mlflow.tracking import MlflowClient

from harness.config.plan import plan_sweep
from harness.engine.local import LocalExecutor
from harness.engine.sweep import run_sweep

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=6)
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "toy_run.yaml").write_text((ROOT / "ablations" / "toy_run.yaml").read_text())
        path = Path(tmp) / "sweep.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "name": "overhead",
                    "base": "toy_run.yaml",
                    "seeds": list(range(args.jobs)),
                    "set": {
                        "train.steps": 1,
                        "rollout.prompts_per_step": 2,
                        "rollout.group_size": 2,
                    },
                }
            )
        )
        plan = plan_sweep(path)
        uri = f"sqlite:///{tmp}/mlflow.db"
        start = time.perf_counter()
        result = run_sweep(plan, executor=LocalExecutor(workers=args.workers), tracking_uri=uri, console=False)
        wall = time.perf_counter() - start
        client = MlflowClient(uri)
        trained = [sum(m.value for m in client.get_metric_history(o.run_id, "time/step_s")) for o in result.finished]
        per_job = [o.seconds - t for o, t in zip(result.finished, trained)]
    row = {
        "jobs": args.jobs,
        "workers": args.workers,
        "finished": len(result.finished),
        "sweep_wall_s": wall,
        "job_wall_s_median": statistics.median(o.seconds for o in result.finished),
        "trained_s_median": statistics.median(trained),
        "overhead_s_median": statistics.median(per_job),
    }
    print(f"{'jobs':>4} {'workers':>7} {'sweep s':>8} {'job s':>7} {'trained s':>9} {'overhead s/job':>14}")
    print(
        f"{row['jobs']:>4} {row['workers']:>7} {wall:8.1f} {row['job_wall_s_median']:7.2f} "
        f"{row['trained_s_median']:9.2f} {row['overhead_s_median']:14.2f}"
    )
    write_json("sweep_overhead", row)


if __name__ == "__main__":
    main()
