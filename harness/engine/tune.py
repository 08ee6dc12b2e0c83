"""`harness tune`: an Optuna study whose trials are ordinary harness runs.

The study lives in an Optuna RDB storage (SQLite under results/ by default); each trial is one
training run in MLflow, tagged with the study and the trial number, under one parent run, with the
study's id as its `sweep_id` so the dashboard and `harness report` read a study like a sweep.
This process asks the study for trials and tells it their results; each trial runs as one job of an
executor (a local process or a Ray task, `workers` at once), so it gets the executor's time limit and
retries, and a trial that still fails is FAILED in the study and in MLflow with its reason. The worker
reports the objective to the storage each step, for the pruner. A rerun resumes, first failing the trials
a killed invocation left RUNNING.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import optuna
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from harness.config.at import At
from harness.config.job import Job
from harness.config.run_config import RunConfig
from harness.config.tune import TuneFile, TunePlan, load_tune
from harness.engine.executor import JobOutcome, Task, stop_reason
from harness.engine.executor_factory import make_executor
from harness.engine.resume import fail_orphans
from harness.engine.sweep import end_parent, parent_run, sole_invocation
from harness.runs.layout import ARM_LABEL_TAG, PARENT_RUN_TAG, STUDY_TAG, TRIAL_TAG
from harness.runs.writer import RunStopped, failure_reason, prepare_store

DONE = (TrialState.COMPLETE, TrialState.PRUNED)
ORPHAN = "orphaned: the tune process died while this trial was running"
MAX_FAILURES = 3  # consecutive failed trials (after their retries): a broken config, not bad luck


def storage(url: str) -> optuna.storages.RDBStorage:
    """An RDB storage; SQLite waits for a locked database instead of failing (several workers)."""
    if url.startswith("sqlite:///"):
        Path(url[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
        return optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 60}})
    return optuna.storages.RDBStorage(url)


def sampler(tune_file: TuneFile) -> optuna.samplers.BaseSampler:
    seed = tune_file.sampler.seed + 1000  # + 1000: what the one worker of a study drew with when trials ran in it
    if tune_file.sampler.name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if tune_file.sampler.name == "grid":
        return optuna.samplers.GridSampler({k: d.grid() for k, d in tune_file.space.items()}, seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


def pruner(tune_file: TuneFile) -> optuna.pruners.BasePruner:
    p = tune_file.pruner
    if p.name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=p.startup_trials, n_warmup_steps=p.warmup_steps)
    if p.name == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=p.min_resource, reduction_factor=p.reduction_factor)
    return optuna.pruners.NopPruner()


def suggest(trial: optuna.Trial, tune_file: TuneFile) -> dict[str, Any]:
    out = {}
    for key, d in tune_file.space.items():
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
    cpus_per_job: float = 1.0,
    gpus_per_job: float = 0.0,
    timeout_s: float | None = None,
    retries: int = 0,
) -> TuneResult:
    """Create or resume the study, fail what a killed run left RUNNING, and run trials (`workers` at once, each
    with the executor's `timeout_s` and `retries`, and on Ray `cpus_per_job`/`gpus_per_job`) until `trials`
    finish."""
    from harness.runs.layout import default_tracking_uri

    plan = load_tune(path, overrides)
    tune_file = plan.settings
    n_trials = trials or tune_file.trials
    url = plan.storage_url(storage_url)
    uri = default_tracking_uri(plan.results_dir, tracking_uri)
    experiment_id = prepare_store(uri, plan.experiment)  # once, before any worker touches the store
    with sole_invocation(uri, plan.study_id, f"study {tune_file.name}"):  # so RUNNING below means orphaned
        study = optuna.create_study(
            study_name=tune_file.name,
            storage=storage(url),
            load_if_exists=True,
            direction=tune_file.objective.direction,
            sampler=sampler(tune_file),
            pruner=pruner(tune_file),
        )
        if study.direction.name.lower() != tune_file.objective.direction:
            raise ValueError(
                f"study {tune_file.name!r} in {url} is {study.direction.name.lower()}, the file says "
                f"{tune_file.objective.direction}"
            )
        study.set_user_attr("objective_metric", tune_file.objective.metric)
        study.set_user_attr("objective_at", tune_file.objective.at)
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            study.tell(t.number, state=TrialState.FAIL)  # left by a killed invocation
        base = plan.trial_config({})
        if base.model.source == "toy":  # built once here, not by each worker
            from harness.engine.base_model import policy_path
            from harness.engine.training import build_task

            task = build_task(base) if base.model.toy.text is not None else None
            try:
                policy_path(base, task)
            finally:
                if task is not None:
                    task.close()
        fail_orphans(uri, plan.experiment, plan.study_id, ORPHAN)
        client = MlflowClient(uri)
        parent = parent_run(
            client,
            experiment_id,
            plan.experiment,
            tune_file.name,
            plan.study_id,
            tune_file.model_dump(mode="json"),
            tags={STUDY_TAG: tune_file.name, "optuna_storage": url},
            artifact="tune.yaml",
            text=plan.source.read_text(),
        )
        runner = make_executor(
            executor,
            workers=workers,
            timeout_s=timeout_s,
            retries=retries,
            address=address,
            cpus_per_job=cpus_per_job,
            gpus_per_job=gpus_per_job,
            log_to_driver=False,
        )
        driver = _Trials(plan, study, url, parent, n_trials)
        try:
            runner.run_tasks(driver.next_task, tracking_uri=uri, sweep_id=plan.study_id)
        except BaseException as exc:
            reason = stop_reason(exc) or failure_reason(exc)
            for trial in list(driver.running.values()):
                driver.fail(trial, reason)
            end_parent(client, parent, failed=True, reason=reason)
            raise
        finished = len(study.get_trials(deepcopy=False, states=DONE))
        end_parent(client, parent, failed=finished < n_trials, reason=f"{finished} of {n_trials} trials finished")
        if driver.failures >= MAX_FAILURES:
            raise RuntimeError(f"{MAX_FAILURES} trials in a row failed; last: {driver.last_reason}")
        return TuneResult(tune_file.name, url, finished, parent)


class _Trials:
    """Asks the study for trials as tasks for the executor, and tells it how each ended."""

    def __init__(self, plan: TunePlan, study: optuna.Study, url: str, parent: str, n_trials: int):
        self.plan, self.study, self.url, self.parent, self.n_trials = plan, study, url, parent, n_trials
        self.running: dict[int, optuna.Trial] = {}
        """Trials asked for and not yet told, by number."""
        self.failures = 0
        """Trials failed in a row."""
        self.last_reason: str | None = None

    def next_task(self) -> Task | None:
        """The next trial as a task; None once the study has `n_trials` finished or running ones, or too many
        trials failed in a row."""
        study, tune_file = self.study, self.plan.settings
        if self.failures >= MAX_FAILURES:
            return None
        if len(study.get_trials(deepcopy=False, states=(*DONE, TrialState.RUNNING))) >= self.n_trials:
            return None
        trial = study.ask()
        params = suggest(trial, tune_file)
        cfg = self.plan.trial_config({**params, "tracking.run_name": f"{tune_file.name}-trial{trial.number}"})
        label = f"trial {trial.number}: " + " ".join(
            f"{k.split('.')[-1]}={v:.4g}" if isinstance(v, float) else f"{k.split('.')[-1]}={v}"
            for k, v in params.items()
        )
        tags = {
            STUDY_TAG: tune_file.name,
            TRIAL_TAG: str(trial.number),
            ARM_LABEL_TAG: label,
            PARENT_RUN_TAG: self.parent,
        }
        call = partial(
            _run_trial,
            cfg,
            sweep_id=self.plan.study_id,
            tags=tags,
            study=tune_file.name,
            url=self.url,
            trial_id=trial._trial_id,  # the storage's id of the trial (Optuna has no public accessor)
            metric=tune_file.objective.metric,
            pruner=study.pruner,
            pruner_name=tune_file.pruner.name,
        )
        self.running[trial.number] = trial
        return Task(Job(config=cfg, arm=label), call, tags, key=(TRIAL_TAG,), done=partial(self.end, trial))

    def end(self, trial: optuna.Trial, outcome: JobOutcome) -> None:
        """Tell the study how the trial ended: COMPLETE with its score, PRUNED, or FAILED with the reason."""
        tune_file = self.plan.settings
        if outcome.status == "FAILED":
            self.fail(trial, outcome.reason or "failed")
        elif outcome.value is None:
            self.tell(trial, state=TrialState.PRUNED)
        else:
            try:
                value = score(*outcome.value, tune_file.objective.at, tune_file.objective.direction)
            except ValueError as exc:
                self.fail(trial, failure_reason(exc))
            else:
                self.tell(trial, value)

    def fail(self, trial: optuna.Trial, reason: str) -> None:
        trial.set_user_attr("failure_reason", reason[:500])
        self.tell(trial, state=TrialState.FAIL)
        self.failures += 1
        self.last_reason = reason

    def tell(self, trial: optuna.Trial, value: float | None = None, state: TrialState | None = None) -> None:
        self.running.pop(trial.number, None)
        self.study.tell(trial, value, state=state)
        if state != TrialState.FAIL:
            self.failures = 0


def _run_trial(
    cfg: RunConfig,
    tracking_uri: str,
    *,
    sweep_id: str,
    tags: dict[str, str],
    study: str,
    url: str,
    trial_id: int,
    metric: str,
    pruner: optuna.pruners.BasePruner,
    pruner_name: str,
) -> tuple[str | None, tuple[list[int], list[float]] | None]:
    """In the worker: train the trial's run, reporting `metric` each step to the study for its pruner.
    (run id, (steps, values) of the metric), or (run id, None) when the pruner stopped it."""
    from harness.engine.training import run_training

    # a retry reports the steps its failed attempt already reported: Optuna keeps the first values, quietly here
    warnings.filterwarnings("ignore", message="The reported value is ignored")
    loaded = optuna.load_study(study_name=study, storage=storage(url), pruner=pruner)
    trial = optuna.Trial(loaded, trial_id)  # the driver suggested its params: nothing is sampled here
    steps: list[int] = []
    values: list[float] = []
    run_ids: list[str] = []

    def started(run_id: str) -> None:
        run_ids.append(run_id)
        trial.set_user_attr("mlflow_run_id", run_id)

    def watch(step: int, metrics: dict[str, float]) -> None:
        value = metrics.get(metric)
        if value is None:
            return
        steps.append(step)
        values.append(value)
        trial.report(value, step)
        if trial.should_prune():
            raise RunStopped(f"pruned at step {step} by the {pruner_name} pruner")

    try:
        run_training(
            cfg,
            tracking_uri=tracking_uri,
            sweep_id=sweep_id,
            progress=False,
            watch=watch,
            extra_tags=tags,
            started=started,
        )
    except RunStopped:
        return run_ids[-1], None
    return run_ids[-1], (steps, values)
