"""`harness tune`: an Optuna study whose trials are ordinary harness runs.

The study lives in an Optuna RDB storage (SQLite under results/ by default); each trial is one
training run in MLflow, tagged with the study and the trial number, under one parent run, with the
study's id as its `sweep_id` so the dashboard and `harness report` read a study like a sweep.
Workers (local processes or Ray tasks) share the storage and ask it for trials until the study has
`trials` finished (complete or pruned) trials; a rerun resumes, first failing the trials a killed
invocation left RUNNING.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from harness.engine.local import die_with_parent
from harness.engine.resume import fail_orphans
from harness.engine.sweep import end_parent, parent_run, sole_invocation
from harness.runs.layout import ARM_LABEL_TAG, PARENT_RUN_TAG, STUDY_TAG, TRIAL_TAG
from harness.runs.writer import RunStopped, prepare_store
from harness.spec.at import At
from harness.spec.tune import TunePlan, TuneSpec, load_tune

DONE = (TrialState.COMPLETE, TrialState.PRUNED)
ORPHAN = "orphaned: the tune process died while this trial was running"
MAX_FAILURES = 3  # consecutive failed trials in one worker: a broken config, not bad luck


def default_storage(plan: TunePlan, explicit: str | None = None) -> str:
    """--storage, else the file's storage, else sqlite:///<abs results dir>/optuna.db."""
    url = explicit or plan.spec.storage
    return url or "sqlite:///" + str((Path(plan.results_dir) / "optuna.db").resolve())


def storage(url: str) -> optuna.storages.RDBStorage:
    """An RDB storage; SQLite waits for a locked database instead of failing (several workers)."""
    if url.startswith("sqlite:///"):
        Path(url[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
        return optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 60}})
    return optuna.storages.RDBStorage(url)


def sampler(spec: TuneSpec, worker: int) -> optuna.samplers.BaseSampler:
    seed = spec.sampler.seed + 1000 * worker
    if spec.sampler.name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if spec.sampler.name == "grid":
        return optuna.samplers.GridSampler({k: d.grid() for k, d in spec.space.items()}, seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


def pruner(spec: TuneSpec) -> optuna.pruners.BasePruner:
    p = spec.pruner
    if p.name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=p.startup_trials, n_warmup_steps=p.warmup_steps)
    if p.name == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=p.min_resource, reduction_factor=p.reduction_factor)
    return optuna.pruners.NopPruner()


def suggest(trial: optuna.Trial, spec: TuneSpec) -> dict[str, Any]:
    out = {}
    for key, d in spec.space.items():
        if d.type == "categorical":
            out[key] = trial.suggest_categorical(key, d.choices)
        elif d.type == "int":
            out[key] = trial.suggest_int(key, int(d.low), int(d.high), step=int(d.step or 1))
        else:
            out[key] = trial.suggest_float(key, d.low, d.high, log=d.type == "log_float", step=d.step)
    return out


def score(steps: list[int], values: list[float], at: str, direction: str) -> float:
    """The trial's objective from its per-step values, read as the report reads a run (`At.value`)."""
    if not values:
        raise ValueError("the objective metric was never logged")
    return At.parse(at, "objective.at").value(steps, values, larger_is_better=direction == "maximize")


@dataclass
class TuneResult:
    study: str
    storage: str
    finished: int
    parent_run_id: str


