"""One training run: config → model → trainer → MLflow, with a live progress line."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import transformers
from tqdm import tqdm

from harness.config import RunConfig
from harness.jobs import run_name, run_tags
from harness.tracking import RunTracker, default_tracking_uri, prepare_store
from trainer import metric_names as M
from trainer.loop import Trainer
from trainer.models.load import load_policy, pick_device
from trainer.models.toy import ensure_toy_model
from trainer.rollout.hf import TransformersBackend
from trainer.tasks.toy_addition import ToyAdditionTask


@dataclass(frozen=True)
class RunResult:
    run_id: str
    tracking_uri: str
    experiment_id: str


def tracking_target(cfg: RunConfig, tracking_uri: str | None = None) -> tuple[str, str]:
    """(tracking URI, experiment id), creating the store and experiment if needed."""
    uri = default_tracking_uri(cfg.tracking.results_dir, tracking_uri or cfg.tracking.uri)
    return uri, prepare_store(uri, cfg.tracking.experiment)


def run_training(cfg: RunConfig, *, tracking_uri: str | None = None, sweep_id: str = "",
                 extra_tags: dict[str, str] | None = None, progress: bool = True) -> RunResult:
    """Train one run and log it; a failure ends the MLflow run FAILED with its reason, then raises.

    `extra_tags` are added to the run's tags (a sweep passes its arm label and `mlflow.parentRunId`)."""
    transformers.utils.logging.disable_progress_bar()  # our own progress line is the one to read
    uri, experiment_id = tracking_target(cfg, tracking_uri)
    device = pick_device(cfg.train.device)
    # the toy build (SFT on batches of 64) uses every core; the tiny RL steps run best on train.threads
    path = (str(ensure_toy_model(cfg.model.toy, cfg.model.cache_dir)) if cfg.model.source == "toy"
            else cfg.model.name_or_path)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    torch.manual_seed(cfg.seed)
    policy, tokenizer = load_policy(path, device)
    task = ToyAdditionTask(cfg.task.toy_addition)
    trainer = Trainer(policy, task, TransformersBackend(policy, tokenizer), tokenizer.pad_token_id,
                      cfg.objective, cfg.rollout, cfg.train, cfg.seed)
    name = run_name(cfg)
    tags = {**run_tags(cfg, sweep_id), **(extra_tags or {})}
    with RunTracker(uri, experiment_id, run_name=name, tags=tags, config=cfg) as tracker:
        bar = tqdm(total=cfg.train.steps, desc=name, unit="step", disable=not progress, dynamic_ncols=True)
        try:
            trainer.run(tracker, on_step=lambda step, m: _progress(bar, m))
        finally:
            bar.close()
            tracker.log_table("rollouts", trainer.rollout_table())  # kept even when the run fails
        return RunResult(tracker.run_id, uri, experiment_id)


def _progress(bar: tqdm, m: dict[str, float]) -> None:
    fmt = lambda key: f"{m[key]:.0f}" if key in m else "-"  # noqa: E731
    bar.set_postfix_str(f"reward {m[M.REWARD_MEAN]:.2f} acc {m[M.ACCURACY]:.2f} "
                        f"len correct {fmt(M.LENGTH_CORRECT_MEAN)} incorrect {fmt(M.LENGTH_INCORRECT_MEAN)}",
                        refresh=False)
    bar.update(1)
