"""A task of the user's: rows of a dataset, a prompt template and reward functions given by import path.

The reward functions run in a `BoundedService` (trainer/rewards/bounded.py), each completion's grading under
`budget_s` of CPU time as math grading is: a call past it grades wrong and counts in train/grade_timeouts. An
exception in a function fails the run with one line naming the function and the row (the traceback follows it
in the run's failure.txt); it never scores 0. A function is called with keywords:

    reward(completion: str, reference: dict, prompt: str) -> float | (float, bool) | {"reward": float, ...}

`reference` is the row: every column, the answer among them. A mapping may hold `correct` (bool) and more
numbers, each logged per step as the mean `task/<name>`. The reward is Σ weight × reward; correctness is the
first function's `correct`, else its reward >= `correct_threshold`. docs/tasks.md is the user's guide.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import math
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from numbers import Real
from pathlib import Path
from typing import Any

import numpy as np

from trainer.data.records import load_records, question_id
from trainer.metric_names import task_metric
from trainer.rewards.bounded import BoundedService, StartError, error_line
from trainer.rewards.grade import Grade
from trainer.tasks.base import Group
from trainer.tasks.custom_config import CustomTaskConfig

NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
"""A name a reward function's extra field may have (it becomes the metric `task/<name>`)."""
RESERVED = frozenset({"reward", "correct", "row"})
TASK_METHODS = ("sample_groups", "grade", "step_metrics")
_SLOT = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")


class RewardFunctionError(RuntimeError):
    """A reward function raised, has the wrong signature or returned the wrong kind of value."""


# ---- names and files -------------------------------------------------------------------------------
def load_object(spec: str, root: str | None) -> Any:
    """The object `spec` names: `module:name` imported from the import path (with `root` on it), or
    `path/to/file.py:name` with a relative path taken from `root`. One-line `ValueError` if it cannot be had."""
    where, _, name = spec.rpartition(":")
    if where.endswith(".py"):
        path = Path(where).expanduser()
        path = path if path.is_absolute() or root is None else Path(root) / path
        if not path.is_file():
            raise ValueError(f"{spec}: no file {path}")
        module_name = f"harness_user_{abs(hash(str(path.resolve())))}"
        module = sys.modules.get(module_name)
        if module is None:
            loader = importlib.util.spec_from_file_location(module_name, path)
            module = importlib.util.module_from_spec(loader)
            sys.path.insert(0, str(path.parent))  # the file may import its neighbours
            quiet, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__ beside the user's file
            try:
                loader.loader.exec_module(module)
            except Exception as exc:  # noqa: BLE001 (the user's module: any error is theirs, named)
                raise ValueError(f"{spec}: {path} does not import ({error_line(exc)})") from None
            finally:
                sys.dont_write_bytecode = quiet
            sys.modules[module_name] = module
    else:
        if root is not None and root not in sys.path:
            sys.path.insert(0, root)
        quiet, sys.dont_write_bytecode = sys.dont_write_bytecode, True
        try:
            module = importlib.import_module(where)
        except Exception as exc:  # noqa: BLE001
            raise ValueError(f"{spec}: module {where} does not import ({error_line(exc)})") from None
        finally:
            sys.dont_write_bytecode = quiet
    if not hasattr(module, name):
        raise ValueError(f"{spec}: {where} has no {name}")
    return getattr(module, name)


def load_function(spec: str, root: str | None) -> Callable[..., Any]:
    """A reward function, checked to be callable as `f(completion=, reference=, prompt=)`."""
    function = load_object(spec, root)
    if not callable(function):
        raise ValueError(f"{spec}: is a {type(function).__name__}, not a function")
    try:
        inspect.signature(function).bind(completion="", reference={}, prompt="")
    except TypeError as exc:
        raise ValueError(f"{spec}: cannot be called as f(completion, reference, prompt): {exc}") from None
    except ValueError:  # a builtin without a signature: the first call says
        pass
    return function


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
    try:
        rows = load_records(local if local.exists() else source, settings.split)
    except (OSError, ValueError) as exc:
        raise ValueError(f"data: {source}: {' '.join(str(exc).split())}") from None
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
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"data: {source}: row {i} is a {type(row).__name__}, not a record")
        for key, column in needed:
            if column not in row:
                raise ValueError(f"{key}: no column {column!r} in row {i} of {source} (columns: {', '.join(row)})")
        try:
            json.dumps(row, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"data: {source}: row {i} is not JSON ({exc}): reward functions receive it") from None
    return rows


