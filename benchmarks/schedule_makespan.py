"""The main job's makespan: its 20 jobs on 2 workers in the file's order against longest first (issue 64).

    python benchmarks/schedule_makespan.py [--tracking-uri URI] [--arm-seconds S S S S] [--workers 2]

No training: a simulation of ablations/dr_grpo_bias.yaml's jobs as the executor runs them, each job in its order on
the first worker free (`harness.engine.cost.makespan`). A job's seconds:

- with `--tracking-uri`, its own FINISHED run's (MLflow's start to end) in a finished dr_grpo_bias sweep of that
  store, whose real wall time is printed beside the simulation;
- else `--arm-seconds`, one figure per arm in the file's arm order, every seed of an arm alike;
- by default the arms' means in one run of the sweep here (2026-11-28 05:37-06:16 UTC, AMD EPYC, 2 workers, beside
  other jobs): GRPO's 1/T_i 286 s (group_std) and 336 s (group_mean), the constant 141 s and 150 s. Illustrative:
  the ratio moves with the load and the seeds (another run that night: 184, 201, 142 and 149 s).

With `--tracking-uri` it also replays the sweep's job starts and ends, as they happened, through the status line
(`harness.engine.sweep._Progress` on a replayed clock) and compares its ETA at each job's end with the time that was
in fact left until the last job ended, beside the ETA harness showed before (the mean finished job's seconds × the
jobs left ÷ min(workers, jobs left), running jobs counted whole). The replay takes the jobs to have started in the
file's order, as a sweep run in one go before this change did.

The orders: the file's (its grid is arm-major with 1/T_i listed first, so its longest arms already start first);
the same grid with the constant listed first; and longest first as `harness sweep` orders the jobs
(`harness.engine.cost.order_jobs`), by the cost model calibrated with the same seconds (from the store:
`measured_runs`, each arm at its runs' mean, as a resumed sweep would be). The lower bound: max(all seconds /
workers, the longest job). Prints a table and writes results/benchmarks/schedule_makespan.json.
"""

from __future__ import annotations

import argparse
import os
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from _report import write_json

from harness.config.job import Job
from harness.config.plan import SweepPlan, plan_sweep
from harness.engine.cost import Measured, cost_model, makespan, order_jobs
from harness.engine.resume import measured_runs, sweep_runs
from harness.engine.sweep import _Progress
from harness.runs.layout import CPU_MODEL_TAG, JOB_ID_TAG, PARENT_TAG
from harness.runs.writer import store_client

SWEEP = Path(__file__).resolve().parents[1] / "ablations" / "dr_grpo_bias.yaml"
ARM_SECONDS = (286.0, 336.0, 141.0, 150.0)
"""Default seconds per job of each arm, in the file's arm order (see the module docstring)."""
NORMALISER = "objective.aggregation"


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


@dataclass(frozen=True)
class StoredSweep:
    """A finished dr_grpo_bias sweep read from a store."""

    plan: SweepPlan
    """The sweep file planned with the store's seeds (its job ids are the runs')."""
    times: dict[str, tuple[float, float]]
    """Each job's FINISHED run's (start, end), in seconds."""
    measured: list[Measured]
    wall_s: float
    """The parent run's start to end."""
    cpu: str
    """Where the runs computed (their `cpu_model` tag)."""


def from_store(uri: str) -> StoredSweep:
    plan = plan_sweep(SWEEP)
    runs = sweep_runs(store_client(uri), plan.experiment, plan.sweep_id)
    parents = [r for r in runs if r.data.tags.get(PARENT_TAG) == "1" and r.info.end_time]
    finished = [r for r in runs if r.data.tags.get(JOB_ID_TAG) and r.info.status == "FINISHED"]
    if not parents or not finished:
        raise SystemExit(f"{uri}: no ended {plan.name} sweep there")
    plan = plan_sweep(SWEEP, seeds=sorted({int(r.data.tags["seed"]) for r in finished}))
    times = {r.data.tags[JOB_ID_TAG]: (r.info.start_time / 1000, r.info.end_time / 1000) for r in finished}
    missing = [f"{job.arm} seed {job.seed}" for job in plan.jobs if job.job_id not in times]
    if missing:
        raise SystemExit(f"{uri}: no FINISHED run of {', '.join(missing)} (a store of this harness's job ids?)")
    parent = parents[-1]  # the oldest
    return StoredSweep(
        plan,
        times,
        measured_runs(uri, plan.experiment, plan.sweep_id),
        (parent.info.end_time - parent.info.start_time) / 1000,
        ", ".join(sorted({r.data.tags.get(CPU_MODEL_TAG, "?") for r in finished})),
    )


