"""Tune files → a validated study tune_file: the search space over run settings, the objective, sampler,
pruner and trial budget. Every problem is one `ConfigError` line naming the file and key."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from harness.config.at import DEFAULT_AT, At
from harness.config.errors import ConfigError
from harness.config.plan import RunsFile, refuse_taken_overrides
from harness.config.run_config import RunConfig, anchored
from harness.config.yaml_io import (
    apply_overrides,
    load_yaml,
    set_dotted,
    validate,
)
from trainer.config import STRICT as _STRICT
from trainer.config import Seed

MAX_GRID_POINTS = 100_000
"""Most points a grid-sampled space may have, counted from its settings before any is listed (the grid sampler
lists every point; at one training run a trial, a grid this size is past any tuning budget)."""


class Dimension(BaseModel):
    """One searched setting."""

    model_config = _STRICT

    type: Literal["float", "log_float", "int", "categorical"]
    """float (uniform), log_float (log-uniform), int, or categorical."""
    low: float | None = None
    """Lower bound (float, log_float, int)."""
    high: float | None = None
    """Upper bound, inclusive (float, log_float, int)."""
    step: float | None = Field(None, gt=0)
    """Grid step (int, float; required by the grid sampler for them): the grid is low, low + step, ... up to high."""
    choices: list[Any] | None = None
    """The values of a categorical setting."""

    @model_validator(mode="after")
    def _check(self) -> Dimension:
        if self.type == "categorical":
            if not self.choices:
                raise ValueError("a categorical setting needs choices")
        elif self.low is None or self.high is None or self.low > self.high:
            raise ValueError("needs low <= high")
        elif self.type == "log_float" and self.low <= 0:
            raise ValueError("log_float needs low > 0")
        return self

    def grid_size(self) -> int:
        """How many values `grid()` lists, counted from low, high and step; more than `MAX_GRID_POINTS` is an error."""
        if self.type == "categorical":
            return len(self.choices)
        if self.step is None:
            raise ValueError("the grid sampler needs a step for non-categorical settings")
        steps = (self.high - self.low) / self.step  # inf if it overflows
        # + 1e-9: (0.32 - 0.2) / 0.04 is 2.9999999999999996 steps, and high is in the grid
        points = math.floor(steps + 1e-9) + 1 if steps < MAX_GRID_POINTS else math.inf
        if points > MAX_GRID_POINTS:
            raise ValueError(
                f"a step of {self.step:g} from {self.low:g} to {self.high:g} makes more than {MAX_GRID_POINTS} "
                "grid points"
            )
        return points

    def grid(self) -> list[Any]:
        """Every value, for the grid sampler: low, low + step, ... up to high."""
        if self.type == "categorical":
            return list(self.choices)
        values = [self.low + i * self.step for i in range(self.grid_size())]
        return [int(v) for v in values] if self.type == "int" else values


class Objective(BaseModel):
    """What a trial is scored on."""

    model_config = _STRICT

    metric: str = "train/accuracy"
    """A metric every step logs (pruning reports it each step)."""
    at: str = DEFAULT_AT
    """final (last value), last-K (mean of the last K), or best (over training, in the direction)."""
    direction: Literal["maximize", "minimize"] = "maximize"
    """Whether larger is better."""

    @model_validator(mode="after")
    def _check(self) -> Objective:
        try:
            kind = At.parse(self.at, "at").kind
        except ValueError:
            kind = None
        if kind not in ("final", "last", "best"):  # what a per-step objective can be read at
            raise ValueError(f"at: {self.at!r} is not one of final, last-K (e.g. last-10), best")
        return self


class Sampler(BaseModel):
    """Optuna's sampler."""

    model_config = _STRICT

    name: Literal["tpe", "random", "grid"] = "tpe"
    """TPE (default), random search, or the full grid."""
    seed: Seed = 0
    """Seed of the sampler: one sampler, in the process running `harness tune`, draws every trial's parameters."""


