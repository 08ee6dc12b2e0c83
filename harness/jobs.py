"""A job: one resolved run config of a sweep, and how a worker runs it."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config import RunConfig


@dataclass(frozen=True)
class Job:
    """One training run of a sweep. Picklable, so any executor can ship it to a worker."""

    config: RunConfig
    """The fully resolved run config (tracking.experiment is the sweep's experiment)."""
    arm: str
    """Human label of the arm, e.g. `aggregation=constant advantage=group_mean` or a named arm."""
    varying: dict[str, Any] = field(default_factory=dict)
    """The settings that vary across the sweep's arms that this job sets, with its values (for tables);
    a key missing here keeps the base config's value."""

    @property
    def job_id(self) -> str:
        """Hash of the resolved config: the same grid point always has the same id."""
        return self.config.config_hash

    @property
    def arm_id(self) -> str:
        """Hash of the resolved config without the seed."""
        return self.config.arm

    @property
    def seed(self) -> int:
        return self.config.seed


def run_tags(cfg: RunConfig, sweep_id: str = "") -> dict[str, str]:
    """GUIDE §3 tags: sweep id, arm, config hash (= job id), seed, and the code version."""
    return {"sweep_id": sweep_id, "arm": cfg.arm, "config_hash": cfg.config_hash, "job_id": cfg.config_hash,
            "seed": str(cfg.seed), "name": cfg.name, "preset": cfg.objective_preset or "",
            "git_commit": _git_commit()}


RUN_NAME_MAX = 250
"""MLflow's limit on a run name (its `runs.name` column)."""


def run_name(cfg: RunConfig, arm: str | None = None) -> str:
    """MLflow run name: tracking.run_name, else `<arm>-s<seed>` for a sweep's job (its arm label, one line,
    shortened to fit MLflow), else `<name>-s<seed>`."""
    if cfg.tracking.run_name:
        return cfg.tracking.run_name
    seed = f"-s{cfg.seed}"
    label = " ".join("".join(c if c.isprintable() else " " for c in arm or cfg.name).split()) or cfg.name
    room = RUN_NAME_MAX - len(seed)
    return (label if len(label) <= room else label[:room - 3] + "...") + seed


def run_job(job: Job, tracking_uri: str, sweep_id: str, parent_run_id: str | None) -> str:
    """Train `job` in this process and return its MLflow run id (raises if the run failed)."""
    from harness.run import run_training  # heavy imports (torch) only inside workers

    tags = {"arm_label": job.arm}
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
    return run_training(job.config, tracking_uri=tracking_uri, sweep_id=sweep_id, extra_tags=tags,
                        progress=False).run_id


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""
