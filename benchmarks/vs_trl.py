"""One RL step of harness against one of TRL's GRPOTrainer, on the same toy checkpoint and shape.

    pip install -c constraints-cpu.txt -e ".[bench]"     # TRL: a benchmark dependency only
    python benchmarks/vs_trl.py [--steps 12] [--prompts 8] [--group 8] [--max-new 96] [--threads 1]
                                [--config RUN.yaml] [--set KEY=VALUE ...] [--name vs_trl]

Both train the run config's model (by default ablations/toy_run.yaml's toy model, built or taken from the cache; a
`model.source: hf` config's model by path) on its task, on its `train.device`, in its `model.dtype`, with gradient
checkpointing as `model.gradient_checkpointing` says on both sides (TRL's own default is on), with GRPO's loss
(per-response token mean, std-scaled advantages), one optimiser step per rollout batch, no KL and no reference
model, temperature 1, on `--threads` CPU threads. TRL draws the prompts once per group (its samples of a group share
one prompt); harness's toy task gives each sample its own noisy copy (its math task does not). A step is timed whole on
both sides: TRL's from its start to its end, harness's `Trainer.step` call with its metrics and rollout table. The
steps alternate, A B A B: a callback at the end of each TRL step runs one harness step, so both see the same machine
load. Prints per-step medians, the generation / update split, on a GPU each update's peak memory above what was
allocated before it, and the ratio harness / TRL (target <= 0.5), and writes results/benchmarks/<name>.json.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import write_json

from harness.config.run_config import load_run_config
from harness.engine.training import build_task
from trainer import metric_names as M
from trainer.loop import Trainer, TrainerSettings
from trainer.models.load import load_policy, pick_device
from trainer.models.toy import ensure_toy_model
from trainer.rollout.hf import TransformersBackend

ROOT = Path(__file__).resolve().parents[1]


class PeakMemory:
    """Peak device memory above what was allocated at `start()`, in GiB (None off CUDA)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.base = 0

    def start(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()
            self.base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()

    def read(self) -> float | None:
        if not self.cuda:
            return None
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - self.base) / 2**30


def harness_trainer(args: argparse.Namespace):
    cfg = load_run_config(
        args.config,
        [
            "objective.preset=grpo",
            "objective.kl_coef=0",
            "train.reference_kl=false",
            f"rollout.prompts_per_step={args.prompts}",
            f"rollout.group_size={args.group}",
            f"rollout.max_new_tokens={args.max_new}",
            f"train.steps={args.steps + args.warmup}",
            *args.set,
        ],
    )
    path = cfg.model.name_or_path if cfg.model.source == "hf" else ensure_toy_model(cfg.model.toy, cfg.model.cache_dir)
    device = pick_device(cfg.train.device)
    policy, tokenizer = load_policy(str(path), device, cfg.model.dtype, cfg.model.gradient_checkpointing)
    backend = TransformersBackend(policy, tokenizer)
    return cfg, path, Trainer(policy, build_task(cfg), backend, tokenizer.pad_token_id, TrainerSettings.of(cfg))


