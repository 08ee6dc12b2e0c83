"""One training run: config → model → trainer → MLflow, with a live progress line."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import transformers
from tqdm import tqdm

from harness.config.run_config import RunConfig
from harness.engine.base_model import policy_path
from harness.runs.layout import (
    ARM_LABEL_TAG,
    LENGTH_TAKEOFF_TAG,
    default_tracking_uri,
    machine_tags,
    run_name,
    run_tags,
    takeoff_value,
)
from harness.runs.writer import RunTracker, prepare_store
from trainer import metric_names as M
from trainer.loop import Trainer, TrainerSettings
from trainer.models.fingerprint import Machine, gpu_name, weights_sha256
from trainer.models.load import load_policy, pick_device
from trainer.rollout.base import RolloutBackend
from trainer.rollout.hf import TransformersBackend
from trainer.takeoff import TakeoffDetector
from trainer.tasks.base import Task
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


def run_training(
    cfg: RunConfig,
    *,
    tracking_uri: str | None = None,
    sweep_id: str = "",
    extra_tags: dict[str, str] | None = None,
    progress: bool = True,
    watch: Callable[[int, dict[str, float]], None] | None = None,
    started: Callable[[str], None] | None = None,
) -> RunResult:
    """Train one run and log it; a failure ends the MLflow run FAILED with its reason, then raises.

    `extra_tags` are added to the run's tags (a sweep passes its arm label, which names the run, and
    `mlflow.parentRunId`).
    `started(run_id)` is called once the MLflow run exists; `watch(step, metrics)` after every step, and
    may raise `RunStopped` to end the run early (KILLED, status tag PRUNED)."""
    transformers.utils.logging.disable_progress_bar()  # our own progress line is the one to read
    uri, experiment_id = tracking_target(cfg, tracking_uri)
    device = pick_device(cfg.train.device)
    task = build_task(cfg)  # first: a toy built for the run's task learns from it
    # the toy build runs on model.toy.build_threads; the tiny RL steps run best on train.threads
    try:
        path = policy_path(cfg, task)
    except BaseException:
        _close(task)
        raise
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    torch.manual_seed(cfg.seed)
    policy, tokenizer = load_policy(path, device, cfg.model.dtype, cfg.model.gradient_checkpointing)
    if cfg.train.engine == "trl":  # TRL samples for itself; harness's backend only evaluates
        from harness.engine.trl_training import TRLJob

        backend: RolloutBackend = TransformersBackend(policy, tokenizer, capture=cfg.rollout.capture)
        trainer: Trainer | TRLJob = TRLJob(cfg, policy, tokenizer, task)
    else:
        backend = build_backend(cfg, path, policy, tokenizer)
        trainer = Trainer(policy, task, backend, tokenizer.pad_token_id, TrainerSettings.of(cfg))
    evaluate_at = periodic_eval(cfg, backend)
    # the machine read after train.threads is applied: the threads the run trains on
    here = machine_tags(Machine.here(), weights_sha256(path), gpu_name(device))
    tags = {**run_tags(cfg, sweep_id), **here, **(extra_tags or {})}
    name = run_name(cfg, tags.get(ARM_LABEL_TAG))
    with RunTracker(uri, experiment_id, run_name=name, tags=tags, config=cfg) as tracker:
        if started is not None:
            started(tracker.run_id)
        takeoff = TakeoffDetector()
        bar = tqdm(total=cfg.train.steps, desc=name, unit="step", disable=not progress, dynamic_ncols=True)
        try:

            def on_step(step: int, m: dict[str, float]) -> None:
                _progress(bar, m)
                if evaluate_at is not None and (step % cfg.eval.every == 0 or step == cfg.train.steps):
                    tracker.log_metrics(step, evaluate_at(step))
                if watch is not None:
                    watch(step, m)
                takeoff.update(step, m)

            if cfg.train.steps == 0:  # evaluation only (e.g. the template study): the initial policy at step 0
                tracker.log_metrics(0, evaluate_at(0))
            trainer.run(tracker, on_step=on_step)
            tracker.set_tags({LENGTH_TAKEOFF_TAG: takeoff_value(takeoff.step)})
        finally:
            bar.close()
            tracker.log_table("rollouts", trainer.rollout_table())  # kept even when the run fails
            _close(task)
        return RunResult(tracker.run_id, uri, experiment_id)


def _close(task: Task) -> None:
    """Stop a task's helper and what it started (custom and reasoning-gym tasks have one)."""
    if callable(close := getattr(task, "close", None)):
        close()


