"""Does RL on the shipped base model give the same numbers on every CPU code path, and what would make it?

    python benchmarks/cpu_determinism.py [--steps 20] [--repeats 1]

One toy run (the main job's GRPO arm, seed 0, on the shipped base model) per configuration, each in a fresh process
so that the environment reaches torch before it starts: torch's CPU capability (`ATEN_CPU_CAPABILITY` = default,
avx2, avx512; those the CPU lacks are skipped), 1 and 2 threads, and the knobs that could make runs agree across
CPUs: MKL's conditional numerical reproducibility (`MKL_CBWR`), oneDNN's ISA cap (`ONEDNN_MAX_CPU_ISA`) and torch's
deterministic algorithms. For each it prints the first step at which any logged metric parts from the reference
(the machine's own path on 1 thread), which metrics stay bit-identical, whether the final weights match, and the
median step time as a ratio of the reference's, measured in the same invocation. Writes
results/benchmarks/cpu_determinism.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _report import write_json

ROOT = Path(__file__).resolve().parents[1]
CHILD = r"""
import hashlib, json, sys, time
import torch
steps, threads, deterministic = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
if deterministic:
    torch.use_deterministic_algorithms(True)
import transformers
from harness.config.run_config import load_run_config
from trainer.loop import Trainer, TrainerSettings
from trainer.models.fingerprint import Machine
from trainer.models.load import load_policy
from trainer.models.toy import ensure_toy_model
from trainer.rollout.hf import TransformersBackend
from trainer.tasks.toy_addition import ToyAdditionTask
transformers.utils.logging.disable_progress_bar()
cfg = load_run_config(sys.argv[4], [f"train.steps={steps}", f"train.threads={threads}"])
path = ensure_toy_model(cfg.model.toy, cfg.model.cache_dir)
torch.set_num_threads(threads)
torch.manual_seed(cfg.seed)
policy, tok = load_policy(str(path), torch.device("cpu"))
trainer = Trainer(policy, ToyAdditionTask(cfg.task.toy_addition), TransformersBackend(policy, tok), tok.pad_token_id,
                  TrainerSettings.of(cfg))
history = []
for step in range(1, steps + 1):
    history.append(trainer.step(step))
weights = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in policy.parameters())).hexdigest()
print(json.dumps({"machine": Machine.here().__dict__, "history": history, "weights": weights,
                  "base": str(path)}))
"""
TIMING = ("time/", "throughput/")


def run(env: dict[str, str], steps: int, threads: int, deterministic: bool) -> dict:
    full = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")}
    start = time.perf_counter()
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            str(steps),
            str(threads),
            "1" if deterministic else "0",
            str(ROOT / "ablations" / "toy_run.yaml"),
        ],
        env={**full, **env},
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["wall_s"] = time.perf_counter() - start
    return result


def parted(a: dict, b: dict) -> tuple[int | None, list[str]]:
    """The first step at which any non-timing metric differs (None if none), and the metrics equal at every step."""
    first, keys = None, set()
    for step, (x, y) in enumerate(zip(a["history"], b["history"]), start=1):
        names = {k for k in x.keys() | y.keys() if not k.startswith(TIMING)}
        differ = {k for k in names if x.get(k) != y.get(k)}
        keys |= names
        if differ and first is None:
            first = step
    same = sorted(k for k in keys if all(x.get(k) == y.get(k) for x, y in zip(a["history"], b["history"])))
    return first, same


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    native = run({}, 2, 1, False)["machine"]["cpu_capability"].lower()
    caps = [c for c in ("default", "avx2", "avx512") if c != "avx512" or native == "avx512"]
    knobs = {
        "none": {},
        "MKL_CBWR=COMPATIBLE": {"MKL_CBWR": "COMPATIBLE"},
        "MKL_CBWR=AVX2,STRICT + oneDNN AVX2": {"MKL_CBWR": "AVX2,STRICT", "ONEDNN_MAX_CPU_ISA": "AVX2"},
        "deterministic algorithms": {},
    }
    load = os.getloadavg()
    rows, results = [], {}
    for knob, env in knobs.items():
        for cap in caps:
            for threads in (1, 2) if knob == "none" else (1,):
                key = (knob, cap, threads)
                results[key] = run({**env, "ATEN_CPU_CAPABILITY": cap}, args.steps, threads, knob.startswith("det"))
                print(f"ran {knob} / {cap} / {threads} thread(s): {results[key]['wall_s']:.1f} s", flush=True)
    reference = results[("none", native, 1)]
    ref_step = statistics.median(m["time/step_s"] for m in reference["history"][1:])
    print(
        f"\nreference: {native}, 1 thread, no knob; {reference['machine']['cpu_model']}, torch "
        f"{reference['machine']['torch_version']}; load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    print(
        f"{'knob':36} {'capability':10} {'thr':>3} {'parts at':>8} {'weights':>7} {'same metrics':>12} "
        f"{'step s':>7} {'ratio':>6}  {'agrees across capabilities':>26}"
    )
    for (knob, cap, threads), r in results.items():
        first, same = parted(reference, r)
        step_s = statistics.median(m["time/step_s"] for m in r["history"][1:])
        group = [results[(knob, c, 1)] for c in caps]
        across = all(parted(group[0], g)[0] is None and g["weights"] == group[0]["weights"] for g in group[1:])
        row = {
            "knob": knob,
            "capability": cap,
            "threads": threads,
            "parts_at_step": first,
            "weights_equal": r["weights"] == reference["weights"],
            "identical_metrics": same,
            "step_s": step_s,
            "ratio": step_s / ref_step,
            "knob_agrees_across_capabilities": across,
            "reward_mean_last": r["history"][-1]["train/reward_mean"],
        }
        rows.append(row)
        print(
            f"{knob:36} {cap:10} {threads:>3} {str(first or 'never'):>8} {str(row['weights_equal']):>7} "
            f"{len(same):>12} {step_s:7.3f} {row['ratio']:6.2f}  {str(across):>26}"
        )
    after = os.getloadavg()
    print(f"load after {after[0]:.2f} {after[1]:.2f} {after[2]:.2f}")
    write_json(
        "cpu_determinism",
        {"machine": reference["machine"], "load_before": load, "load_after": after, "steps": args.steps, "rows": rows},
    )


if __name__ == "__main__":
    main()
