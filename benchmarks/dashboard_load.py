"""First load of a 48-run sweep in the dashboard, against MLflow's per-run metric history.

    python benchmarks/dashboard_load.py [--runs 48] [--steps 500] [--metrics 30] [--repeats 5]
                                        [--baseline-repeats 1] [--store DIR] [--rebuild]

The store is a real SQLite MLflow store (`<store>/<shape>/mlflow.db`, default under
results/benchmarks/dashboard_load/), built once per shape and reused: one sweep with a parent run
(tags sweep_id, sweep_parent=1, n_jobs, and its jobs.json) and RUNS job runs, 4 arms of
`objective.aggregation` × seeds, each with the ~70 params of a real run config (ablations/toy_run.yaml),
the tags a sweep job gets, status FINISHED, and METRICS metrics × STEPS steps of seeded random values
(a few NaNs) logged with `MlflowClient.log_batch`. Building 48×500×30 takes a few minutes.

Timed in this process, imports done, nothing cached between repeats (the dashboard's loaders are
plain functions; a fresh reader each time):
  - dashboard first load: reader_for(uri).runs() -> sweeps() -> read_sweep() (runs index, params,
    metrics, last-logged times, jobs.json, assembly), median and min over --repeats;
  - metrics query only: reader.metrics(run_ids);
  - baseline: MlflowClient.search_runs for the sweep, then get_metric_history for every run × key
    (RUNS × METRICS calls) into the same long frame, --baseline-repeats times (it is slow).
Checks the dashboard frame has RUNS×STEPS×METRICS rows and equals the baseline's point for point
(NaN-safe), then reports the ratio baseline / dashboard load against the target (≤ 1 s).
Prints a table and writes results/benchmarks/dashboard_load.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # jobs.json is read on every load

import mlflow  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from _report import RESULTS, write_json  # noqa: E402
from mlflow.entities import Metric, Param  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402
from mlflow.utils.validation import MAX_METRICS_PER_BATCH, MAX_PARAMS_TAGS_PER_BATCH  # noqa: E402

from harness.config.run_config import load_run_config  # noqa: E402
from harness.runs.layout import (  # noqa: E402
    JOBS_ARTIFACT,
    N_JOBS_TAG,
    PARENT_TAG,
    STATUS_TAG,
    run_tags,
)
from harness.runs.reader import reader_for, sweeps  # noqa: E402
from harness.runs.sweep_data import read_sweep  # noqa: E402
from harness.runs.writer import flatten_params, prepare_store  # noqa: E402
from trainer import metric_names as M  # noqa: E402

AGGREGATIONS = ["seq_mean_token_mean", "token_mean", "constant", "seq_mean_token_sum"]  # the 4 arms
EXPERIMENT = "dashboard-load"
TARGET_S = 1.0
NAN_FRAC = 0.001  # logged NaNs exercise the is_nan path of both readers


def metric_keys(n: int) -> list[str]:
    """The per-step training metrics, topped up with task/... ones to make `n`."""
    return (list(M.TRAINING) + [M.task_metric(f"extra_{i}") for i in range(n)])[:n]


def build_store(db: Path, runs: int, steps: int, metrics: int) -> str:
    """Create the sweep in a fresh SQLite store at `db`; return its sweep_id."""
    uri, sweep_id = f"sqlite:///{db}", f"bench-{runs}x{steps}x{metrics}"
    client, rng, keys = MlflowClient(uri), np.random.default_rng(0), metric_keys(metrics)
    experiment_id = prepare_store(uri, EXPERIMENT)
    t0 = int(time.time() * 1000)
    parent = client.create_run(
        experiment_id,
        run_name="dashboard-load",
        start_time=t0,
        tags={
            "sweep_id": sweep_id,
            PARENT_TAG: "1",
            "name": "dashboard-load",
            STATUS_TAG: "FINISHED",
            N_JOBS_TAG: str(runs),
        },
    ).info.run_id
    configs = [
        load_run_config(
            REPO / "ablations" / "toy_run.yaml",
            [
                f"objective.aggregation={AGGREGATIONS[i % len(AGGREGATIONS)]}",
                f"seed={i // len(AGGREGATIONS)}",
                f"train.steps={steps}",
                "name=dashboard_load",
            ],
        )
        for i in range(runs)
    ]
    client.log_dict(
        parent,
        {
            "cumulative": False,
            "jobs": [
                {
                    "job_id": c.config_hash,
                    "arm_id": c.arm,
                    "arm": f"aggregation={c.objective.aggregation}",
                    "seed": c.seed,
                    "varying": {"objective.aggregation": c.objective.aggregation},
                }
                for c in configs
            ],
        },
        JOBS_ARTIFACT,
    )
    start = time.perf_counter()
    for i, cfg in enumerate(configs):
        begin = t0 + i * 1000
        run_id = client.create_run(
            experiment_id,
            run_name=f"dashboard_load-s{cfg.seed}",
            start_time=begin,
            tags={
                **run_tags(cfg, sweep_id),
                "arm_label": f"aggregation={cfg.objective.aggregation}",
                "mlflow.parentRunId": parent,
                STATUS_TAG: "FINISHED",
            },
        ).info.run_id
        params = [Param(k, v) for k, v in flatten_params(cfg.model_dump(mode="json")).items()]
        for j in range(0, len(params), MAX_PARAMS_TAGS_PER_BATCH):
            client.log_batch(run_id, params=params[j : j + MAX_PARAMS_TAGS_PER_BATCH])
        scale = 10.0 ** rng.uniform(-4, 4, size=metrics)  # every metric its own magnitude
        values = rng.standard_normal((steps, metrics)) * scale
        values[rng.random(values.shape) < NAN_FRAC] = np.nan
        points = [
            Metric(key, float(values[s, k]), begin + 2000 * s, s) for s in range(steps) for k, key in enumerate(keys)
        ]
        for j in range(0, len(points), MAX_METRICS_PER_BATCH):
            client.log_batch(run_id, metrics=points[j : j + MAX_METRICS_PER_BATCH])
        client.set_terminated(run_id, "FINISHED", end_time=begin + 2000 * steps)
        done = time.perf_counter() - start
        print(f"  built run {i + 1}/{runs} ({done:.0f} s, ~{done / (i + 1) * (runs - i - 1):.0f} s left)", flush=True)
    client.set_terminated(parent, "FINISHED", end_time=t0 + runs * 1000 + 2000 * steps)
    return sweep_id


def store_for(base: Path, runs: int, steps: int, metrics: int, rebuild: bool) -> tuple[str, str, float | None]:
    """(uri, sweep_id, seconds it took to build): the store of this shape, built if missing."""
    folder = base / f"{runs}runs_{steps}steps_{metrics}metrics"
    marker, db = folder / "built.json", folder / "mlflow.db"
    if marker.exists() and db.exists() and not rebuild:
        print(f"reusing {db}")
        built = json.loads(marker.read_text())
        return f"sqlite:///{db}", built["sweep_id"], built["build_s"]
    if folder.exists():  # a half-built or unwanted store of this shape
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    print(f"building {db} ({runs} runs x {steps} steps x {metrics} metrics)")
    start = time.perf_counter()
    sweep_id = build_store(db, runs, steps, metrics)
    seconds = time.perf_counter() - start
    marker.write_text(json.dumps({"sweep_id": sweep_id, "build_s": seconds}))
    return f"sqlite:///{db}", sweep_id, seconds


def dashboard_load(uri: str, sweep_id: str):
    """The dashboard's first load of the sweep; its SweepData and the seconds of each phase (and CPU seconds)."""
    cpu, t = time.process_time(), [time.perf_counter()]
    reader = reader_for(uri)
    index = reader.runs()
    t.append(time.perf_counter())
    found = [s for s in sweeps(index) if s.sweep_id == sweep_id]
    t.append(time.perf_counter())
    data = read_sweep(reader, found[0])
    t.append(time.perf_counter())
    return data, {
        "total": t[3] - t[0],
        "cpu": time.process_time() - cpu,
        "runs_index": t[1] - t[0],
        "sweeps": t[2] - t[1],
        "read_sweep": t[3] - t[2],
    }


