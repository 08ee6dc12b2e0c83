"""Typed YAML configs: load, apply `--set` overrides, validate into any pydantic model.

Every failure becomes a `ConfigError` whose message is one line naming the file and the key,
so that a sweep of many config files points straight at the bad one.
"""

from __future__ import annotations

import copy
import difflib
import os
import re
from typing import Any, TypeVar, get_args

import yaml
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)

_MAX_PROBLEMS = 5
# PyYAML follows YAML 1.1, where `1e-4` (no dot) is a string; on the command line it means a float.
_BARE_EXPONENT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


class ConfigError(ValueError):
    """A config that cannot be read or does not validate; the message is one line."""


def load_yaml(path: str | os.PathLike) -> dict[str, Any]:
    """Read a YAML mapping with `yaml.safe_load`. An empty file is an empty mapping."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read ({_one_line(exc)})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: {_yaml_problem(exc)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of keys, got {type(data).__name__}")
    return data


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `key.sub=value` items (from `--set`) to a copy of `data`.

    Values are YAML (`3`, `1e-4`, `true`, `[1, 2]`, `null`); dotted keys create missing
    mappings on the way. Setting below a key that holds a non-mapping value is an error.
    """
    values = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not all(p.strip() for p in key.split(".")):
            raise ConfigError(f"--set {item!r}: expected key.sub=value")
        values[key.strip()] = _parse_value(item, raw.strip())
    return set_dotted(data, values, "--set")


def set_dotted(data: dict[str, Any], values: dict[str, Any], where: str) -> dict[str, Any]:
    """A copy of `data` with each dotted key of `values` set to its (already typed) value.

    Only the mappings on the paths it sets are copied (planning a 10,000-job sweep copies a
    config per job); `data` itself is never modified."""
    result = dict(data)
    for key, value in values.items():
        parts = [p.strip() for p in key.split(".")]
        if not all(parts):
            raise ConfigError(f"{where}: {key!r} is not a dotted key")
        node = result
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"{where}: {key}: {'.'.join(parts[: depth + 1])} is {child!r}, not a mapping")
            node[part] = child = dict(child)
            node = child
        node[parts[-1]] = copy.deepcopy(value)
    return result


def validate(model_cls: type[M], data: dict[str, Any], source: str) -> M:
    """`model_cls.model_validate(data)`, with errors as `<source>: <dotted.key>: <problem>; ...`."""
    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        problems = [f"{source}: {_describe(model_cls, err)}" for err in exc.errors()]
        message = "; ".join(problems[:_MAX_PROBLEMS])
        if len(problems) > _MAX_PROBLEMS:
            message += f"; (+{len(problems) - _MAX_PROBLEMS} more)"
        raise ConfigError(message) from None


def _parse_value(item: str, raw: str) -> Any:
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {item!r}: {_yaml_problem(exc)}") from None
    if isinstance(value, str) and _BARE_EXPONENT.fullmatch(value):
        return float(value)
    return value


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}invalid YAML: {_one_line(problem)}"


def _describe(model_cls: type[BaseModel], err: dict[str, Any]) -> str:
    """One problem as `dotted.key: what is wrong`, in the words a config author would use."""
    loc = err.get("loc", ())
    key = _dotted(loc)
    kind = err.get("type")
    if kind == "extra_forbidden":
        problem = "unknown key" + _suggestion(model_cls, loc)
    elif kind == "missing":
        problem = "required key is missing"
    else:
        problem = _one_line(err.get("msg", "invalid value"))
        value = err.get("input")
        if isinstance(value, (str, int, float, bool)) or value is None:
            problem += f" (got {_one_line(repr(value))[:80]})"
    return f"{key}: {problem}" if key else problem


def _dotted(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _suggestion(model_cls: type[BaseModel], loc: tuple) -> str:
    """` (did you mean 'x'?)` when a field of the enclosing model is spelled alike."""
    model: type[BaseModel] | None = model_cls
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if model else None
        model = _model_in(field.annotation) if field else None
    if model is None or not loc:
        return ""
    names = list(model.model_fields) + [f.alias for f in model.model_fields.values() if f.alias]
    close = difflib.get_close_matches(str(loc[-1]), names, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation such as `Sub`, `Sub | None` or `list[Sub]`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())
