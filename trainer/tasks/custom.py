"""A task of the user's: rows of a dataset, a prompt template and reward functions given by import path.

The user's code never runs in harness's process: the reward functions (and a task class) are imported and called
in a `BoundedService` helper (trainer/rewards/bounded.py; trainer/tasks/user_code.py is its side), each
completion's grading under `budget_s` of CPU time, with `memory_mb` of memory and `processes` processes for the
call's whole process tree, and what the code prints cut to `output_kb`. A call past its time grades wrong and
counts in train/grade_timeouts. An exception in a function, a call past the memory or process bound, or a call
whose process dies (it exits, or is killed) fails the run with one line naming the function and the row (the
traceback and what the code printed follow it in the run's failure.txt); it never scores 0. A function is called
with keywords:

    reward(completion: str, reference: dict, prompt: str) -> float | (float, bool) | {"reward": float, ...}

`reference` is the row: every column, the answer among them. A mapping may hold `correct` (bool) and more
numbers, each logged per step as the mean `task/<name>`. The reward is Σ weight × reward; correctness is the
first function's `correct`, else its reward >= `correct_threshold`. docs/tasks.md is the user's guide.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trainer.data.records import load_records, question_id
from trainer.metric_names import task_metric
from trainer.rewards.bounded import BoundedService, Limits, Reply, StartError, error_line
from trainer.rewards.grade import Grade
from trainer.tasks import class_protocol
from trainer.tasks.base import Group
from trainer.tasks.custom_config import CustomTaskConfig
from trainer.tasks.user_code import RewardFunctionError, normalise  # noqa: F401 (normalise: the documented contract)

_SLOT = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")


# ---- templates and rows ----------------------------------------------------------------------------
def template_slots(template: str) -> list[str]:
    """The column names a template's `{column}` slots read; `ValueError` for a stray brace or an empty slot."""
    slots = []
    for m in _SLOT.finditer(template):
        if m.group(0) in ("{{", "}}"):
            continue
        if m.group(1) is None or not m.group(1).strip():
            raise ValueError(f"template: a lone {m.group(0)!r} at {m.start()} (write {{{{ or }}}} for a brace)")
        slots.append(m.group(1))
    return slots


def render(template: str, row: Mapping[str, Any]) -> str:
    """`template` with each `{column}` replaced by the row's value (no format mini-language: text only)."""
    return _SLOT.sub(lambda m: m.group(0)[0] if m.group(1) is None else str(row[m.group(1)]), template)


def load_rows(settings: CustomTaskConfig) -> list[dict[str, Any]]:
    """The dataset's rows, checked: every column the settings read is in every row, and each row is JSON (it is
    sent to the reward functions). One-line `ValueError`s, naming the setting."""
    source = settings.data
    local = Path(source).expanduser()
    if not local.is_absolute() and settings.root is not None and (Path(settings.root) / local).exists():
        local = Path(settings.root) / local
    where = local if local.exists() else source
    try:
        rows = load_records(where, settings.split)
    except (OSError, ValueError) as exc:  # named once, as the settings name it
        raise ValueError(f"data: {source}: {' '.join(str(exc).split()).removeprefix(f'{where}: ')}") from None
    except Exception as exc:  # noqa: BLE001 (datasets raises its own kinds for a missing dataset)
        raise ValueError(f"data: {source} cannot be read ({error_line(exc)})") from None
    if not rows:
        raise ValueError(f"data: {source} has no rows")
    rows = rows[: settings.limit] if settings.limit else rows
    f = settings.fields
    needed = [("fields.answer", f.answer)] + ([("fields.id", f.id)] if f.id else [])
    if settings.template is None:
        needed.append(("fields.question", f.question))
    else:
        needed += [("template", s) for s in template_slots(settings.template)]
    encode = json.JSONEncoder(allow_nan=False).encode  # built once: json.dumps(row, allow_nan=False) builds one a row
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"data: {source}: row {i} is a {type(row).__name__}, not a record")
        for key, column in needed:
            if column not in row:
                raise ValueError(f"{key}: no column {column!r} in row {i} of {source} (columns: {', '.join(row)})")
        try:
            encode(row)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"data: {source}: row {i} is not JSON ({exc}): reward functions receive it") from None
    return rows


