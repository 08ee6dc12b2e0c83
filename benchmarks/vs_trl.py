"""One RL step of harness against one of TRL's GRPOTrainer, on the same toy checkpoint and shape.

    pip install -c constraints-cpu.txt -e ".[bench]"     # TRL: a benchmark dependency only
    python benchmarks/vs_trl.py [--steps 12] [--prompts 8] [--group 8] [--max-new 96] [--threads 1]

Both train the toy model (built or taken from the cache) with GRPO's loss (per-response token mean, std-scaled
advantages), one optimiser step per rollout batch, no KL and no reference model, temperature 1, on one CPU thread.
TRL draws the prompts once per group (its samples of a group share one prompt); harness's task gives each sample
its own noisy copy, as in every harness run. A step is timed whole on both sides: TRL's from its start to its
end, harness's `Trainer.step` call with its metrics and rollout table. The steps alternate, A B A B: a callback
at the end of each TRL step runs one harness step, so both see the same machine load. Prints per-step medians,
the generation / update split and the ratio harness / TRL (target <= 0.5), and writes
results/benchmarks/vs_trl.json.
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
from trainer import metric_names as M
from trainer.loop import Trainer, TrainerSettings
from trainer.models.load import load_policy
from trainer.models.toy import ensure_toy_model
from trainer.rollout.hf import TransformersBackend
from trainer.tasks.toy_addition import ToyAdditionTask

ROOT = Path(__file__).resolve().parents[1]


def harness_trainer(args: argparse.Namespace):
    cfg = load_run_config(
        ROOT / "ablations" / "toy_run.yaml",
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
    path = ensure_toy_model(cfg.model.toy, cfg.model.cache_dir)
    policy, tokenizer = load_policy(str(path), torch.device("cpu"))
    settings = TrainerSettings.of(cfg)
    task = ToyAdditionTask(cfg.task.toy_addition)
    return cfg, path, Trainer(policy, task, TransformersBackend(policy, tokenizer), tokenizer.pad_token_id, settings)


def trl_trainer(args: argparse.Namespace, cfg, path: Path, out_dir: str, on_step_end):
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    task = ToyAdditionTask(cfg.task.toy_addition)
    n = args.prompts * (args.steps + args.warmup + 1)
    groups = task.sample_groups(np.random.default_rng(cfg.seed + 1), n, 1)
    data = Dataset.from_dict({"prompt": [g.prompts[0] for g in groups], "problem": list(range(n))})

    def reward(prompts, completions, problem, **_):
        return [task.grade(groups[p], 0, c).reward for p, c in zip(problem, completions)]

    policy, tokenizer = load_policy(str(path), torch.device("cpu"))
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
        use_cpu=True,
        bf16=False,
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
            on_step_end(time.perf_counter() - self.start)

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
    trainer.generate_s = []

    def timed(*a, **k):  # TRL's sampling, reward and advantage computation, once per step here
        start = time.perf_counter()
        try:
            return generate(*a, **k)
        finally:
            trainer.generate_s.append(time.perf_counter() - start)

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
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="harness run-config override")
    args = ap.parse_args()
    try:
        import trl
    except ImportError:
        sys.exit('vs_trl.py needs TRL: pip install -c constraints-cpu.txt -e ".[bench]"')
    torch.set_num_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    cfg, path, ours = harness_trainer(args)
    trl_steps: list[float] = []
    our_steps: list[dict[str, float]] = []

    def after_trl_step(seconds: float) -> None:
        trl_steps.append(seconds)
        start = time.perf_counter()
        metrics = ours.step(len(our_steps) + 1)
        our_steps.append({**metrics, "wall_s": time.perf_counter() - start})  # its metrics and rollout rows included

    with tempfile.TemporaryDirectory() as tmp:
        theirs = trl_trainer(args, cfg, path, tmp, after_trl_step)
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
        },
        "harness": {
            "step_s": statistics.median(m["wall_s"] for m in ours_m),
            "generate_s": statistics.median(m[M.GENERATE_S] for m in ours_m),
            "update_s": statistics.median(m[M.UPDATE_S] for m in ours_m),
            "response_len_mean": statistics.median(m[M.LENGTH_MEAN] for m in ours_m),
        },
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
    print(f"{'':10} {'step s':>8} {'gen s':>8} {'update s':>9}")
    for name in ("trl", "harness"):
        r = row[name]
        print(f"{name:10} {r['step_s']:8.3f} {r['generate_s']:8.3f} {r['update_s']:9.3f}")
    print(f"ratio harness / TRL: {row['ratio']:.2f} (target <= 0.5: {'met' if row['ratio'] <= 0.5 else 'NOT met'})")
    write_json("vs_trl", row)


if __name__ == "__main__":
    main()
