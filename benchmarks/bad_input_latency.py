"""How fast `harness sweep` / `harness run` answer a bad file (the target: under 2 s), beside the floors:
Python's start, importing pydantic + yaml, and importing the config modules.

    python benchmarks/bad_input_latency.py [repeats]

Wall time is the median of `repeats` runs (default 5), measured on this machine with its load shown
(the 1-minute load average before and after). Prints a table; writes results/benchmarks/bad_input_latency.json.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _report import write_json

ROOT = Path(__file__).resolve().parents[1]
SWEEP = "name: s\nbase: base.yaml\nseeds: [0, 1]\n"
CASES = {  # name: (command, file text, extra args)
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
}
FLOORS = {
    "python -c pass": "pass",
    "import pydantic, yaml": "import pydantic, yaml",
    "import harness.cli, harness.config.plan": "import harness.cli, harness.config.plan",
}


def _median_wall(cmd: list[str], cwd: Path, repeats: int) -> tuple[float, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["PYTHONPATH"] = str(ROOT)
    walls, code = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        code = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True).returncode
        walls.append(time.perf_counter() - start)
    return statistics.median(walls), code


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    load_before = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        (cwd / "base.yaml").write_text((ROOT / "ablations" / "toy_run.yaml").read_text())
        for name, code in FLOORS.items():
            wall, _ = _median_wall([sys.executable, "-c", code], cwd, repeats)
            rows.append({"what": name, "kind": "floor", "exit": 0, "median_s": wall})
        for name, (command, text, args) in CASES.items():
            (cwd / "bad.yaml").write_text(text)
            wall, code = _median_wall([sys.executable, "-m", "harness.cli", command, "bad.yaml", *args], cwd, repeats)
            rows.append({"what": name, "kind": "bad file", "exit": code, "median_s": wall})
    load_after = os.getloadavg()[0]
    print(
        f"{'what':36} {'kind':9} {'exit':>4} {'median s':>9}   (load {load_before:.2f} -> {load_after:.2f}, "
        f"{os.cpu_count()} cores)"
    )
    for r in rows:
        print(f"{r['what']:36} {r['kind']:9} {r['exit']:>4} {r['median_s']:9.3f}")
    write_json(
        "bad_input_latency",
        {
            "repeats": repeats,
            "load_before": load_before,
            "load_after": load_after,
            "cpus": os.cpu_count(),
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