def build_backend(cfg: RunConfig, path: str, policy, tokenizer) -> RolloutBackend:
    """The configured rollout backend; vLLM is imported only when asked for (a clear error where missing)."""
    if cfg.rollout.backend == "vllm":
        from trainer.rollout.vllm import VLLMBackend

        dtype = {torch.bfloat16: "bfloat16", torch.float16: "float16"}.get(policy.dtype, "float32")
        return VLLMBackend(
            path, tokenizer, dtype=dtype, seed=cfg.seed, gpu_memory_utilization=cfg.rollout.vllm_gpu_memory_utilization
        )
    return TransformersBackend(policy, tokenizer, capture=cfg.rollout.capture)


def build_task(cfg: RunConfig) -> Task:
    """The configured task; a math pool is de-duplicated against the evaluation sets first."""
    if cfg.task.name == "toy_addition":
        return ToyAdditionTask(cfg.task.toy_addition)
    if cfg.task.name == "custom":
        from trainer.tasks.custom import build_task as custom_task

        return custom_task(cfg.task.custom)
    if cfg.task.name == "reasoning_gym":
        from trainer.tasks.reasoning_gym import ReasoningGymTask

        return ReasoningGymTask(cfg.task.reasoning_gym)
    from trainer.data.benchmarks import BENCHMARKS, dedupe, load_benchmark
    from trainer.data.records import FieldMap, load_problems
    from trainer.tasks.math import MathTask

    m = cfg.task.math
    pool = (
        load_benchmark(m.train)
        if m.train in BENCHMARKS
        else load_problems(
            m.train, fields=FieldMap(**m.fields.model_dump()), split=m.split, answer_format=m.answer_format
        )
    )
    pool, _ = dedupe(pool, [load_benchmark(b) for b in m.dedupe_against])
    return MathTask(pool[: m.limit] if m.limit else pool, template=m.template)


def periodic_eval(cfg: RunConfig, backend: RolloutBackend) -> Callable[[int], dict[str, float]] | None:
    """eval/<benchmark>/... at a step, with the task's template; None when eval.every is 0."""
    if not cfg.eval.every:
        return None
    from harness.engine.evaluation import load_benchmarks
    from trainer.evaluate import evaluate
    from trainer.rollout.base import SamplingParams

    e = cfg.eval
    benchmarks = load_benchmarks(e.benchmarks, e.limit)
    budget = e.max_new_tokens or cfg.rollout.max_new_tokens
    params = SamplingParams(budget, e.temperature, e.top_p)  # temperature 0: greedy
    template = cfg.task.math.template if cfg.task.name == "math" else "none"
    return lambda step: evaluate(backend, benchmarks, template=template, k=e.k, params=params, seed=cfg.seed + step)


def _progress(bar: tqdm, m: dict[str, float]) -> None:
    fmt = lambda key: f"{m[key]:.0f}" if key in m else "-"  # noqa: E731
    bar.set_postfix_str(
        f"reward {m[M.REWARD_MEAN]:.2f} acc {m[M.ACCURACY]:.2f} "
        f"len correct {fmt(M.LENGTH_CORRECT_MEAN)} incorrect {fmt(M.LENGTH_INCORRECT_MEAN)}",
        refresh=False,
    )
    bar.update(1)
