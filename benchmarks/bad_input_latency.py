"""How fast `harness sweep` / `harness run` answer a bad file (the target: under 2 s), beside the floors:
Python's start, importing pydantic + yaml, and importing the config modules.

    python benchmarks/bad_input_latency.py [repeats]

Each command runs `repeats` times (default 5), one at a time; for each, the median and the slowest wall-clock time
and the median CPU time of the command's process (user + system, from `os.wait4`). The cases are a sample of
tests/test_bad_inputs.py's battery, with an unwritable cache folder and the dashboard's refusal of a
store harness did not make. The tests bound CPU time only, which a busy machine hardly stretches; wall-clock time is
this script's, shown with the machine (CPU model, cores) and its load (the 1, 5 and 15-minute load averages, as
`uptime` prints them, before and after). Prints a table; writes results/benchmarks/bad_input_latency.json.
"""

from __future__ import annotations

import datetime
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _report import write_json

ROOT = Path(__file__).resolve().parents[1]
SWEEP = "name: s\nbase: base.yaml\nseeds: [0, 1]\n"
UNWRITABLE = ["--set", "model.cache_dir=/proc/nope", "--tracking-uri", "sqlite:///store/mlflow.db"]
"""An unwritable cache folder: /proc refuses a new folder to root too (the store's folder is never made)."""
CASES = {  # name: (command, file text or a path as it is, extra args)
    "sweep: lr .inf": ("sweep", SWEEP + "grid:\n  train.lr: [.inf, 0.1]\n", []),
    "sweep: duplicate key": ("sweep", SWEEP + "seeds: [3]\ngrid:\n  train.lr: [0.1]\n", []),
    "sweep: 10^6 jobs": (
        "sweep",
        SWEEP.replace("[0, 1]", str(list(range(10))))
        + "grid:\n"
        + "".join(
            f"  objective.{k}: {[round(0.01 * (i + 1), 2) for i in range(10)]}\n"
            for k in ("clip_low", "clip_high", "kl_coef", "adv_eps", "dual_clip")
        ),
        [],
    ),
    "sweep: train.device cuda": ("sweep", SWEEP + "set:\n  train.device: cuda\ngrid:\n  train.lr: [0.1, 0.2]\n", []),
    "run: seed true": ("run", (ROOT / "ablations" / "toy_run.yaml").read_text().replace("seed: 0", "seed: true"), []),
    "sweep: cache_dir in /proc": ("sweep", ROOT / "ablations" / "dr_grpo_bias.yaml", UNWRITABLE),
    "run: cache_dir in /proc": ("run", ROOT / "ablations" / "toy_run.yaml", UNWRITABLE),
}
FLOORS = {
    "python -c pass": "pass",
    "import pydantic, yaml": "import pydantic, yaml",
    "import harness.cli, harness.config.plan": "import harness.cli, harness.config.plan",
}


def _measure(cmd: list[str], cwd: Path, repeats: int) -> dict[str, float | int]:
    """Run `cmd` `repeats` times: its exit code, median and slowest wall-clock seconds, median CPU seconds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["PYTHONPATH"] = str(ROOT)
    walls, cpus, code = [], [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own CPU time
        walls.append(time.perf_counter() - start)
        cpus.append(usage.ru_utime + usage.ru_stime)
        proc.returncode = code = os.waitstatus_to_exitcode(status)
    return {"exit": code, "median_s": statistics.median(walls), "max_s": max(walls), "cpu_s": statistics.median(cpus)}


def _machine() -> str:
    """The CPU's model and torch's CPU path, as every run records them (trainer.models.fingerprint)."""
    sys.path.insert(0, str(ROOT))
    from trainer.models.fingerprint import Machine

    here = Machine.here()
    return f"{here.cpu_model}, torch {here.torch_version} {here.cpu_capability}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    load_before, started = os.getloadavg(), datetime.datetime.now().astimezone()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        (cwd / "base.yaml").write_text((ROOT / "ablations" / "toy_run.yaml").read_text())
        for name, code in FLOORS.items():
            rows.append({"what": name, "kind": "floor", **_measure([sys.executable, "-c", code], cwd, repeats)})
        cli = [sys.executable, "-m", "harness.cli"]
        for name, (command, text, args) in CASES.items():
            if isinstance(text, Path):
                path = str(text)
            else:
                (cwd / "bad.yaml").write_text(text)
                path = "bad.yaml"
            rows.append({"what": name, "kind": "bad file", **_measure([*cli, command, path, *args], cwd, repeats)})
        (cwd / "notes.txt").write_text("not a database\n")
        store = ["--tracking-uri", "sqlite:///notes.txt"]
        rows.append(
            {
                "what": "dashboard: a text file as store",
                "kind": "bad store",
                **_measure([*cli, "dashboard", "--port", str(_free_port()), *store], cwd, repeats),
            }
        )
    load_after = os.getloadavg()
    cpu = _machine()  # after the measurements: importing torch here costs nothing they measure
    machine = f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"
    load = f"load {' '.join(f'{x:.2f}' for x in load_before)} -> {' '.join(f'{x:.2f}' for x in load_after)}"
    print(f"{started:%Y-%m-%d %H:%M %Z}: {machine}; {load} (1, 5, 15 min); {repeats} runs each")
    print(f"{'what':40} {'kind':9} {'exit':>4} {'median s':>9} {'max s':>7} {'cpu s':>6}")
    for r in rows:
        print(f"{r['what']:40} {r['kind']:9} {r['exit']:>4} {r['median_s']:9.3f} {r['max_s']:7.3f} {r['cpu_s']:6.3f}")
    write_json(
        "bad_input_latency",
        {
            "date": started.isoformat(timespec="seconds"),
            "cpu": cpu,
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "repeats": repeats,
            "load_before": load_before,
            "load_after": load_after,
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
