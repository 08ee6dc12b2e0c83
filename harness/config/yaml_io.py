"""Typed YAML configs: load, apply `--set` overrides, validate into any pydantic model.

Every failure becomes a `ConfigError` whose message is one line naming the file and the key,
so that a sweep of many config files points straight at the bad one.
"""

from __future__ import annotations

import copy
import difflib
import os
import re
import stat
from collections.abc import Mapping
from typing import Annotated, Any, TypeVar, get_args

import yaml
from pydantic import AfterValidator, BaseModel, Discriminator, Tag, ValidationError

from harness.config.errors import ConfigError

M = TypeVar("M", bound=BaseModel)

_MAX_PROBLEMS = 5
MAX_FILE_BYTES = 1 << 20
"""Config files are hand-written: anything larger (or not a regular file, e.g. /dev/zero) is refused unread."""
MAX_DEPTH = 32
"""Deepest nesting of mappings and sequences a config may have (a run config needs 4)."""
MAX_NODES = 100_000
"""Most values a document may hold once YAML aliases are expanded (an alias bomb of 500 bytes holds 10^8)."""
MAX_TEXT = 4 << 20
"""Most bytes of text (keys and values, UTF-8) a document may hold once YAML aliases are expanded: 4 times the
largest file. A 700 kB string aliased 90,000 times is 63 GB, which validating, logging or hashing would copy out."""
MAX_NAME = 200
"""Longest name (MLflow stores experiment names in 256 characters, and run names are built from them)."""
# PyYAML follows YAML 1.1, where `1e-4` (no dot) is a string; on the command line it means a float.
_BARE_EXPONENT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _check_name(name: str) -> str:
    if len(name) > MAX_NAME:
        raise ValueError(f"longer than {MAX_NAME} characters ({len(name)})")
    bad = [c for c in name if c in "/\\" or not c.isprintable()]
    if bad:
        raise ValueError(f"contains {bad[0]!r}: names hold no path separators, newlines or control characters")
    if name.strip(". ") == "":
        raise ValueError(f"{name!r} is not a name")
    return name


Name = Annotated[str, AfterValidator(_check_name)]
"""A sweep, experiment, arm or run name: it becomes an MLflow name and part of file names."""


class _PyEvents(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser):
    """PyYAML's pure-Python events, for a PyYAML built without libyaml (some 10 times slower)."""

    def __init__(self, stream: Any):
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)

    def fetch_flow_collection_start(self, token_class: Any) -> None:
        if self.flow_level >= MAX_DEPTH:  # here, not in compose_node: this scanner reads ahead of it
            raise _KeyedError(self._keys(), f"nested deeper than {MAX_DEPTH} levels", self.get_mark())
        super().fetch_flow_collection_start(token_class)


_LIBYAML_TOO_DEEP = "exceeded maximum nesting depth"
"""libyaml's own refusal (at 1000 levels, in the libyaml PyYAML 6.0.4 bundles): its scanner reads up to 1 KiB ahead of
the composer, so a line of `[[[[…` reaches that limit before `MAX_DEPTH` is checked. That is far deeper than
`MAX_DEPTH`, so harness refuses it in its own words, with the key the composer was reading."""
# libyaml scans and parses; PyYAML's composer, below, builds the nodes (so that nesting is checked as it goes) and
# its constructor the values. A 1 MiB file of 90,000 aliases is composed in 0.15 s so, 1.6 s in pure Python.
_Events = yaml.cyaml.CParser if yaml.__with_libyaml__ else _PyEvents


class _Loader(yaml.composer.Composer, _Events, yaml.constructor.SafeConstructor, yaml.resolver.Resolver):
    """A safe loader that refuses duplicate keys and nesting deeper than `MAX_DEPTH`."""

    def __init__(self, stream: Any):
        self._path: list[str] = []
        self.broken_at: str | None = None
        """The dotted key being read when the events broke off (libyaml's own refusals name none)."""
        _Events.__init__(self, stream)
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._path.append(index.value if isinstance(index, yaml.ScalarNode) else "")
        try:
            if len(self._path) > MAX_DEPTH:
                raise _KeyedError(self._keys(), f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        except yaml.MarkedYAMLError:
            if self.broken_at is None:
                self.broken_at = self._keys()
            raise
        finally:
            self._path.pop()

    def construct_mapping(self, node: Any, deep: bool = False) -> dict:
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True) if isinstance(key_node, yaml.ScalarNode) else None
            if key is not None and key in seen:
                raise _KeyedError(str(key), f"duplicate key (first at line {seen[key].line + 1})", key_node.start_mark)
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        try:
            return super().construct_yaml_int(node)
        except ValueError as exc:  # Python converts at most 4300 digits
            raise yaml.constructor.ConstructorError(None, None, _one_line(exc), node.start_mark) from None

    def _keys(self) -> str:
        return ".".join(str(k) for k in self._path if k)


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)


