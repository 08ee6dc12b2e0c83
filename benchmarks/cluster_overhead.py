"""Per-job scheduling and logging overhead of a multi-node Ray cluster writing to an MLflow tracking server,
against the local executor writing to SQLite: the same small jobs, side by side in one run.

    python benchmarks/cluster_overhead.py [--jobs 6] [--workers 1] [--steps 3] [--log-steps 100]

The cluster is three Ray nodes on this machine (each its own raylet and workers, one CPU slot each) and a real
`mlflow server` on 127.0.0.1; the local baseline is `--executor local` with a SQLite store. For each, the jobs'
own time (the sum of their `time/step_s`) is taken from each job's wall time (launch to its run ended, as the
driver saw it), leaving what the executor and the store cost per job: starting a worker, its imports, loading the
cached toy model, creating, logging to and ending the run. A second table times one step's metrics sent with
`log_batch` to each store (what a job's logging thread does every `flush_every` steps). Both modes run the same
sweep file with a fresh store; each is run once after a warm-up job (imports and the toy model in the page
cache). Prints the tables with `uptime`'s load and writes results/benchmarks/cluster_overhead.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml
from _report import write_json

REPO = Path(__file__).resolve().parents[1]
os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"  # the parent run's link, printed by this driver
sys.path.insert(0, str(REPO / "tests"))  # the local cluster and server the cluster tests start

from local_cluster import TrackingServer, local_cluster  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

from harness.config.plan import plan_sweep  # noqa: E402
from harness.engine.local import LocalExecutor  # noqa: E402
from harness.engine.ray_executor import RayExecutor  # noqa: E402
from harness.engine.sweep import run_sweep  # noqa: E402
from harness.runs.writer import RunTracker, prepare_store  # noqa: E402
from trainer import metric_names  # noqa: E402


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _sweep_file(tmp: Path, jobs: int, steps: int, cache: Path) -> Path:
    path = tmp / "sweep.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "cluster_overhead",
                "base": str(REPO / "ablations" / "toy_run.yaml"),
                "seeds": list(range(jobs)),
                "set": {
                    "model.cache_dir": str(cache),
                    "train.steps": steps,
                    "train.threads": 1,
                    "rollout.prompts_per_step": 2,
                    "rollout.group_size": 2,
                },
            }
        )
    )
    return path


def _sweep(path: Path, executor, uri: str) -> dict:
    plan = plan_sweep(path)
    start = time.perf_counter()
    result = run_sweep(plan, executor=executor, tracking_uri=uri, console=False)
    wall = time.perf_counter() - start
    if result.failed:
        raise RuntimeError(f"{len(result.failed)} jobs failed: {result.failed[0].reason}")
    client = MlflowClient(uri)
    trained = [sum(m.value for m in client.get_metric_history(o.run_id, "time/step_s")) for o in result.finished]
    return {
        "jobs": len(result.finished),
        "sweep_wall_s": wall,
        "job_wall_s_median": statistics.median(o.seconds for o in result.finished),
        "trained_s_median": statistics.median(trained),
        "overhead_s_median": statistics.median(o.seconds - t for o, t in zip(result.finished, trained)),
        "overhead_s_max": max(o.seconds - t for o, t in zip(result.finished, trained)),
    }


def _log_batch_ms(uri: str, steps: int) -> dict:
    """Milliseconds per `log_batch` of one step's metrics (every training metric), flushed each step."""
    names = list(metric_names.TRAINING)
    experiment_id = prepare_store(uri, "log_batch")
    with RunTracker(uri, experiment_id, flush_every=1, flush_seconds=1e9) as run:
        times = []
        for step in range(steps):
            start = time.perf_counter()
            run.log_metrics(step, {name: step + i / 1000 for i, name in enumerate(names)})
            run.flush()
            times.append((time.perf_counter() - start) * 1000)
    return {"metrics_per_step": len(names), "ms_median": statistics.median(times), "ms_max": max(times)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=6)
    ap.add_argument("--workers", type=int, default=1, help="jobs at once, in both modes (default 1)")
    ap.add_argument("--steps", type=int, default=3, help="training steps per job (default 3)")
    ap.add_argument("--log-steps", type=int, default=100, help="steps of the log_batch timing (default 100)")
    args = ap.parse_args()
    rows, logging = {}, {}
    load_before = _load()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        cache = tmp / "toy-cache"
        path = _sweep_file(tmp, args.jobs, args.steps, cache)
        (tmp / "warm").mkdir()
        warm = _sweep_file(tmp / "warm", 1, 1, cache)
        _sweep(warm, LocalExecutor(workers=1), f"sqlite:///{tmp}/warm.db")  # builds the toy model once
        sqlite = f"sqlite:///{tmp}/local.db"
        rows["local + SQLite"] = _sweep(path, LocalExecutor(workers=args.workers), sqlite)
        logging["SQLite"] = _log_batch_ms(sqlite, args.log_steps)
        (tmp / "server").mkdir()
        server = TrackingServer(tmp / "server")
        server.start()
        try:
            with local_cluster(3) as cluster:
                ray = RayExecutor(address=cluster.address, max_in_flight=args.workers, log_to_driver=False)
                rows["3-node Ray + server"] = _sweep(path, ray, server.url)
            logging["tracking server (HTTP)"] = _log_batch_ms(server.url, args.log_steps)
        finally:
            server.stop()
    load_after = _load()
    base = rows["local + SQLite"]["overhead_s_median"]
    print(f"uptime load before {load_before}, after {load_after}; {args.jobs} jobs of {args.steps} steps, ", end="")
    print(f"{args.workers} at once")
    print(f"{'mode':<22} {'sweep s':>8} {'job s':>7} {'trained s':>9} {'overhead s/job':>14} {'max':>6} {'ratio':>6}")
    for mode, r in rows.items():
        print(
            f"{mode:<22} {r['sweep_wall_s']:8.1f} {r['job_wall_s_median']:7.2f} {r['trained_s_median']:9.2f} "
            f"{r['overhead_s_median']:14.2f} {r['overhead_s_max']:6.2f} {r['overhead_s_median'] / base:6.2f}"
        )
    print(f"\n{'store':<22} {'metrics':>7} {'log_batch ms':>12} {'max ms':>7}")
    for store, r in logging.items():
        print(f"{store:<22} {r['metrics_per_step']:7d} {r['ms_median']:12.2f} {r['ms_max']:7.1f}")
    write_json(
        "cluster_overhead",
        {
            "args": vars(args),
            "load_before": load_before,
            "load_after": load_after,
            "sweeps": rows,
            "log_batch": logging,
        },
    )


if __name__ == "__main__":
    main()
