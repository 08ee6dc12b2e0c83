"""The toy model's SFT build: seconds per step with 1 and 2 torch threads, on an idle machine and beside a
competing 2-thread load (a process multiplying matrices on 2 threads, as another job or a laptop's other work).

    python benchmarks/toy_build.py [--steps 150] [--threads 1 2]

Each build is the default toy recipe cut to --steps SFT steps (no quality check), in a fresh process and a
temporary cache. Prints a table (s/step and the full 1600-step build it implies) and writes
results/benchmarks/toy_build.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import write_json

BUILD = """
import json, sys, time
from trainer.models.toy import build_toy_model
from trainer.models.toy_config import ToyModelConfig
cfg = ToyModelConfig(sft_steps={steps}, eval_samples=0, build_threads={threads})
start = time.perf_counter()
path = build_toy_model(cfg, sys.argv[1])
print(json.dumps({{"wall_s": time.perf_counter() - start, **json.loads((path / "build.json").read_text())}}))
"""

LOAD = """
import torch
torch.set_num_threads(2)
a = torch.randn(512, 512)
while True:
    a = torch.tanh(a @ a)
"""


def build(steps: int, threads: int) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        code = BUILD.format(steps=steps, threads=threads)
        out = subprocess.run([sys.executable, "-c", code, cache], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=150, help="SFT steps per measured build")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--full-steps", type=int, default=1600, help="the default build's SFT steps, for the estimate")
    args = ap.parse_args()
    rows = []
    for busy in (False, True):
        load = subprocess.Popen([sys.executable, "-c", LOAD]) if busy else None
        try:
            if load:
                time.sleep(2.0)  # let it start
            for threads in args.threads:
                result = build(args.steps, threads)
                per_step = result["train_s"] / args.steps
                rows.append(
                    {
                        "threads": threads,
                        "competing_load": "2-thread matmul" if busy else "none",
                        "s_per_step": per_step,
                        "full_build_s": per_step * args.full_steps,
                        "load_average": os.getloadavg()[0],
                    }
                )
                r = rows[-1]
                print(
                    f"threads {threads}  load {r['competing_load']:16} {per_step:6.3f} s/step  "
                    f"~{r['full_build_s'] / 60:4.1f} min for {args.full_steps} steps  "
                    f"(load avg {r['load_average']:.1f})",
                    flush=True,
                )
        finally:
            if load:
                load.kill()
                load.wait()
    write_json("toy_build", {"steps": args.steps, "cpus": os.cpu_count(), "rows": rows})


if __name__ == "__main__":
    main()
