"""Sweep files → jobs: arms × grid × zipped axes (minus excluded, plus included) × seeds.

Every job's run config is resolved and validated here, before anything runs; any
problem is one `ConfigError` line naming the sweep file and the key.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from harness.config.claims import Claim, check_claims, check_text, check_unique
from harness.config.errors import ConfigError
from harness.config.job import Job
from harness.config.run_config import RunConfig, anchored
from harness.config.yaml_io import (
    Name,
    apply_overrides,
    flatten,
    load_yaml,
    set_dotted,
    validate,
)
from trainer.config import STRICT as _STRICT
from trainer.config import Seed

Overrides = dict[str, Any]
MAX_JOBS = 10_000
"""Most jobs a sweep may expand to unless `--max-jobs` allows more (counted before expanding)."""
MAX_JOBS_CEILING = 100_000
"""Most jobs `--max-jobs` may allow: far past any study of training runs; planning them holds about 1 KB a job
(7 KB for each distinct arm)."""
MAX_SEEDS_CEILING = 10_000
"""Most seeds a sweep may run per arm (the file's, `--seeds`, `--until-decided --max-seeds`), counted before they
are listed."""
MAX_SEEDS = 20
"""`--until-decided`: seeds per arm at most, unless `--max-seeds` says otherwise."""
BATCH = 2
"""`--until-decided`: seeds added per arm per round, unless `--batch` says otherwise."""


class Arm(BaseModel):
    """A named arm: overrides applied on top of the base (and of earlier arms when cumulative)."""

    model_config = _STRICT

    name: Name
    """Label shown in tables and reports."""
    set: Overrides = {}
    """Dotted-key overrides, e.g. {objective.clip_high: 0.28}."""


class ExecutorSettings(BaseModel):
    """Defaults for running the jobs; the command line may override them."""

    model_config = _STRICT

    workers: int | None = Field(None, ge=1)
    """Jobs at once on the local executor (null = cores // threads per job)."""
    timeout_s: float | None = Field(None, gt=0)
    """A job running longer is killed and marked FAILED (null = no limit)."""
    retries: int = Field(0, ge=0)
    """Extra attempts for a failed job."""


class RunsFile(BaseModel):
    """What sweep and tune files share: a name, where runs are logged, the base run config."""

    model_config = _STRICT

    name: Name
    """Sweep or study name; also the MLflow experiment unless `experiment` is set."""
    experiment: Name | None = None
    """MLflow experiment of the runs (null = the name)."""
    base: str | None = None
    """Run config file every run starts from, relative to this file."""
    set: Overrides = {}
    """Overrides applied to the base for every run."""

    def base_config(self, path: Path) -> dict[str, Any]:
        """The base run config's data (empty without one); a missing file is a one-line error."""
        if self.base is None:
            return {}
        base_path = path.parent / self.base
        if not base_path.is_file():
            raise ConfigError(f"{path}: base: no run config at {base_path}")
        return load_yaml(base_path)


class SweepFile(RunsFile):
    """A sweep file."""

    arms: list[Arm] = []
    """Named arms (optional); combined with the grid and zipped axes."""
    cumulative: bool = False
    """Each arm also carries the overrides of the arms before it (DAPO's progressive table)."""
    grid: dict[str, list[Any]] = {}
    """Axes expanded as a Cartesian product: dotted key → values."""
    zip: list[dict[str, list[Any]]] = []
    """Groups of axes that vary together: in each group every key has a list of the same length."""
    exclude: list[Overrides] = []
    """Combinations to drop: one that matches every key: value of an entry is excluded."""
    include: list[Overrides] = []
    """Extra combinations (overrides) added after the product and the exclusions."""
    seeds: list[Seed] = Field(min_length=1, max_length=MAX_SEEDS_CEILING)
    """Seeds: every combination runs once per seed."""
    profiles: dict[str, Overrides] = {}
    """Named override sets selected with --profile (e.g. `paper` for the GPU settings)."""
    executor: ExecutorSettings = ExecutorSettings()
    claims: list[Claim] = []
    """Published claims judged on this sweep's runs (`harness claims`, the report, the dashboard)."""

    @field_validator("claims")
    @classmethod
    def _claims(cls, claims: list[Claim]) -> list[Claim]:
        return check_unique(claims)

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, seeds: list[int]) -> list[int]:
        if len(set(seeds)) != len(seeds):
            raise ValueError("seeds repeat")
        return seeds

    @field_validator("arms", "grid", "zip")
    @classmethod
    def _not_empty(cls, value: Any) -> Any:
        # left out, they vary nothing (a seeds-only sweep); written empty, an axis was most likely lost
        if not value:
            raise ValueError("empty: give it an entry, or leave the key out to run the base config over the seeds")
        return value

    @field_validator("grid")
    @classmethod
    def _grid(cls, grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in grid.items():
            if not values:
                raise ValueError(f"{key}: an axis needs at least one value")
        return grid

    @model_validator(mode="after")
    def _axes(self) -> SweepFile:
        seen = set(self.grid)
        for i, group in enumerate(self.zip):
            lengths = {len(v) for v in group.values()}
            if len(lengths) > 1:
                raise ValueError(f"zip[{i}]: lists of different lengths {sorted(lengths)}")
            if 0 in lengths or not group:
                raise ValueError(f"zip[{i}]: empty group")
            if seen & set(group):
                raise ValueError(f"zip[{i}]: {', '.join(sorted(seen & set(group)))} also varies elsewhere")
            seen |= set(group)
        names = [a.name for a in self.arms]
        if len(set(names)) != len(names):
            raise ValueError(f"arms: arm names repeat ({', '.join(sorted({n for n in names if names.count(n) > 1}))})")
        if self.cumulative and not self.arms:
            raise ValueError("cumulative needs arms")
        varied = seen | {k for a in self.arms for k in a.set}
        for i, rule in enumerate(self.exclude):
            unknown = set(rule) - varied
            if not rule or unknown:
                raise ValueError(
                    f"exclude[{i}]: {', '.join(sorted(unknown)) or 'empty rule'} does not vary in this sweep"
                )
        return self

    def job_count(self) -> int:
        """Jobs before exclusions, from the axes' lengths (nothing is expanded)."""
        combos = max(1, len(self.arms))
        for values in [*self.grid.values(), *(next(iter(g.values())) for g in self.zip)]:
            combos *= len(values)
        return (combos + len(self.include)) * len(self.seeds)

    def set_keys(self) -> set[str]:
        """Run-config keys each job's combination or seed sets (an override of them would be lost)."""
        keys = {"seed", "tracking.experiment", *self.grid}
        keys |= {k for group in self.zip for k in group}
        keys |= {k for arm in self.arms for k in arm.set} | {k for extra in self.include for k in extra}
        return keys


@dataclass(frozen=True)
class SweepPlan:
    """The expanded sweep."""

    name: str
    experiment: str
    sweep_id: str
    """Stable id of the sweep (from its name and experiment): editing the grid keeps finished jobs."""
    source: str
    raw: dict[str, Any]
    """The sweep file as read (logged on the sweep's parent run)."""
    settings: SweepFile
    jobs: tuple[Job, ...]


def plan_sweep(
    path: str | Path,
    profile: str | None = None,
    overrides: list[str] | None = None,
    max_jobs: int | None = None,
    seeds: list[int] | None = None,
) -> SweepPlan:
    """Read, expand and validate a sweep file; `overrides` (`key=value`) apply to every job, `seeds`
    replace the file's (and are what the plan's raw file records). A sweep of more than `max_jobs`
    (default `MAX_JOBS`) jobs is refused before it is expanded."""
    path = Path(path)
    raw = load_yaml(path)
    if seeds is not None:
        raw = {**raw, "seeds": list(seeds)}
    sweep_file = validate(SweepFile, raw, str(path))
    check_job_count(path, "grid", sweep_file.job_count(), max_jobs)
    refuse_taken_overrides(path, sweep_file.set_keys(), overrides or [])
    base = sweep_file.base_config(path)
    if profile is not None and profile not in sweep_file.profiles:
        known = ", ".join(sweep_file.profiles) or "none"
        raise ConfigError(f"{path}: profiles: no profile {profile!r} (known: {known})")
    common = {**sweep_file.set, **(sweep_file.profiles[profile] if profile else {})}
    base = _apply(path, "set", base, common)
    base = apply_overrides(base, overrides or [])
    experiment = sweep_file.experiment or sweep_file.name
    combos = _combinations(sweep_file)
    varying = sorted({k for c in combos for k in c} - _constant_keys(combos))
    axes = set(sweep_file.grid) | {k for group in sweep_file.zip for k in group}
    jobs, seen = [], {}
    for combo in combos:
        label = _label(combo, [k for k in varying if k in axes])
        try:  # tables, reports and the dashboard print it as written
            check_text(label)
        except ValueError as exc:
            raise ConfigError(f"{path}: arm {label!r}: its label {exc}") from None
        data = _apply(
            path, f"arm '{label}'", base, {**combo, "tracking.experiment": experiment, "seed": sweep_file.seeds[0]}
        )
        data = anchored(data, path.parent, str(path))
        try:
            cfg = RunConfig.model_validate(data)
        except ValidationError:
            validate(RunConfig, data, f"{path}: arm '{label}'")  # raises the one-line error
            raise
        arm_id = cfg.arm
        if arm_id in seen:
            raise ConfigError(f"{path}: arms '{seen[arm_id]}' and '{label}' resolve to the same run config")
        seen[arm_id] = label
        values = {k: combo[k] for k in varying if k in combo}  # a key the combination leaves alone keeps the base
        for seed in sweep_file.seeds:  # seeds share the validated arm: copy instead of validating again
            jobs.append(Job(config=cfg.model_copy(update={"seed": seed}), arm=label, varying=values))
    _check_claims(path, sweep_file, jobs)
    sweep_id = hashlib.sha256(f"{sweep_file.name}\n{experiment}".encode()).hexdigest()[:12]
    return SweepPlan(sweep_file.name, experiment, sweep_id, str(path), raw, sweep_file, tuple(jobs))


def plan_until_decided(
    path: str | Path,
    *,
    max_seeds: int,
    batch: int,
    profile: str | None = None,
    overrides: list[str] | None = None,
    seeds: list[int] | None = None,
    max_jobs: int | None = None,
) -> tuple[SweepPlan, int]:
    """Every job `--until-decided` may run: the sweep over its seeds (the file's, or `seeds`), then the next integers
    up to `max_seeds` per arm; and how many seeds it starts with. The design and the jobs it makes are checked
    (one-line `ConfigError`s) before a seed is added."""
    if max_seeds > MAX_SEEDS_CEILING:
        raise ConfigError(f"{path}: --max-seeds: {max_seeds} is over the limit of {MAX_SEEDS_CEILING} seeds per arm")
    first = plan_sweep(path, profile=profile, overrides=overrides, max_jobs=max_jobs, seeds=seeds)
    if not first.settings.claims:
        raise ConfigError(f"{path}: claims: --until-decided decides claims, and the file declares none")
    shipped = list(first.settings.seeds)
    if max_seeds < len(shipped):
        raise ConfigError(f"{path}: seeds: --max-seeds {max_seeds} is below the file's {len(shipped)} seeds")
    if batch > max_seeds:
        raise ConfigError(f"{path}: --batch: {batch} seeds a round is more than --max-seeds ({max_seeds})")
    check_job_count(path, "--max-seeds", first.settings.job_count() // len(shipped) * max_seeds, max_jobs)
    extra = [max(shipped) + 1 + i for i in range(max_seeds - len(shipped))]
    full = plan_sweep(path, profile=profile, overrides=overrides, max_jobs=max_jobs, seeds=shipped + extra)
    return full, len(shipped)


def check_job_count(path: str | Path, key: str, jobs: int, max_jobs: int | None) -> None:
    """Refuse a sweep of `jobs` jobs (counted, not expanded) over `max_jobs` (default `MAX_JOBS`), which may be
    raised up to `MAX_JOBS_CEILING`."""
    limit = min(MAX_JOBS if max_jobs is None else max_jobs, MAX_JOBS_CEILING)
    if jobs > limit:
        how = (
            "the most --max-jobs allows"
            if limit == MAX_JOBS_CEILING
            else f"--max-jobs raises it, up to {MAX_JOBS_CEILING}"
        )
        raise ConfigError(f"{path}: {key}: {jobs} jobs exceed the limit of {limit} ({how})")


def arm_settings(jobs: Sequence[Job]) -> dict[str, dict[str, Any]]:
    """Each arm's label → its resolved settings as dotted keys (from the arm's first job)."""
    out: dict[str, dict[str, Any]] = {}
    for job in jobs:
        if job.arm not in out:
            out[job.arm] = flatten(job.config.model_dump(mode="json"))
    return out


def _check_claims(path: Path, sweep_file: SweepFile, jobs: list[Job]) -> None:
    """Every claim's arms, switch and levels exist in this sweep (one `ConfigError` line otherwise)."""
    if not sweep_file.claims:
        return
    arms = arm_settings(jobs)
    levels: dict[str, list[Any]] = {}
    if not sweep_file.cumulative:  # a progression has no factorial model: its claims compare arms
        for job in jobs:
            for key, value in job.varying.items():
                if value not in levels.setdefault(key, []):
                    levels[key].append(value)
    check_claims(sweep_file.claims, arms, levels, str(path))


def refuse_taken_overrides(path: Path, taken: set[str], overrides: list[str]) -> None:
    """Refuse a `--set` of a key (or a key above or below it) that the file sets per run: the run's
    own value would silently replace it."""
    for item in overrides:
        key = item.partition("=")[0].strip()
        clash = [k for k in taken if k == key or k.startswith(key + ".") or key.startswith(k + ".")]
        if clash:
            what = "seeds" if clash[0] == "seed" else "this file"
            raise ConfigError(f"{path}: --set {key}: {clash[0]} is set by {what} for every run; change it in the file")


def _combinations(sweep_file: SweepFile) -> list[Overrides]:
    arms: list[Overrides] = [{}]
    if sweep_file.arms:
        arms, acc = [], {}
        for arm in sweep_file.arms:
            acc = {**acc, **arm.set} if sweep_file.cumulative else dict(arm.set)
            arms.append({"__arm__": arm.name, **acc})
    axes = [[{k: v} for v in values] for k, values in sweep_file.grid.items()]
    axes += [
        [{k: vals[i] for k, vals in group.items()} for i in range(len(next(iter(group.values()))))]
        for group in sweep_file.zip
    ]
    combos = []
    for parts in itertools.product(arms, *axes):
        combo = {k: v for part in parts for k, v in part.items()}
        if not any(all(combo.get(k, _MISSING) == v for k, v in rule.items()) for rule in sweep_file.exclude):
            combos.append(combo)
    return combos + [{"__include__": True, **extra} for extra in sweep_file.include]


_MISSING = object()


def _constant_keys(combos: list[Overrides]) -> set[str]:
    keys = {k for c in combos for k in c}
    return {k for k in keys if k.startswith("__") or len({repr(c.get(k, _MISSING)) for c in combos}) == 1}


def _label(combo: Overrides, axis_keys: list[str]) -> str:
    """The arm's name, then `key=value` for each grid or zipped axis (last part of the dotted key)."""
    if combo.get("__include__"):  # an included combination is labelled by everything it sets
        axis_keys = [k for k in combo if not k.startswith("__")]
    parts = [str(combo["__arm__"])] if "__arm__" in combo else []
    parts += [f"{k.rsplit('.', 1)[-1]}={combo[k]}" for k in axis_keys if k in combo]
    return " ".join(parts) or "base"


def _apply(path: Path, where: str, data: dict[str, Any], overrides: Overrides) -> dict[str, Any]:
    return set_dotted(data, {k: v for k, v in overrides.items() if not k.startswith("__")}, f"{path}: {where}")