def run_tune(
    path: str | Path,
    *,
    overrides: list[str] | None = None,
    trials: int | None = None,
    workers: int = 1,
    storage_url: str | None = None,
    tracking_uri: str | None = None,
    executor: str = "local",
    address: str | None = None,
) -> TuneResult:
    """Create or resume the study, fail what a killed run left RUNNING, and run workers until `trials` finish."""
    from harness.runs.writer import default_tracking_uri

    plan = load_tune(path, overrides)
    spec = plan.spec
    n_trials = trials or spec.trials
    url = default_storage(plan, storage_url)
    uri = default_tracking_uri(plan.results_dir, tracking_uri)
    experiment_id = prepare_store(uri, plan.experiment)  # once, before any worker touches the store
    with sole_invocation(uri, plan.study_id, f"study {spec.name}"):  # so RUNNING below means orphaned
        study = optuna.create_study(
            study_name=spec.name,
            storage=storage(url),
            load_if_exists=True,
            direction=spec.objective.direction,
            sampler=sampler(spec, 0),
            pruner=pruner(spec),
        )
        if study.direction.name.lower() != spec.objective.direction:
            raise ValueError(
                f"study {spec.name!r} in {url} is {study.direction.name.lower()}, the file says "
                f"{spec.objective.direction}"
            )
        study.set_user_attr("objective_metric", spec.objective.metric)
        study.set_user_attr("objective_at", spec.objective.at)
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            study.tell(t.number, state=TrialState.FAIL)  # left by a killed invocation
        base = plan.trial_config({})
        if base.model.source == "toy":  # built once here, not by each worker
            from trainer.models.toy import ensure_toy_model

            ensure_toy_model(base.model.toy, base.model.cache_dir)
        fail_orphans(uri, plan.experiment, plan.study_id, ORPHAN)
        client = MlflowClient(uri)
        parent = parent_run(
            client,
            experiment_id,
            plan.experiment,
            spec.name,
            plan.study_id,
            spec.model_dump(mode="json"),
            tags={STUDY_TAG: spec.name, "optuna_storage": url},
            artifact="tune.yaml",
            text=plan.source.read_text(),
        )
        args = (str(path), overrides or [], n_trials, url, uri, parent)
        if executor == "ray":
            import ray

            from harness.engine.ray_executor import connect

            started = connect(ray, address, log_to_driver=False)
            try:
                remote = ray.remote(num_cpus=1)(_worker)
                ray.get([remote.remote(i, *args) for i in range(workers)])
            finally:
                if started:
                    ray.shutdown()
        elif workers == 1:
            _worker(0, *args)
        else:
            ctx = mp.get_context("spawn")
            procs = [ctx.Process(target=_worker_process, args=(os.getpid(), i, *args)) for i in range(workers)]
            for p in procs:
                p.start()
            for p in procs:
                p.join()
        finished = len(study.get_trials(deepcopy=False, states=DONE))
        end_parent(client, parent, failed=finished < n_trials, reason=f"{finished} of {n_trials} trials finished")
        return TuneResult(spec.name, url, finished, parent)


def _worker_process(parent_pid: int, *args) -> None:
    """A local worker process: dies with `harness tune`, then works as `_worker`."""
    die_with_parent(parent_pid)
    _worker(*args)


def _worker(index: int, path: str, overrides: list[str], n_trials: int, url: str, uri: str, parent: str) -> None:
    """Ask the study for trials until it has n_trials finished ones; each trial trains in this process."""
    from harness.engine.training import run_training

    plan = load_tune(path, overrides)
    spec = plan.spec
    study = optuna.load_study(
        study_name=spec.name, storage=storage(url), sampler=sampler(spec, index + 1), pruner=pruner(spec)
    )
    failures = 0
    while True:
        if len(study.get_trials(deepcopy=False, states=(*DONE, TrialState.RUNNING))) >= n_trials:
            return
        trial = study.ask()
        live = [t.number for t in study.get_trials(deepcopy=False, states=(*DONE, TrialState.RUNNING))]
        if sorted(live).index(trial.number) >= n_trials:  # another worker took the last slot meanwhile
            trial.set_user_attr("surplus", True)
            study.tell(trial, state=TrialState.FAIL)
            return
        params = suggest(trial, spec)
        cfg = plan.trial_config({**params, "tracking.run_name": f"{spec.name}-trial{trial.number}"})
        steps: list[int] = []
        values: list[float] = []

        def watch(
            step: int,
            metrics: dict[str, float],
            trial: optuna.Trial = trial,
            steps: list[int] = steps,
            values: list[float] = values,
        ) -> None:
            value = metrics.get(spec.objective.metric)
            if value is None:
                return
            steps.append(step)
            values.append(value)
            trial.report(value, step)
            if trial.should_prune():
                raise RunStopped(f"pruned at step {step} by the {spec.pruner.name} pruner")

        label = f"trial {trial.number}: " + " ".join(
            f"{k.split('.')[-1]}={v:.4g}" if isinstance(v, float) else f"{k.split('.')[-1]}={v}"
            for k, v in params.items()
        )
        try:
            run_training(
                cfg,
                tracking_uri=uri,
                sweep_id=plan.study_id,
                progress=False,
                watch=watch,
                extra_tags={
                    STUDY_TAG: spec.name,
                    TRIAL_TAG: str(trial.number),
                    ARM_LABEL_TAG: label,
                    PARENT_RUN_TAG: parent,
                },
                started=lambda run_id, trial=trial: trial.set_user_attr("mlflow_run_id", run_id),
            )
        except RunStopped:
            study.tell(trial, state=TrialState.PRUNED)
            failures = 0
            continue
        except Exception as exc:
            trial.set_user_attr("failure_reason", f"{type(exc).__name__}: {exc}"[:500])
            study.tell(trial, state=TrialState.FAIL)
            failures += 1
            if failures >= MAX_FAILURES:
                raise RuntimeError(f"{MAX_FAILURES} trials in a row failed; last: {exc}") from exc
            continue
        study.tell(trial, score(steps, values, spec.objective.at, spec.objective.direction))
        failures = 0
