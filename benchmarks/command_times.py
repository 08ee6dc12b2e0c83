"""Wall time of the README's commands as a newcomer runs them: nothing cached, a fresh results folder.

    python benchmarks/command_times.py [--sweep]

Runs in a scratch working directory (its own results/mlflow.db, and an empty toy cache through HARNESS_CACHE_DIR)
with this checkout's code:
1. a build of the default toy settings from scratch (`python -m trainer.models.toy`): what a first run of any other
   `model.toy` settings does once (the default ones ship, so a fresh clone's first run trains no SFT);
2. `harness run ablations/toy_run.yaml` on the shipped model;
3. with --sweep, `harness sweep ablations/dr_grpo_bias.yaml` on the shipped model (20 jobs, two at a time).
The load average before and after each step is recorded
beside its time: figures taken on a busy machine say so. Prints a table and writes
results/benchmarks/command_times.json.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _report import write_json

ROOT = Path(__file__).resolve().parents[1]


def timed(label: str, argv: list[str], cwd: Path) -> dict:
    """Run `argv` in `cwd` with this checkout first on the path; its wall time and the load around it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("HARNESS_DATA_DIR", None)
    env["HARNESS_CACHE_DIR"] = str(cwd / "results" / "cache")  # nothing cached: the newcomer's first build
    load_before = os.getloadavg()
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    return {"step": label, "seconds": round(seconds, 1), "load_before": load_before, "load_after": os.getloadavg()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", action="store_true", help="also time the 20-job dr_grpo_bias sweep")
    args = ap.parse_args()
    toy, sweep = ROOT / "ablations" / "toy_run.yaml", ROOT / "ablations" / "dr_grpo_bias.yaml"
    harness = [sys.executable, "-m", "harness.cli"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        build = [sys.executable, "-m", "trainer.models.toy", "--into", str(Path(tmp) / "build")]
        rows.append(timed("toy model build (other settings)", build, Path(tmp)))
        rows.append(timed("harness run ablations/toy_run.yaml", [*harness, "run", str(toy), "--quiet"], Path(tmp)))
        if args.sweep:
            rows.append(timed("harness sweep ablations/dr_grpo_bias.yaml", [*harness, "sweep", str(sweep)], Path(tmp)))
    machine = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    print(f"{'step':45} {'wall':>10}  load average (1/5/15 min) before -> after")
    for r in rows:
        m, s = divmod(r["seconds"], 60)
        print(
            f"{r['step']:45} {int(m):4d} m {s:4.1f} s  "
            f"{'/'.join(f'{x:.1f}' for x in r['load_before'])} -> {'/'.join(f'{x:.1f}' for x in r['load_after'])}"
        )
    print(f"machine: {machine['cpus']} CPUs, {machine['platform']}")
    write_json("command_times", {"machine": machine, "steps": rows})


if __name__ == "__main__":
    main()