def prompts_of(settings: CustomTaskConfig, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each row's prompt: the template filled from it, else its question column as it is."""
    if settings.template is None:
        return [str(r[settings.fields.question]) for r in rows]
    return [render(settings.template, r) for r in rows]


def load_task_class(settings: CustomTaskConfig) -> type:
    """The task class `settings.task_class` names, checked to have the methods of trainer.tasks.base.Task."""
    cls = load_object(settings.task_class, settings.root)
    if not isinstance(cls, type):
        raise ValueError(f"{settings.task_class}: is a {type(cls).__name__}, not a class")
    missing = [m for m in TASK_METHODS if not callable(getattr(cls, m, None))]
    if missing:
        raise ValueError(f"{settings.task_class}: has no {', '.join(missing)} (trainer.tasks.base.Task)")
    return cls


def build_task(settings: CustomTaskConfig) -> Any:
    """The task `settings` define: the class's instance (`Class(**options)`), else a `CustomTask`."""
    if settings.task_class is None:
        return CustomTask(settings)
    cls = load_task_class(settings)
    try:
        task = cls(**settings.options)
    except Exception as exc:
        raise ValueError(f"class: {settings.task_class}(**options) raised {error_line(exc)}") from exc
    if not isinstance(getattr(task, "name", None), str):
        task.name = cls.__name__
    return task


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
        self.service = BoundedService(
            "trainer.tasks.custom:_caller", {"functions": self.functions, "root": settings.root}
        )
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
        try:
            reply = self.service.call([completion, self.rows[row], group.prompts[index]], self.settings.budget_s)
        except StartError as exc:  # the functions did not import, or have the wrong signature
            raise RewardFunctionError(f"task.custom.reward: {str(exc).removeprefix('ValueError: ')}") from None
        if reply.timed_out:
            return Grade(reward=0.0, correct=False, timed_out=True)
        if reply.error is not None:
            error = RewardFunctionError(
                f"task.custom.reward: {reply.error.removeprefix('RewardFunctionError: ')}, on {where}"
            )
            error.add_note(f"the reward function's traceback:\n{reply.traceback}")
            raise error
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


# ---- in the helper: the user's functions -----------------------------------------------------------
def _caller(init: dict[str, Any]) -> Callable[[list[Any]], list[dict[str, Any]]]:
    """`BoundedService`'s factory: the user's functions imported once in the helper; each request
    `[completion, reference, prompt]` is answered with one normalised result per function."""
    functions = [(spec, load_function(spec, init["root"])) for spec in init["functions"]]

    def call(request: list[Any]) -> list[dict[str, Any]]:
        completion, reference, prompt = request
        out, seen = [], set()
        for spec, function in functions:
            try:
                value = function(completion=completion, reference=reference, prompt=prompt)
            except Exception as exc:
                raise RewardFunctionError(f"{spec} raised {error_line(exc)}") from exc
            part = normalise(spec, value)
            for key in part["extra"]:
                if key in seen:
                    raise RewardFunctionError(f"{spec} returned {key!r}, which another reward function returns too")
                seen.add(key)
            out.append(part)
        return out

    return call


def normalise(spec: str, value: Any) -> dict[str, Any]:
    """A function's return value as `{"reward", "correct" (or None), "extra"}`; `RewardFunctionError` for
    anything but a finite number, a `(reward, correct)` pair or a mapping with a `reward`."""
    expected = "a number, a (reward, correct) pair or a mapping with 'reward'"
    if isinstance(value, Mapping):
        if "reward" not in value:
            raise RewardFunctionError(
                f"{spec} returned a mapping without 'reward' (keys: {', '.join(map(str, value))})"
            )
        extra = {}
        for key, v in value.items():
            if key in ("reward", "correct"):
                continue
            if not isinstance(key, str) or not NAME.match(key) or key in RESERVED:
                raise RewardFunctionError(
                    f"{spec} returned the field {key!r}: extra fields are metric names (a letter, then letters, "
                    "digits or _, at most 64; not reward, correct or row)"
                )
            extra[key] = _number(spec, key, v)
        return {
            "reward": _number(spec, "reward", value["reward"]),
            "correct": _flag(spec, value.get("correct")),
            "extra": extra,
        }
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise RewardFunctionError(f"{spec} returned a {type(value).__name__} of {len(value)}; expected {expected}")
        flag = _flag(spec, value[1])
        if flag is None:
            raise RewardFunctionError(f"{spec} returned a pair whose second item is None, not a bool")
        return {"reward": _number(spec, "reward", value[0]), "correct": flag, "extra": {}}
    if isinstance(value, (Real, np.number, np.bool_)):
        return {"reward": _number(spec, "reward", value), "correct": None, "extra": {}}
    raise RewardFunctionError(f"{spec} returned {type(value).__name__}; expected {expected}")


def _number(spec: str, key: str, value: Any) -> float:
    if isinstance(value, (bool, np.bool_)):
        return float(value)
    if not isinstance(value, (Real, np.number)) or isinstance(value, complex):
        raise RewardFunctionError(f"{spec} returned {key} = {type(value).__name__}; expected a number")
    number = float(value)
    if not math.isfinite(number):
        raise RewardFunctionError(f"{spec} returned {key} = {number}; expected a finite number")
    return number


def _flag(spec: str, value: Any) -> bool | None:
    if value is None or isinstance(value, (bool, np.bool_)):
        return None if value is None else bool(value)
    raise RewardFunctionError(f"{spec} returned correct = {type(value).__name__}; expected a bool")
