"""RL step time on the toy model: generation vs update, tokens/s, and the share spent in tracking.

    python benchmarks/step_time.py [--threads 1] [--steps 20] [--prompts 8] [--group 8] [--max-new 96] [--ops 12]

Prints a table and writes results/benchmarks/step_time.json. Target: ≤ 0.2 s per step on one
core for 8 prompts × 8 samples × up to 96 new tokens; tracking ≤ 1% of step time. The main job's shape:
`--prompts 16 --max-new 128`. `--ops N` profiles the measured steps too (torch.profiler) and prints the N
operators with the most self CPU time, each with its share (profiling slows the steps it times).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch
import transformers

from harness.config.run_config import load_run_config
from harness.runs.writer import RunTracker, prepare_store
from trainer import metric_names as M
from trainer.loop import Trainer, TrainerSettings
from trainer.models.load import load_policy
from trainer.models.toy import ensure_toy_model
from trainer.rollout.hf import TransformersBackend
from trainer.tasks.toy_addition import ToyAdditionTask

ROOT = Path(__file__).resolve().parents[1]


class TimedSink:
    """Forwards metrics to a RunTracker and times every call (flushes included)."""

    def __init__(self, tracker: RunTracker):
        self.tracker, self.seconds = tracker, 0.0

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        start = time.perf_counter()
        self.tracker.log_metrics(step, metrics)
        self.seconds += time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20, help="measured steps (after 2 warm-up steps)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=96)
    ap.add_argument("--preset", default="grpo")
    ap.add_argument("--ops", type=int, default=0, help="print the N operators with the most self CPU time")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="run-config override")
    ap.add_argument("--out", default=str(ROOT / "results" / "benchmarks" / "step_time.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    transformers.utils.logging.disable_progress_bar()
    warmup = 2
    cfg = load_run_config(
        ROOT / "ablations" / "toy_run.yaml",
        [
            f"objective.preset={args.preset}",
            f"rollout.prompts_per_step={args.prompts}",
            f"rollout.group_size={args.group}",
            f"rollout.max_new_tokens={args.max_new}",
            f"train.steps={args.steps + warmup}",
            *args.set,
        ],
    )
    policy, tokenizer = load_policy(str(ensure_toy_model(cfg.model.toy, cfg.model.cache_dir)), torch.device("cpu"))
    trainer = Trainer(
        policy,
        ToyAdditionTask(cfg.task.toy_addition),
        TransformersBackend(policy, tokenizer),
        tokenizer.pad_token_id,
        TrainerSettings.of(cfg),
    )
    with tempfile.TemporaryDirectory() as tmp:
        uri = f"sqlite:///{tmp}/mlflow.db"
        with RunTracker(uri, prepare_store(uri, "bench"), config=cfg) as tracker:
            sink = TimedSink(tracker)
            steps = []
            profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) if args.ops else None
            for step in range(1, args.steps + warmup + 1):
                if profiler is not None and step == warmup + 1:
                    profiler.start()
                metrics = trainer.step(step)
                if step == warmup + 1:
                    sink.seconds = 0.0
                sink.log_metrics(step, metrics)
                if step > warmup:
                    steps.append(metrics)
            if profiler is not None:
                profiler.stop()
            start = time.perf_counter()
            tracker.flush()
            sink.seconds += time.perf_counter() - start

    def med(key: str) -> float:
        return statistics.median(m[key] for m in steps)

    total_step = sum(m[M.STEP_S] for m in steps)
    row = {
        "preset": args.preset,
        "overrides": args.set,
        "reference_kl": cfg.train.reference_kl,
        "threads": args.threads,
        "prompts": args.prompts,
        "group": args.group,
        "max_new_tokens": args.max_new,
        "steps": args.steps,
        "step_s": med(M.STEP_S),
        "generate_s": med(M.GENERATE_S),
        "update_s": med(M.UPDATE_S),
        "tokens_per_s": med(M.TOKENS_PER_S),
        "response_len_mean": med(M.LENGTH_MEAN),
        "tracking_share": sink.seconds / (total_step + sink.seconds),
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
    }
    print(
        f"{'preset':8} {'ref KL':>6} {'thr':>3} {'shape':>10} {'step s':>7} {'gen s':>7} {'upd s':>7} {'tok/s':>7} "
        f"{'len':>5} {'tracking':>8}"
    )
    print(
        f"{row['preset']:8} {str(cfg.train.reference_kl):>6} {args.threads:>3} "
        f"{f'{args.prompts}x{args.group}x{args.max_new}':>10} "
        f"{row['step_s']:7.3f} {row['generate_s']:7.3f} {row['update_s']:7.3f} {row['tokens_per_s']:7.0f} "
        f"{row['response_len_mean']:5.1f} {100 * row['tracking_share']:7.2f}%"
    )
    if profiler is not None:
        row["ops"] = top_ops(profiler, args.ops)
        print(f"{'operator':52} {'self CPU s':>10} {'share':>6} {'calls':>7}")
        for op in row["ops"]:
            print(f"{op['name'][:52]:52} {op['self_cpu_s']:10.3f} {100 * op['share']:5.1f}% {op['calls']:7d}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(row, indent=2))
    print(f"wrote {out}")


def top_ops(profiler: torch.profiler.profile, n: int) -> list[dict]:
    """The `n` operators with the most self CPU time over the profiled steps, with their share of the total."""
    events = profiler.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    ranked = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:n]
    return [
        {
            "name": e.key,
            "self_cpu_s": e.self_cpu_time_total / 1e6,
            "share": e.self_cpu_time_total / total,
            "calls": e.count,
        }
        for e in ranked
    ]


if __name__ == "__main__":
    main()
