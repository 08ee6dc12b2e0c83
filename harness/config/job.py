"""A job: one resolved run config of a sweep, with its arm. Its id is the config's hash."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.config.run_config import RunConfig


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
