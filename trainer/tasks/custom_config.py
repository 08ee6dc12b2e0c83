"""Settings of a task of the user's (`task.name: custom`), apart from the task, so a run config validates fast."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from trainer.config import STRICT
from trainer.data.settings import FieldsConfig

MAX_BUDGET_S = 60.0
"""The longest time bound a reward call may be given: a verifier that needs more belongs in a class task."""
CODE = re.compile(r"^(?:[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*|[^:\0\n]+\.py):[A-Za-z_]\w*$")
"""`module:name` (a dotted module on the import path) or `path/to/file.py:name`."""
OptionValue = str | int | float | bool | None


def check_code(value: str) -> str:
    if not CODE.match(value):
        raise ValueError(f"{value!r} is not module:name or path/to/file.py:name")
    return value


class RewardFunction(BaseModel):
    """One reward function and its weight in the sum."""

    model_config = STRICT

    function: str
    """`module:function` or `path/to/file.py:function` (a relative path from the folder of the config file);
    called as `function(completion=..., reference=..., prompt=...)`: see docs/tasks.md."""
    weight: float = 1.0
    """Its weight in the reward, which is Σ weight × reward over the functions (as TRL's `reward_weights`)."""

    @field_validator("function")
    @classmethod
    def _code(cls, value: str) -> str:
        return check_code(value)


class CustomTaskConfig(BaseModel):
    """A dataset and reward functions of the user's, or a task class of the user's (docs/tasks.md)."""

    model_config = ConfigDict(**STRICT, validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)

    data: str | None = None
    """Prompts and reference fields: a .jsonl / .json / .parquet file (a relative path from the folder of the
    config file, else from the working directory), a local HF dataset folder, or an HF dataset id."""
    split: str | None = None
    """Split of an HF dataset (null = the dataset's only split, else train, else test)."""
    fields: FieldsConfig = FieldsConfig(solution=None)
    """Columns: `question` is the prompt (unless `template` is set), `answer` the reference answer every row must
    have, `id` a stable id (null = a hash of the prompt); `solution` is not read."""
    template: str | None = None
    """The prompt, with `{column}` slots filled from the row (`{{` and `}}` are braces); null = the question
    column as it is."""
    reward: list[RewardFunction] = []
    """The reward functions (a single `module:function` string is one function of weight 1). The first is the
    task's grader: correctness is its `correct`, else its reward >= `correct_threshold`."""
    correct_threshold: float = 1.0
    """A completion is correct when the first function's reward reaches this and it returns no `correct` of its
    own (the default, 1.0, is full credit)."""
    budget_s: float = Field(1.0, gt=0, le=MAX_BUDGET_S)
    """Time bound of one completion's grading (all its functions), in CPU seconds, as math grading's: a call
    that runs past it grades wrong (reward 0) and counts in train/grade_timeouts. A task class's method calls
    have the same bound (a `sample_groups` or `step_metrics` past it fails the run)."""
    memory_mb: int = Field(2048, ge=64, le=1 << 20)
    """Memory bound of the user's code, in MiB: each of its processes' data segment, and the anonymous memory of
    one call's whole process tree (a call past it fails the run in one line naming the function and the row)."""
    processes: int = Field(16, ge=0, le=4096)
    """Processes one call may have running besides the one answering it (what it started, detached ones included,
    with what earlier calls left running); a call past it fails the run in one line."""
    output_kb: int = Field(64, ge=1, le=1 << 20)
    """What the user's code prints (stdout and stderr together) is kept up to this many KiB, its first and last
    halves, and shown after a failure's one line in the run's failure.txt; never streamed to the terminal."""
    start_s: float = Field(120.0, gt=0, le=3600)
    """Time bound, in wall-clock seconds, of importing the user's code (and building the task class) in its
    helper process."""
    limit: int | None = Field(None, ge=1)
    """Use only the first N rows."""
    task_class: str | None = Field(None, alias="class")
    """`module:Class` or `path/to/file.py:Class`: a class implementing trainer.tasks.base.Task, built as
    `Class(**options)`, for tasks whose samples see different prompts. It replaces data, template and reward,
    and runs in a helper process, each method call bounded as a reward call is."""
    options: dict[str, OptionValue] = {}
    """Keyword arguments of the task class (class tasks only)."""
    root: str | None = None
    """The folder relative paths are read from: harness sets it to the folder of the config file it loads, and
    refuses it written in a config. Not part of a job's identity."""

    @model_validator(mode="before")
    @classmethod
    def _one_function(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("reward"), str):
            return {**data, "reward": [{"function": data["reward"]}]}
        return data

    @field_validator("task_class")
    @classmethod
    def _class_code(cls, value: str | None) -> str | None:
        return None if value is None else check_code(value)

    @model_validator(mode="after")
    def _one_kind(self) -> CustomTaskConfig:
        if self.task_class is not None:
            given = [k for k in ("data", "template", "split", "limit") if getattr(self, k) is not None] + (
                ["reward"] if self.reward else []
            )
            if given:
                raise ValueError(f"class: a class task takes no {', '.join(given)} (the class supplies them)")
            return self
        if self.options:
            raise ValueError("options: only a class task takes options")
        if self.data is None:
            raise ValueError("data: give the dataset (a file, a dataset folder or a hub id), or a class")
        if not self.reward:
            raise ValueError("reward: give at least one reward function (module:function or file.py:function)")
        return self
