"""Does RL on the shipped base model give the same numbers on every CPU code path, and what makes it?

    python benchmarks/cpu_determinism.py [--steps 20]

One toy run (the main job's GRPO arm, seed 0, on the shipped base model) per configuration, each in a fresh process
so that the environment reaches torch before it starts: torch's CPU capability (`ATEN_CPU_CAPABILITY` = default,
avx2, avx512; those the CPU lacks are skipped) with MKL choosing its own path, on 1 and 2 threads; the knobs that
could make runs agree across CPUs (MKL's conditional numerical reproducibility `MKL_CBWR`, torch's deterministic
algorithms); and harness's pin (`trainer.cpu_path`), also on an emulated AVX2-only CPU. For each it prints the first
step at which any logged metric parts from the reference (the machine's own paths, 1 thread) and from the pin,
whether the final weights match, and the median step time as a ratio of the reference's, all in one invocation.
Writes results/benchmarks/cpu_determinism.json.
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

from trainer.cpu_path import PINNED

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


KNOBS = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def run(env: dict[str, str], steps: int, threads: int, deterministic: bool) -> dict:
    """One run in a fresh process with `env` alone of `KNOBS` (`trainer`'s pin sets what is unset, so the unpinned
    configurations name both of its variables)."""
    full = {k: v for k, v in os.environ.items() if k not in KNOBS}
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


def compare_stores(a: str, b: str, experiment: str) -> None:
    """For each job (by job id) finished in both stores: the first step at which any metric differs (timing aside),
    and the first at which what was sampled does (the rollout's reward, accuracy or lengths)."""
    from mlflow.tracking import MlflowClient

    sampled = ("train/reward_mean", "train/accuracy", "train/length_mean", "train/tokens_generated")

    def histories(uri: str) -> dict[str, tuple[str, dict[str, dict[int, float]]]]:
        client = MlflowClient(uri)
        exp = client.get_experiment_by_name(experiment)
        out = {}
        for run in client.search_runs([exp.experiment_id], "attributes.status = 'FINISHED'", max_results=1000):
            keys = [k for k in run.data.metrics if not k.startswith(TIMING)]
            hist = {k: {m.step: m.value for m in client.get_metric_history(run.info.run_id, k)} for k in keys}
            out[run.data.tags.get("job_id", "")] = (run.data.tags.get("arm_label", ""), hist)
        return out

    first, second = histories(a), histories(b)
    rows = []
    for job in sorted(first.keys() & second.keys()):
        (arm, x), (_, y) = first[job], second[job]
        steps = sorted(set().union(*[h.keys() for h in x.values()]))
        parts = [s for s in steps if any(x[k].get(s) != y.get(k, {}).get(s) for k in x)]
        parts_sampled = [s for s in steps if any(x[k].get(s) != y.get(k, {}).get(s) for k in sampled if k in x)]
        rows.append(
            {
                "job": job,
                "arm": arm,
                "steps": len(steps),
                "any_metric_parts_at": parts[0] if parts else None,
                "sampled_parts_at": parts_sampled[0] if parts_sampled else None,
            }
        )
        print(
            f"{arm[:52]:52} {job[:12]} any metric parts at {rows[-1]['any_metric_parts_at']}, "
            f"what was sampled at {rows[-1]['sampled_parts_at']} (of {len(steps)} steps)"
        )
    write_json("cpu_determinism_stores", {"stores": [a, b], "experiment": experiment, "jobs": rows})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--stores", nargs=2, metavar="URI", help="compare one sweep's runs in two stores, then stop")
    ap.add_argument("--experiment", default="dr_grpo_bias", help="with --stores: the sweep's experiment")
    ap.add_argument("--pairs", type=int, default=3, help="native/pinned runs alternated for the cost figure")
    args = ap.parse_args()
    if args.stores:
        compare_stores(*args.stores, args.experiment)
        return
    # torch takes the best path the CPU has at or below the one asked for: asking for avx512 finds the native one
    native = run({"ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "AUTO"}, 2, 1, False)["machine"]["cpu_capability"]
    native = native.lower()
    caps = [c for c in ("default", "avx2", "avx512") if c != "avx512" or native == "avx512"]
    auto = {"MKL_CBWR": "AUTO"}  # MKL's own choice of code path for this CPU (its default)
    configs: dict[str, tuple[dict[str, str], int, bool]] = {}
    for cap in caps:
        for threads in (1, 2):
            configs[f"torch {cap}, MKL auto, {threads} thr"] = ({**auto, "ATEN_CPU_CAPABILITY": cap}, threads, False)
    for cap in caps:
        configs[f"torch {cap}, MKL_CBWR=COMPATIBLE"] = (
            {"MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": cap},
            1,
            False,
        )
        configs[f"torch {cap}, deterministic algorithms"] = ({**auto, "ATEN_CPU_CAPABILITY": cap}, 1, True)
    pinned = dict(PINNED)
    configs["pinned (harness's default), 1 thr"] = (pinned, 1, False)
    configs["pinned (harness's default), 2 thr"] = (pinned, 2, False)
    # what an AVX2-only CPU would run under the pin: MKL and oneDNN capped at AVX2 as well
    capped = {**pinned, "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    configs["pinned, on an emulated AVX2-only CPU"] = (capped, 1, False)
    load = os.getloadavg()
    results = {}
    for name, (env, threads, deterministic) in configs.items():
        results[name] = run(env, args.steps, threads, deterministic)
        print(f"ran {name}: {results[name]['wall_s']:.1f} s", flush=True)
    # the pin's cost, from runs alternated so that a drift in load falls on both sides alike
    pairs = {"native": [], "pinned": []}
    for _ in range(args.pairs):
        for side, env in (("native", {"ATEN_CPU_CAPABILITY": native, "MKL_CBWR": "AUTO"}), ("pinned", PINNED)):
            pairs[side].append(
                statistics.median(m["time/step_s"] for m in run(env, args.steps, 1, False)["history"][1:])
            )
    after = os.getloadavg()
    reference_name = f"torch {native}, MKL auto, 1 thr"
    reference, pin_ref = results[reference_name], results["pinned (harness's default), 1 thr"]
    ref_step = statistics.median(m["time/step_s"] for m in reference["history"][1:])
    m = reference["machine"]
    print(
        f"\nreference: {reference_name} on {m['cpu_model']}, torch {m['torch_version']}, {args.steps} steps; "
        f"load before {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, after {after[0]:.2f} {after[1]:.2f} {after[2]:.2f}"
    )
    print(
        f"{'configuration':44} {'torch path':>10} {'parts from ref':>14} {'from pinned':>11} {'weights=ref':>11} "
        f"{'step s':>7} {'ratio':>6}"
    )
    rows = []
    for name, r in results.items():
        first, same = parted(reference, r)
        first_pin, _ = parted(pin_ref, r)
        step_s = statistics.median(m["time/step_s"] for m in r["history"][1:])
        row = {
            "configuration": name,
            "env": configs[name][0],
            "threads": configs[name][1],
            "torch_capability": r["machine"]["cpu_capability"],
            "parts_from_reference_at": first,
            "parts_from_pinned_at": first_pin,
            "weights_equal_reference": r["weights"] == reference["weights"],
            "weights_equal_pinned": r["weights"] == pin_ref["weights"],
            "identical_metrics": same,
            "step_s": step_s,
            "ratio": step_s / ref_step,
            "reward_mean_last": r["history"][-1]["train/reward_mean"],
        }
        rows.append(row)
        print(
            f"{name:44} {row['torch_capability']:>10} {str(first or 'never'):>14} {str(first_pin or 'never'):>11} "
            f"{str(row['weights_equal_reference']):>11} {step_s:7.3f} {row['ratio']:6.2f}"
        )
    write_json(
        "cpu_determinism",
        {
            "machine": m,
            "load_before": load,
            "load_after": after,
            "steps": args.steps,
            "reference": reference_name,
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
