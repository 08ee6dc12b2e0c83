"""The user's code of a custom task, as it runs inside a `BoundedService` helper (never in harness's process).

What is imported, from where: `path/to/file.py:name` is loaded from that file by path (a relative path from the
folder of the config file), and its folder is put *last* on the import path, so the file can import its
neighbours but a neighbour named like a standard or installed module (`torch.py`, `uuid.py`) shadows nothing;
`module:name` is imported as Python would, from the standard library, the installed packages and `PYTHONPATH`,
then the config's folder, last. The helper's working directory is not on its import path.

Two factories: `rewards` (the reward functions, one request per completion) and `task_object` (a task class,
one request per method call). Standard library only here: the helper starts in a fraction of a second.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import re
import resource
import sys
from collections.abc import Callable, Mapping
from numbers import Real
from pathlib import Path
from typing import Any

from trainer.rewards.bounded import error_line
from trainer.rewards.helper import progress

NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
"""A name a reward function's extra field may have (it becomes the metric `task/<name>`)."""
RESERVED = frozenset({"reward", "correct", "row"})
TASK_METHODS = ("sample_groups", "grade", "step_metrics")


class RewardFunctionError(RuntimeError):
    """A reward function raised, has the wrong signature or returned the wrong kind of value."""


def _last_on_path(folder: str) -> None:
    if folder not in sys.path:
        sys.path.append(folder)


def load_object(spec: str, root: str | None) -> Any:
    """The object `spec` names: `module:name` imported from the import path (`root` last on it), or
    `path/to/file.py:name` with a relative path taken from `root`. One-line `ValueError` if it cannot be had."""
    where, _, name = spec.rpartition(":")
    quiet, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__ beside the user's files
    try:
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
                _last_on_path(str(path.parent))  # the file may import its neighbours, never ahead of the library
                try:
                    loader.loader.exec_module(module)
                except MemoryError:
                    raise ValueError(f"{spec}: {path} does not import within {_memory_bound()}") from None
                except BaseException as exc:  # noqa: BLE001 (the user's module: any error is theirs, named)
                    raise ValueError(f"{spec}: {path} does not import ({error_line(exc)})") from None
                sys.modules[module_name] = module
        else:
            if root is not None:
                _last_on_path(root)
            try:
                module = importlib.import_module(where)
            except MemoryError:
                raise ValueError(f"{spec}: module {where} does not import within {_memory_bound()}") from None
            except BaseException as exc:  # noqa: BLE001
                raise ValueError(f"{spec}: module {where} does not import ({error_line(exc)})") from None
    finally:
        sys.dont_write_bytecode = quiet
    if not hasattr(module, name):
        raise ValueError(f"{spec}: {where} has no {name}")
    return getattr(module, name)


def _memory_bound() -> str:
    """The memory bound this helper runs under, as the setting that gives it."""
    limit = resource.getrlimit(resource.RLIMIT_DATA)[0]
    mb = "no" if limit == resource.RLIM_INFINITY else f"{limit // 2**20} MB of"
    return f"{mb} memory (task.custom.memory_mb)"


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


def load_task_class(spec: str, root: str | None) -> type:
    """The task class `spec` names, checked to have the methods of trainer.tasks.base.Task."""
    cls = load_object(spec, root)
    if not isinstance(cls, type):
        raise ValueError(f"{spec}: is a {type(cls).__name__}, not a class")
    missing = [m for m in TASK_METHODS if not callable(getattr(cls, m, None))]
    if missing:
        raise ValueError(f"{spec}: has no {', '.join(missing)} (trainer.tasks.base.Task)")
    return cls


# ---- factories (run in the helper) -----------------------------------------------------------------
def rewards(init: dict[str, Any]) -> Callable[[list[Any]], list[dict[str, Any]]]:
    """`BoundedService`'s factory for reward functions: imported once in the helper; each request
    `[completion, reference, prompt]` is answered with one normalised result per function."""
    functions = [(spec, load_function(spec, init["root"])) for spec in init["functions"]]

    def call(request: list[Any]) -> list[dict[str, Any]]:
        completion, reference, prompt = request
        out, seen = [], set()
        for spec, function in functions:
            progress(spec)
            try:
                value = function(completion=completion, reference=reference, prompt=prompt)
            except MemoryError:
                raise
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


def task_object(init: dict[str, Any]) -> Callable[[list[Any]], Any]:
    """`BoundedService`'s factory for a task class: `Class(**options)` built once in the helper; each request
    `[method, arguments]` calls it (trainer/tasks/custom.py's `ClassTask` is the other side)."""
    spec = init["class"]
    cls = load_task_class(spec, init["root"])
    try:
        task = cls(**init["options"])
    except MemoryError:
        raise
    except Exception as exc:
        raise ValueError(f"{spec}(**options) raised {error_line(exc)}") from exc
    from trainer.tasks import class_protocol  # numpy, only for a class task

    name = getattr(task, "name", None)
    info = {"name": name if isinstance(name, str) else cls.__name__}

    def call(request: list[Any]) -> Any:
        method, arguments = request
        if method == "info":
            return info
        progress(f"{spec}.{method}")
        try:
            return class_protocol.answer(task, method, arguments)
        except MemoryError:
            raise
        except Exception as exc:
            raise RewardFunctionError(f"{spec}.{method} raised {error_line(exc)}") from exc

    return call


# ---- what a reward function returns -----------------------------------------------------------------
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
    if isinstance(value, Real) or _is_numpy(value, ("number", "bool_")):
        return {"reward": _number(spec, "reward", value), "correct": None, "extra": {}}
    raise RewardFunctionError(f"{spec} returned {type(value).__name__}; expected {expected}")


def _is_numpy(value: Any, kinds: tuple[str, ...]) -> bool:
    """Whether `value` is one of numpy's scalar kinds (numpy is imported only if the user's code did)."""
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, tuple(getattr(np, k) for k in kinds))


def _number(spec: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or _is_numpy(value, ("bool_",)):
        return float(value)
    if not (isinstance(value, Real) or _is_numpy(value, ("number",))) or isinstance(value, complex):
        raise RewardFunctionError(f"{spec} returned {key} = {type(value).__name__}; expected a number")
    if _is_numpy(value, ("complexfloating",)):
        raise RewardFunctionError(f"{spec} returned {key} = {type(value).__name__}; expected a number")
    number = float(value)
    if not math.isfinite(number):
        raise RewardFunctionError(f"{spec} returned {key} = {number}; expected a finite number")
    return number


def _flag(spec: str, value: Any) -> bool | None:
    if value is None or isinstance(value, bool) or _is_numpy(value, ("bool_",)):
        return None if value is None else bool(value)
    raise RewardFunctionError(f"{spec} returned correct = {type(value).__name__}; expected a bool")