def replay_eta(jobs: list[Job], times: dict[str, tuple[float, float]], workers: int) -> list[dict]:
    """At each job's end but the last: the time left in fact, the status line's ETA and the ETA before issue 64."""
    now = 0.0
    view = _Progress("replay", jobs, [], workers, clock=lambda: now)
    by_id = {job.job_id: job for job in jobs}
    events = sorted(  # at one instant an end before a start, as the executor sees them
        [(start, 1, "started", i) for i, (start, _) in times.items()]
        + [(end, 0, "finished", i) for i, (_, end) in times.items()]
    )
    last_end, ran, rows = max(end for _, end in times.values()), [], []
    for now, _, kind, job_id in events:
        view.on_event(kind, by_id[job_id], None)
        left = view.total - view.done
        if kind == "finished" and left:
            ran.append(times[job_id][1] - times[job_id][0])
            before = sum(ran) / len(ran) * left / min(workers, left)
            rows.append({"done": view.done, "left_s": last_end - now, "eta_s": view.eta_s(), "eta_before_s": before})
    return rows


def from_arm_seconds(arm_seconds: Sequence[float]) -> tuple[SweepPlan, dict[str, float], list[Measured]]:
    """The file's plan, each job at its arm's seconds, and those as measured runs."""
    plan = plan_sweep(SWEEP)
    arms = list(dict.fromkeys(job.arm_id for job in plan.jobs))
    if len(arm_seconds) != len(arms):
        raise SystemExit(f"--arm-seconds: {len(arms)} figures needed, one per arm, got {len(arm_seconds)}")
    per_arm = dict(zip(arms, arm_seconds))
    seconds = {job.job_id: per_arm[job.arm_id] for job in plan.jobs}
    return plan, seconds, [Measured(job.arm_id, seconds[job.job_id]) for job in plan.jobs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tracking-uri", help="a store with a finished dr_grpo_bias sweep: each job's own seconds")
    parser.add_argument("--arm-seconds", type=float, nargs="+", help="seconds per job of each arm, in file order")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    stored = from_store(args.tracking_uri) if args.tracking_uri else None
    if stored is not None:
        plan, measured = stored.plan, stored.measured
        seconds = {job_id: end - start for job_id, (start, end) in stored.times.items()}
        source = f"each job's FINISHED run in {args.tracking_uri} (computed on {stored.cpu})"
    else:
        plan, seconds, measured = from_arm_seconds(args.arm_seconds or ARM_SECONDS)
        source = "--arm-seconds" if args.arm_seconds else "default arm seconds (illustrative)"
    jobs = list(plan.jobs)
    orders: dict[str, list[Job]] = {
        "file order (1/T_i first)": jobs,
        "constant first": sorted(jobs, key=lambda job: job.varying.get(NORMALISER) != "constant"),
        "longest first (harness)": order_jobs(jobs, cost_model(jobs, measured)),
    }
    total = sum(seconds.values())
    bound = max(total / args.workers, max(seconds.values()))
    rows = []
    for name, order in orders.items():
        span = makespan([seconds[job.job_id] for job in order], args.workers)
        rows.append(
            {"order": name, "makespan_s": span, "idle_s": span * args.workers - total, "vs_bound": span / bound}
        )
    machine = {"cpu": cpu_model(), "cores": os.cpu_count(), "load": list(os.getloadavg())}
    arm_means = {}
    for job in jobs:
        arm_means.setdefault(job.arm, []).append(seconds[job.job_id])
    print(f"{len(jobs)} jobs of {plan.name} on {args.workers} workers; seconds: {source}")
    for arm, values in arm_means.items():
        print(f"  {arm}: mean {sum(values) / len(values):.1f} s over {len(values)} jobs")
    print(f"{'order':26} {'makespan':>9} {'idle':>8} {'/ bound':>8}")
    for r in rows:
        print(f"{r['order']:26} {r['makespan_s']:9.1f} {r['idle_s']:8.1f} {r['vs_bound']:8.3f}")
    print(f"{'lower bound':26} {bound:9.1f}")
    if stored is not None:
        print(f"{'the sweep as it ran':26} {stored.wall_s:9.1f}   (its parent run's start to end)")
    replay = replay_eta(jobs, stored.times, args.workers) if stored is not None else []
    if replay:
        print(f"the ETA at each job's end (s): {'done':>4} {'left':>6} {'ETA':>6} {'before':>6}")
        for r in replay:
            print(f"{'':30} {r['done']:4d} {r['left_s']:6.0f} {r['eta_s']:6.0f} {r['eta_before_s']:6.0f}")
        for label, part in (("all", replay), ("last half", replay[len(replay) // 2 :])):
            error = {k: sum(abs(r[k] - r["left_s"]) for r in part) / len(part) for k in ("eta_s", "eta_before_s")}
            print(f"mean |ETA - left|, {label}: {error['eta_s']:.0f} s (before: {error['eta_before_s']:.0f} s)")
    print(f"machine: {machine['cpu']}, {machine['cores']} cores, load {' '.join(f'{x:.2f}' for x in machine['load'])}")
    write_json(
        "schedule_makespan",
        {
            "sweep": str(SWEEP.name),
            "workers": args.workers,
            "source": source,
            "seconds": {f"{job.arm} seed {job.seed}": seconds[job.job_id] for job in jobs},
            "rows": rows,
            "lower_bound_s": bound,
            "sweep_wall_s": stored.wall_s if stored is not None else None,
            "eta_replay": replay,
            "machine": machine,
        },
    )


if __name__ == "__main__":
    main()