class _KeyedError(yaml.YAMLError):
    def __init__(self, key: str, problem: str, mark: Any):
        super().__init__(f"{key + ': ' if key else ''}line {mark.line + 1}: {problem}")


def load_yaml(path: str | os.PathLike) -> dict[str, Any]:
    """Read a YAML mapping safely: a regular file of at most `MAX_FILE_BYTES`, no duplicate keys,
    bounded nesting and alias expansion. An empty file is an empty mapping."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{path}: cannot read (not a regular file)")
        if info.st_size > MAX_FILE_BYTES:
            raise ConfigError(
                f"{path}: cannot read ({info.st_size} bytes, over the {MAX_FILE_BYTES >> 20} MiB "
                "limit of a config file)"
            )
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read ({_one_line(exc)})") from None
    data = _parse(text, str(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of keys, got {type(data).__name__}")
    return data


def load_yaml_text(text: str, where: str) -> dict[str, Any]:
    """`text` (a file as a store logged it, say) read as `load_yaml` reads a file, under the same bounds."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_FILE_BYTES:
        raise ConfigError(f"{where}: over the {MAX_FILE_BYTES >> 20} MiB limit of a config file")
    data = _parse(text, where)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: top level must be a mapping of keys, got {type(data).__name__}")
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


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mapping → {"dotted.key": value} (an empty mapping is a value of its own)."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, prefix=f"{name}."))
        else:
            flat[name] = value
    return flat


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