def metrics_only(uri: str, run_ids: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of the metrics query alone."""
    cpu, start = time.process_time(), time.perf_counter()
    reader_for(uri).metrics(run_ids)
    return time.perf_counter() - start, time.process_time() - cpu


def mlflow_history(uri: str, sweep_id: str) -> tuple[pd.DataFrame, float, float, int]:
    """The same long frame through MLflow's public API: search_runs, then one history call per run × key;
    with wall and CPU seconds, and the number of history calls."""
    cpu, start = time.process_time(), time.perf_counter()
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(EXPERIMENT).experiment_id
    runs = [
        r
        for r in client.search_runs([experiment], f"tags.sweep_id = '{sweep_id}'", max_results=1000)
        if r.data.tags.get(PARENT_TAG) != "1"
    ]
    cols: dict[str, list] = {"run_id": [], "key": [], "step": [], "value": []}
    calls = 0
    for run in runs:
        for key in run.data.metrics:
            history = client.get_metric_history(run.info.run_id, key)
            calls += 1
            cols["run_id"] += [run.info.run_id] * len(history)
            cols["key"] += [key] * len(history)
            cols["step"] += [m.step for m in history]
            cols["value"] += [m.value for m in history]
    frame = pd.DataFrame(
        {
            "run_id": pd.Categorical(cols["run_id"]),
            "key": pd.Categorical(cols["key"]),
            "step": np.asarray(cols["step"], dtype=np.int64),
            "value": np.asarray(cols["value"], dtype=float),
        }
    )
    return frame, time.perf_counter() - start, time.process_time() - cpu, calls


def same_points(a: pd.DataFrame, b: pd.DataFrame) -> tuple[bool, str]:
    """Whether two long frames hold exactly the same (run_id, key, step, value) points, NaN == NaN."""
    if len(a) != len(b):
        return False, f"{len(a)} vs {len(b)} rows"
    a, b = [
        f.astype({"run_id": str, "key": str}).sort_values(["run_id", "key", "step"], ignore_index=True) for f in (a, b)
    ]
    for col in ("run_id", "key", "step"):
        if not (a[col].to_numpy() == b[col].to_numpy()).all():
            return False, f"{col} differs"
    va, vb = a["value"].to_numpy(), b["value"].to_numpy()
    bad = ~((va == vb) | (np.isnan(va) & np.isnan(vb)))
    return (not bad.any()), f"{int(bad.sum())} values differ, {int(np.isnan(va).sum())} NaNs"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=48, help="job runs (4 arms x runs/4 seeds)")
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--metrics", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=5, help="timed dashboard loads (and metrics queries)")
    ap.add_argument("--baseline-repeats", type=int, default=1, help="timed MLflow history reads (slow)")
    ap.add_argument("--store", type=Path, default=RESULTS / "dashboard_load", help="where stores are kept, per shape")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the store even if one of this shape exists")
    args = ap.parse_args()

    uri, sweep_id, build_s = store_for(args.store.resolve(), args.runs, args.steps, args.metrics, args.rebuild)
    expected = args.runs * args.steps * args.metrics

    loads = []
    for _ in range(args.repeats):
        data, phases = dashboard_load(uri, sweep_id)
        loads.append(phases)
    if len(data.metrics) != expected or len(data.runs) != args.runs:
        sys.exit(f"dashboard load is wrong: {len(data.metrics)} metric rows (want {expected}), {len(data.runs)} runs")
    ids = data.runs["run_id"].tolist()
    queries = [metrics_only(uri, ids) for _ in range(args.repeats)]
    baselines = []
    for i in range(args.baseline_repeats):
        print(f"MLflow get_metric_history baseline {i + 1}/{args.baseline_repeats} ...", flush=True)
        frame, wall, cpu, calls = mlflow_history(uri, sweep_id)
        baselines.append((wall, cpu))
    agree, detail = same_points(data.metrics, frame)

    measures = [  # (key in the JSON, table label, wall and CPU seconds of each repeat)
        ("dashboard_load", "dashboard first load (SQL, all)", [(p["total"], p["cpu"]) for p in loads]),
        ("metrics_query", "metrics query only", queries),
        ("mlflow_history", f"MLflow get_metric_history per run×key ({calls})", baselines),
    ]
    timings = {
        key: {
            "median_s": statistics.median(w for w, _ in v),
            "min_s": min(w for w, _ in v),
            "cpu_median_s": statistics.median(c for _, c in v),
            "all_s": [w for w, _ in v],
        }
        for key, _, v in measures
    }
    timings["dashboard_load"].update(
        first_s=loads[0]["total"],
        phases_median_s={k: statistics.median(p[k] for p in loads) for k in ("runs_index", "sweeps", "read_sweep")},
    )
    load, query, base = (t["median_s"] for t in timings.values())
    result = {
        "shape": {
            "runs": args.runs,
            "arms": len(AGGREGATIONS),
            "steps": args.steps,
            "metrics": args.metrics,
            "points": expected,
            "params_per_run": len(data.params.columns),
        },
        "store": uri,
        "store_bytes": Path(uri[len("sqlite:///") :]).stat().st_size,
        "build_s": build_s,
        "repeats": args.repeats,
        "baseline_repeats": args.baseline_repeats,
        "history_calls": calls,
        **timings,
        "ratio_mlflow_over_dashboard_load": base / load,
        "ratio_mlflow_over_metrics_query": base / query,
        "target_s": TARGET_S,
        "target_met": load <= TARGET_S,
        "frames_agree": bool(agree),
        "frames_detail": detail,
        "machine": {
            "cores": os.cpu_count(),
            "load_avg_1m": os.getloadavg()[0],
            "python": platform.python_version(),
            "platform": platform.platform(),
            "mlflow": mlflow.__version__,
            "pandas": pd.__version__,
            "numpy": np.__version__,
        },
    }

    print(
        f"\n{args.runs} runs x {args.steps} steps x {args.metrics} metrics = {expected:,} points "
        f"(load average {result['machine']['load_avg_1m']:.1f} on {os.cpu_count()} cores)"
    )
    print(f"{'measure':<46}{'median s':>9}{'min s':>8}{'cpu s':>8}{'n':>4}")
    for key, label, v in measures:
        t = timings[key]
        print(f"{label:<46}{t['median_s']:>9.3f}{t['min_s']:>8.3f}{t['cpu_median_s']:>8.3f}{len(v):>4}")
        for phase, sec in t.get("phases_median_s", {}).items():
            print(f"{'  of which ' + phase:<46}{sec:>9.3f}")
    print(f"{'ratio MLflow / dashboard load':<46}{base / load:>8.0f}x")
    print(f"{'ratio MLflow / metrics query':<46}{base / query:>8.0f}x")
    print(f"{f'target: first load <= {TARGET_S:g} s (median)':<46}{'met' if result['target_met'] else 'NOT met':>9}")
    print(f"{'frames agree point for point':<46}{'yes' if agree else 'NO':>9}  ({detail})")
    write_json("dashboard_load", result)
    if not agree:
        sys.exit("the dashboard's metrics differ from MLflow's")


if __name__ == "__main__":
    main()