class Pruner(BaseModel):
    """Stopping unpromising trials on the metric reported each step."""

    model_config = _STRICT

    name: Literal["none", "median", "hyperband"] = "median"
    """none, median (stop a trial below the median of earlier trials at the same step), or hyperband."""
    startup_trials: int = Field(2, ge=0)
    """Median: trials that run to the end before any is pruned."""
    warmup_steps: int = Field(10, ge=0)
    """Median: steps of each trial before it may be pruned."""
    min_resource: int = Field(10, ge=1)
    """Hyperband: the smallest budget in steps."""
    reduction_factor: int = Field(3, ge=2)
    """Hyperband: successive-halving rate."""


class TuneFile(RunsFile):
    """A tune file (its name is the study's: a study of that name in the storage is resumed)."""

    space: dict[str, Dimension] = Field(min_length=1)
    """Searched settings: dotted run-config key → dimension."""
    objective: Objective = Objective()
    sampler: Sampler = Sampler()
    pruner: Pruner = Pruner()
    trials: int = Field(12, ge=1)
    """Finished (complete or pruned) trials wanted in the study."""
    storage: str | None = None
    """Optuna RDB storage URL (null = sqlite under the base config's results dir, optuna.db)."""

    @model_validator(mode="after")
    def _check(self) -> TuneFile:
        if self.sampler.name == "grid":
            size = 1
            for i, (key, dim) in enumerate(self.space.items()):
                try:
                    size *= dim.grid_size()
                except ValueError as exc:
                    raise ValueError(f"space.{key}: {exc}") from None
                if size > MAX_GRID_POINTS:
                    raise ValueError(
                        f"space: the grid's first {i + 1} settings make {size} points, over the limit of "
                        f"{MAX_GRID_POINTS}"
                    )
            if self.trials > size:
                raise ValueError(f"trials: {self.trials} exceeds the grid's {size} points")
        return self


@dataclass(frozen=True)
class TunePlan:
    """A validated study: the tune file, the trials' base run config (as data), and where things go."""

    settings: TuneFile
    source: Path
    base: dict[str, Any]
    experiment: str
    study_id: str
    """Stable id of (name, experiment): the MLflow `sweep_id` of the study's runs."""
    results_dir: str

    def storage_url(self, explicit: str | None = None) -> str:
        """The Optuna storage: --storage, else the file's storage, else sqlite:///<abs results dir>/optuna.db."""
        url = explicit or self.settings.storage
        return url or "sqlite:///" + str((Path(self.results_dir) / "optuna.db").resolve())

    def trial_config(self, params: dict[str, Any]) -> RunConfig:
        return validate(RunConfig, set_dotted(self.base, params, f"{self.source}: trial"), f"{self.source}: trial")


def load_tune(path: str | Path, overrides: list[str] | None = None) -> TunePlan:
    """Read and validate a tune file; each searched key is checked at both ends of its range."""
    path = Path(path)
    tune_file = validate(TuneFile, load_yaml(path), str(path))
    refuse_taken_overrides(path, {*tune_file.space, "tracking.experiment"}, overrides or [])
    base = tune_file.base_config(path)
    experiment = tune_file.experiment or tune_file.name
    base = apply_overrides(set_dotted(base, tune_file.set, f"{path}: set"), overrides or [])
    base = set_dotted(base, {"tracking.experiment": experiment}, str(path))
    base = anchored(base, path.parent, str(path))
    plan = TunePlan(
        tune_file,
        path,
        base,
        experiment,
        hashlib.sha256(f"tune:{tune_file.name}:{experiment}".encode()).hexdigest()[:12],
        validate(RunConfig, base, f"{path}: base").tracking.results_dir,
    )
    for key, dim in tune_file.space.items():
        for value in dim.choices or [dim.low, dim.high]:
            value = int(value) if dim.type == "int" else value
            try:
                plan.trial_config({key: value})
            except ConfigError as exc:
                raise ConfigError(f"{path}: space.{key}: {value!r} is not a valid value ({exc})") from None
    return plan
