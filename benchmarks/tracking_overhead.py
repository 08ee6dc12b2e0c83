"""Cost of logging one training step's metrics (~35) to a SQLite MLflow store.

Compares RunTracker's buffered `log_batch` (default flush_every=10, and flush every step) with
one `MlflowClient.log_metric` call per metric (one HTTP/SQL round trip each: ~170x slower in an earlier
measurement on this kind of machine).
Prints a table and writes results/benchmarks/tracking_overhead.json.

    python benchmarks/tracking_overhead.py [--steps 200] [--per-metric-steps 20]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mlflow.tracking import MlflowClient  # noqa: E402

from harness.runs.writer import RunTracker, prepare_store  # noqa: E402
from trainer import metric_names  # noqa: E402

# Every metric a training step logs (trainer/metric_names.py) plus task metrics to make ~35 a step.
NAMES = list(metric_names.TRAINING) + [metric_names.task_metric(f"extra_{i}") for i in range(9)]


def _values(step: int) -> dict[str, float]:
    return {name: step + i / 1000 for i, name in enumerate(NAMES)}


def buffered(uri: str, experiment_id: str, steps: int, flush_every: int) -> tuple[float, int]:
    """Seconds for `steps` steps through RunTracker, including its final flush; log_batch calls."""
    with RunTracker(uri, experiment_id, flush_every=flush_every, flush_seconds=1e9) as run:
        calls = 0
        original = run.client.log_batch

        def counting(*args, **kwargs):
            nonlocal calls
            calls += 1
            return original(*args, **kwargs)

        run.client.log_batch = counting
        start = time.perf_counter()
        for step in range(steps):
            run.log_metrics(step, _values(step))
        run.flush()
        return time.perf_counter() - start, calls


def per_metric(uri: str, experiment_id: str, steps: int) -> tuple[float, int]:
    """Seconds for `steps` steps with one `log_metric` call per metric; number of calls."""
    client = MlflowClient(tracking_uri=uri)
    run_id = client.create_run(experiment_id).info.run_id
    calls = 0
    start = time.perf_counter()
    for step in range(steps):
        for name, value in _values(step).items():
            client.log_metric(run_id, name, value, step=step)
            calls += 1
    elapsed = time.perf_counter() - start
    client.set_terminated(run_id)
    return elapsed, calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="steps for the buffered methods")
    parser.add_argument("--per-metric-steps", type=int, default=20, help="steps for log_metric (slow; kept short)")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "benchmarks" / "tracking_overhead.json")
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        uri = f"sqlite:///{tmp}/mlflow.db"
        experiment_id = prepare_store(uri, "tracking-overhead")
        for label, steps, run in [
            ("RunTracker flush_every=10", args.steps, lambda n: buffered(uri, experiment_id, n, 10)),
            ("RunTracker flush_every=1", args.steps, lambda n: buffered(uri, experiment_id, n, 1)),
            ("log_metric per metric", args.per_metric_steps, lambda n: per_metric(uri, experiment_id, n)),
        ]:
            seconds, calls = run(steps)
            rows.append(
                {
                    "method": label,
                    "steps": steps,
                    "metrics_per_step": len(NAMES),
                    "seconds": seconds,
                    "seconds_per_step": seconds / steps,
                    "calls": calls,
                }
            )

    slowest = rows[-1]["seconds_per_step"]
    print(f"{'method':<28}{'steps':>6}{'s/step':>11}{'calls':>7}{'speed-up':>10}")
    for row in rows:
        row["speedup_vs_log_metric"] = slowest / row["seconds_per_step"]
        print(
            f"{row['method']:<28}{row['steps']:>6}{row['seconds_per_step']:>11.5f}"
            f"{row['calls']:>7}{row['speedup_vs_log_metric']:>9.0f}x"
        )

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"store": "sqlite (temp dir)", "python": platform.python_version(), "results": rows}, indent=2)
        + "\n"
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