def prompts_of(settings: CustomTaskConfig, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each row's prompt: the template filled from it, else its question column as it is."""
    if settings.template is None:
        return [str(r[settings.fields.question]) for r in rows]
    return [render(settings.template, r) for r in rows]


def limits_of(settings: CustomTaskConfig) -> Limits:
    """The helper's bounds the settings give."""
    return Limits(memory_mb=settings.memory_mb, processes=settings.processes, output_kb=settings.output_kb)


def service_of(settings: CustomTaskConfig) -> BoundedService:
    """The helper that runs the settings' code: the reward functions, or the task class."""
    if settings.task_class is not None:
        init = {"class": settings.task_class, "options": settings.options, "root": settings.root}
        entry, label = "trainer.tasks.user_code:task_object", settings.task_class
    else:
        init = {"functions": [r.function for r in settings.reward], "root": settings.root}
        entry, label = "trainer.tasks.user_code:rewards", ", ".join(init["functions"])
    return BoundedService(entry, init, settings.start_s, limits_of(settings), label)


def code_problem(settings: CustomTaskConfig) -> str | None:
    """Why the settings' code cannot run (a module that does not import within the bounds, a name it lacks, a
    wrong signature, a class whose `__init__` raises), one line naming the setting; None if it builds. Checked in
    a helper, so harness's process imports none of it."""
    service = service_of(settings)
    key = "class" if settings.task_class is not None else "reward"
    try:
        service.check()
    except StartError as exc:
        return f"task.custom.{key}: {_start_error(exc)}"
    finally:
        service.close()
    return None


def _start_error(exc: StartError) -> str:
    text = str(exc)
    for prefix in ("ValueError: ", "RewardFunctionError: "):
        text = text.removeprefix(prefix)
    return f"{text} (task.custom.start_s)" if exc.late else text


def build_task(settings: CustomTaskConfig) -> Any:
    """The task `settings` define: the user's class (run in a helper), else a `CustomTask`."""
    return CustomTask(settings) if settings.task_class is None else ClassTask(settings)


# ---- the task --------------------------------------------------------------------------------------
class CustomTask:
    """Groups of G identical prompts over the user's rows, graded by the user's reward functions."""

    name = "custom"

    def __init__(self, settings: CustomTaskConfig, rows: Sequence[dict[str, Any]] | None = None):
        self.settings = settings
        self.rows = list(rows) if rows is not None else load_rows(settings)
        f = settings.fields
        self.prompts = prompts_of(settings, self.rows)
        self.ids = [str(r[f.id]) if f.id else question_id(p) for r, p in zip(self.rows, self.prompts)]
        self.functions = [r.function for r in settings.reward]
        self.weights = [r.weight for r in settings.reward]
        names = [s.rpartition(":")[2] for s in self.functions]
        self._parts = [n if names.count(n) == 1 else f"{n}_{k}" for k, n in enumerate(names)]
        self.service = service_of(settings)
        self.service.start()  # the user's modules import while the caller gets on with its work

    def sample_groups(self, rng: np.random.Generator, num_groups: int, group_size: int) -> list[Group]:
        """`num_groups` rows drawn uniformly from `rng` (distinct within a call while there are enough)."""
        picks = rng.choice(len(self.rows), size=num_groups, replace=num_groups > len(self.rows))
        return [
            Group(
                problem_id=self.ids[i],
                answer=str(self.rows[i][self.settings.fields.answer]),
                prompts=(self.prompts[i],) * group_size,
                meta=({"row": int(i)},) * group_size,
            )
            for i in picks
        ]

    def grade(self, group: Group, index: int, completion: str) -> Grade:
        """The weighted sum of the functions' rewards; a call past `budget_s` grades 0 with `timed_out` set.
        info: each extra number the functions return and, with several functions, each one's reward."""
        row = group.meta[index]["row"]
        where = f"row {row} (id {self.ids[row]!r})"
        request = [completion, self.rows[row], group.prompts[index]]
        reply = _checked(self.service, request, self.settings, ", ".join(self.functions), f", on {where}")
        if reply.timed_out:
            return Grade(reward=0.0, correct=False, timed_out=True)
        parts = reply.value
        reward = sum(w * p["reward"] for w, p in zip(self.weights, parts))
        first = parts[0]
        correct = (
            first["correct"] if first["correct"] is not None else first["reward"] >= self.settings.correct_threshold
        )
        info: dict[str, float] = {}
        for part in parts:
            info.update(part["extra"])
        if len(parts) > 1:
            info.update({f"reward_{n}": p["reward"] for n, p in zip(self._parts, parts)})
        return Grade(reward=float(reward), correct=bool(correct), info=info)

    def step_metrics(
        self, groups: Sequence[Group], grades: Sequence[Sequence[Grade]], lengths: Sequence[Sequence[int]]
    ) -> dict[str, float]:
        """`task/<name>`: the mean of each number the functions returned, over the completions that have it."""
        totals: dict[str, list[float]] = {}
        for g in (g for gs in grades for g in gs):
            for key, value in g.info.items():
                totals.setdefault(key, []).append(value)
        return {task_metric(k): sum(v) / len(v) for k, v in totals.items()}

    def close(self) -> None:
        """Stop the helper and every process the functions started."""
        self.service.close()


class ClassTask:
    """The user's task class, built and called in a helper: each method call bounded as a reward call is
    (`budget_s`, `memory_mb`, `processes`); a `grade` past its time grades 0 with `timed_out` set."""

    def __init__(self, settings: CustomTaskConfig):
        self.settings, self.spec = settings, settings.task_class
        self.service = service_of(settings)
        self.name = self._call("info", {})["name"]

    def _call(self, method: str, arguments: dict[str, Any]) -> Any:
        reply = _checked(self.service, [method, arguments], self.settings, f"{self.spec}.{method}", "")
        if reply.timed_out:
            if method == "grade":
                return None
            raise RewardFunctionError(
                f"task.custom.class: {self.spec}.{method} ran past task.custom.budget_s "
                f"({self.settings.budget_s:g} s of CPU time)"
            )
        return reply.value

    def sample_groups(self, rng: np.random.Generator, num_groups: int, group_size: int) -> list[Group]:
        arguments = {"rng": rng.bit_generator.state, "num_groups": num_groups, "group_size": group_size}
        value = self._call("sample_groups", arguments)
        rng.bit_generator.state = value["rng"]  # the job's generator goes on where the class left it
        return [class_protocol.group_in(g) for g in value["groups"]]

    def grade(self, group: Group, index: int, completion: str) -> Grade:
        arguments = {"group": class_protocol.group_out(group), "index": index, "completion": completion}
        value = self._call("grade", arguments)
        return Grade(0.0, False, timed_out=True) if value is None else class_protocol.grade_in(value)

    def step_metrics(
        self, groups: Sequence[Group], grades: Sequence[Sequence[Grade]], lengths: Sequence[Sequence[int]]
    ) -> dict[str, float]:
        arguments = {
            "groups": [class_protocol.group_out(g) for g in groups],
            "grades": [[class_protocol.grade_out(g) for g in row] for row in grades],
            "lengths": [[int(n) for n in row] for row in lengths],
        }
        return self._call("step_metrics", arguments)

    def close(self) -> None:
        """Stop the helper and every process the class started."""
        self.service.close()


def _checked(service: BoundedService, request: Any, settings: CustomTaskConfig, what: str, where: str) -> Reply:
    """The reply to `request`, or a one-line `RewardFunctionError` naming the setting, the code (`what`, or the
    function it was in) and the row (`where`) when the code raised, crossed the memory or process bound, or died;
    what the code printed follows in the error's notes."""
    key = "class" if settings.task_class is not None else "reward"
    try:
        reply = service.call(request, settings.budget_s)
    except StartError as exc:  # the code did not import, or has the wrong signature
        raise RewardFunctionError(f"task.custom.{key}: {_start_error(exc)}") from None
    if reply.error is None and reply.over is None and reply.died is None:
        return reply
    who = reply.at or what
    if reply.error is not None:
        text = reply.error.removeprefix("RewardFunctionError: ")
    elif reply.over == "memory":
        text = f"{who} used over {settings.memory_mb} MB of memory (task.custom.memory_mb)"
    elif reply.over == "processes":
        text = f"{who} had over {settings.processes} processes running (task.custom.processes)"
    else:
        text = f"{who}: {reply.died}"
    error = RewardFunctionError(f"task.custom.{key}: {text}{where}")
    if reply.traceback:
        error.add_note(f"the traceback:\n{reply.traceback}")
    if printed := service.output():
        error.add_note(f"what the code printed (at most task.custom.output_kb, its first and last halves):\n{printed}")
    raise error