def _parse(text: str, where: str) -> Any:
    """`text` as YAML with `_Loader`; its nodes are measured (`_check_size`) before any value is constructed."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_size(node, where)
        return loader.construct_document(node)
    except _KeyedError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except yaml.YAMLError as exc:
        if _LIBYAML_TOO_DEEP in str(getattr(exc, "problem", "")):
            exc = _KeyedError(loader.broken_at or "", f"nested deeper than {MAX_DEPTH} levels", exc.problem_mark)
            raise ConfigError(f"{where}: {exc}") from None
        raise ConfigError(f"{where}: {_yaml_problem(exc)}") from None
    finally:
        loader.dispose()


def _check_size(root: yaml.Node, where: str) -> None:
    """Refuse a document whose aliases would expand it past `MAX_NODES` values, `MAX_TEXT` bytes or `MAX_DEPTH`
    levels, naming the innermost key that does. Measured on the composed nodes, each once: an alias adds the size of
    the node it names. An alias names an earlier node, so the walk has measured it already or is inside it (a
    cycle), and it recurses no deeper than the file nests."""
    sizes: dict[int, tuple[int, int, int]] = {}  # id(node) → (values, bytes, levels) once expanded
    open_: set[int] = set()

    def size(node: yaml.Node, key: str, depth: int) -> tuple[int, int, int]:
        if id(node) in open_:
            raise ConfigError(f"{where}: {key or 'top level'}: a YAML alias refers to itself")
        if id(node) not in sizes:
            if isinstance(node, yaml.ScalarNode):
                sizes[id(node)] = (1, len(node.value.encode("utf-8", "surrogatepass")), 1)
            else:
                open_.add(id(node))
                values, text, levels = 1, 0, 1
                for child_key, child in _children(node, key):
                    v, t, n = size(child, child_key, depth + 1)
                    values, text, levels = values + v, text + t, max(levels, n + 1)
                open_.discard(id(node))
                sizes[id(node)] = (values, text, levels)
        values, text, levels = sizes[id(node)]
        problem = (
            (values > MAX_NODES and f"holds more than {MAX_NODES} values")
            or (text > MAX_TEXT and f"holds more than {MAX_TEXT >> 20} MiB of text")
            or (depth + levels - 1 > MAX_DEPTH and f"nested deeper than {MAX_DEPTH} levels")
        )
        if problem:
            raise ConfigError(f"{where}: {key or 'top level'}: {problem} (YAML aliases expanded)")
        return values, text, levels

    size(root, "", 1)


def _children(node: yaml.Node, key: str) -> list[tuple[str, yaml.Node]]:
    """A collection node's children, each with its dotted key (`a.b`, `a[0]`); a mapping's keys are children too."""
    if isinstance(node, yaml.SequenceNode):
        return [(f"{key}[{i}]", child) for i, child in enumerate(node.value)]
    out = []
    for k, v in node.value:
        name = (f"{key}.{k.value}" if key else k.value) if isinstance(k, yaml.ScalarNode) else key
        out += [(key, k), (name, v)]
    return out


def _parse_value(item: str, raw: str) -> Any:
    value = _parse(raw, f"--set {item!r}")
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
    loc, holder, node, (union, chosen) = _walk(model_cls, err.get("loc", ()))
    kind = err.get("type")
    if kind == "unknown_kind" and not isinstance(err.get("input"), dict):
        problem = f"must be a mapping (got {_one_line(repr(err.get('input')))[:80]})"
    elif kind == "unknown_kind":  # a tagged union's tag names no member (see `tagged`)
        key = err["ctx"]["key"]
        loc += (key,)
        tags = ", ".join(repr(t) for t in node) if isinstance(node, dict) else "?"
        problem = f"must be one of {tags} (got {_one_line(repr(err['input'].get(key)))[:80]})"
    elif kind == "extra_forbidden":
        owners = [t for t, m in union.items() if t != chosen and loc and loc[-1] in m.model_fields]
        problem = (
            f"only the {owners[0]!r} kind has this key (this one is {chosen!r})"
            if owners and holder is union.get(chosen)
            else "unknown key" + _suggestion(holder, loc)
        )
    elif kind == "missing":
        problem = "required key is missing"
    else:
        problem = _one_line(err.get("msg", "invalid value")).removeprefix("Value error, ")
        value = err.get("input")
        if isinstance(value, (str, int, float, bool)) or value is None:
            problem += f" (got {_one_line(repr(value))[:80]})"
    key = _dotted(loc)
    return f"{key}: {problem}" if key else problem


def tagged(key: str, default: str) -> Discriminator:
    """Pick a union's member by the value of `key` (`default` when left out); a bad value is one clear line."""
    return Discriminator(
        lambda v: v.get(key, default) if isinstance(v, dict) else getattr(v, key, None),
        custom_error_type="unknown_kind",
        custom_error_message="{key} names no known kind",
        custom_error_context={"key": key},
    )


def _walk(model_cls: type[BaseModel], loc: tuple) -> tuple[tuple, type[BaseModel] | None, Any, tuple[dict, Any]]:
    """`loc` without the tags pydantic adds inside a tagged union; the model holding its last key; where it ends
    (a model, a union's {tag: model}, or None); the last union passed through and the tag taken there."""
    clean: list = []
    node: Any = model_cls
    holder: type[BaseModel] | None = model_cls
    union: tuple[dict, Any] = ({}, None)
    for part in loc:
        if isinstance(node, dict):  # the tag of the union just entered, not a key the author wrote
            union, node = (node, part), node.get(part)
            continue
        clean.append(part)
        if isinstance(part, int):
            continue
        holder = node if isinstance(node, type) else None
        field = holder.model_fields.get(part) if holder else None
        node = (_members(field.annotation) or _model_in(field.annotation)) if field else None
    return tuple(clean), holder, node, union


def _members(annotation: Any) -> dict[str, type[BaseModel]]:
    """{tag: model} of a union of `Annotated[Model, Tag(...)]` members; empty for anything else."""
    members = {}
    for arg in get_args(annotation):
        inner = get_args(arg)
        tag = next((m for m in inner[1:] if isinstance(m, Tag)), None) if inner else None
        if tag is not None and isinstance(inner[0], type) and issubclass(inner[0], BaseModel):
            members[tag.tag] = inner[0]
    return members


def _dotted(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _suggestion(model: type[BaseModel] | None, loc: tuple) -> str:
    """` (did you mean 'x'?)` when a field of the enclosing model is spelled alike."""
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