def trl_trainer(args: argparse.Namespace, cfg, path: Path, out_dir: str, on_step_end, memory: PeakMemory):
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    task = build_task(cfg)
    n = args.prompts * (args.steps + args.warmup + 1)
    groups = task.sample_groups(np.random.default_rng(cfg.seed + 1), n, 1)
    data = Dataset.from_dict({"prompt": [g.prompts[0] for g in groups], "problem": list(range(n))})

    def reward(prompts, completions, problem, **_):
        return [task.grade(groups[p], 0, c).reward for p, c in zip(problem, completions)]

    device = pick_device(cfg.train.device)
    policy, tokenizer = load_policy(str(path), device, cfg.model.dtype)  # TRL turns checkpointing on itself
    config = GRPOConfig(
        output_dir=out_dir,
        per_device_train_batch_size=args.prompts * args.group,
        num_generations=args.group,
        steps_per_generation=1,
        gradient_accumulation_steps=1,
        num_iterations=1,
        max_completion_length=args.max_new,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        loss_type="grpo",
        scale_rewards="group",
        learning_rate=cfg.train.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        max_steps=args.steps + args.warmup,
        use_cpu=device.type == "cpu",
        gradient_checkpointing=cfg.model.gradient_checkpointing,
        bf16=False,  # no autocast on either side: each trains the weights in the dtype they were loaded in
        fp16=False,
        report_to="none",
        logging_steps=args.steps + args.warmup + 1,  # no log line per step
        save_strategy="no",
        dataloader_num_workers=0,
        disable_tqdm=True,
        seed=cfg.seed,
    )

    class Alternate(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.start = time.perf_counter()

        def on_step_end(self, *a, **k):
            seconds = time.perf_counter() - self.start
            trainer.update_gib.append(memory.read())
            on_step_end(seconds)

    trainer = GRPOTrainer(
        model=policy,
        reward_funcs=reward,
        args=config,
        train_dataset=data,
        processing_class=tokenizer,
        callbacks=[Alternate()],
    )
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # no log line at the end
    generate = trainer._generate_and_score_completions
    trainer.generate_s, trainer.update_gib = [], []

    def timed(*a, **k):  # TRL's sampling, reward and advantage computation, once per step here
        start = time.perf_counter()
        try:
            return generate(*a, **k)
        finally:
            trainer.generate_s.append(time.perf_counter() - start)
            memory.start()  # what follows until the step's end is its update

    trainer._generate_and_score_completions = timed
    return trainer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12, help="measured steps of each (after --warmup)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=96)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--config", type=Path, default=ROOT / "ablations" / "toy_run.yaml", help="harness run config")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="harness run-config override")
    ap.add_argument("--name", default="vs_trl", help="results/benchmarks/<name>.json")
    args = ap.parse_args()
    try:
        import trl
    except ImportError:
        sys.exit('vs_trl.py needs TRL: pip install -c constraints-cpu.txt -e ".[bench]"')
    torch.set_num_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    cfg, path, ours = harness_trainer(args)
    memory = PeakMemory(ours.device)
    update, our_gib = ours.update, []

    def measured_update(*a, **k):
        memory.start()
        try:
            return update(*a, **k)
        finally:
            our_gib.append(memory.read())

    ours.update = measured_update
    trl_steps: list[float] = []
    our_steps: list[dict[str, float]] = []

    def after_trl_step(seconds: float) -> None:
        trl_steps.append(seconds)
        start = time.perf_counter()
        metrics = ours.step(len(our_steps) + 1)
        our_steps.append({**metrics, "wall_s": time.perf_counter() - start})  # its metrics and rollout rows included

    with tempfile.TemporaryDirectory() as tmp:
        theirs = trl_trainer(args, cfg, path, tmp, after_trl_step, memory)
        theirs.train()
    w = args.warmup
    trl_step, trl_gen = trl_steps[w:], theirs.generate_s[w : len(trl_steps)]
    ours_m = our_steps[w:]
    row = {
        "trl": {
            "version": trl.__version__,
            "step_s": statistics.median(trl_step),
            "generate_s": statistics.median(trl_gen),
            "update_s": statistics.median(s - g for s, g in zip(trl_step, trl_gen)),
            "update_peak_gib": _largest(theirs.update_gib[w:]),
        },
        "harness": {
            "step_s": statistics.median(m["wall_s"] for m in ours_m),
            "generate_s": statistics.median(m[M.GENERATE_S] for m in ours_m),
            "update_s": statistics.median(m[M.UPDATE_S] for m in ours_m),
            "response_len_mean": statistics.median(m[M.LENGTH_MEAN] for m in ours_m),
            "update_peak_gib": _largest(our_gib[w:]),
        },
        "model": str(path),
        "device": ours.device.type,
        "dtype": str(ours.policy.dtype)[6:],
        "gradient_checkpointing": cfg.model.gradient_checkpointing,
        "micro_batch_size": cfg.train.micro_batch_size,
        "shape": {"prompts": args.prompts, "group": args.group, "max_new_tokens": args.max_new},
        "steps": args.steps,
        "threads": args.threads,
        "load_average": os.getloadavg(),
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
    }
    row["ratio"] = row["harness"]["step_s"] / row["trl"]["step_s"]
    print(
        f"\n{args.prompts} prompts x {args.group} samples x <= {args.max_new} new tokens, {args.threads} thread(s), "
        f"{args.steps} alternating steps each (load average {os.getloadavg()[0]:.1f})"
    )
    print(f"{'':10} {'step s':>8} {'gen s':>8} {'update s':>9} {'update GiB':>11}")
    for name in ("trl", "harness"):
        r = row[name]
        gib = "-" if r["update_peak_gib"] is None else f"+{r['update_peak_gib']:.1f}"
        print(f"{name:10} {r['step_s']:8.3f} {r['generate_s']:8.3f} {r['update_s']:9.3f} {gib:>11}")
    print(f"ratio harness / TRL: {row['ratio']:.2f} (target <= 0.5: {'met' if row['ratio'] <= 0.5 else 'NOT met'})")
    write_json(args.name, row)


def _largest(values: list[float | None]) -> float | None:
    return None if not values or values[0] is None else max(values)


if __name__ == "__main__":
    main()
