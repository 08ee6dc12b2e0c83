"""The config reference (docs/config.md): Markdown rendered from the settings models themselves.

Every settings model is declared with `use_attribute_docstrings=True`, so each field's docstring is its
`description`. `render` walks the run config, the sweep file and the tune file from their root models through
their fields' annotations, one section per nested model (at each dotted path where it occurs, with the defaults
it has there), each a table of key, type, default and description. Nothing here lists the models by hand: a new
field or model appears once its annotation names it.

`python -m harness.config.reference` writes docs/config.md; `--check` exits 1 when the file differs.
"""

from __future__ import annotations

import argparse
import inspect
import sys
import textwrap
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from harness.config.plan import MAX_JOBS, MAX_JOBS_CEILING, MAX_SEEDS_CEILING, SweepFile
from harness.config.run_config import RunConfig
from harness.config.tune import MAX_GRID_POINTS, TuneFile
from harness.config.yaml_io import MAX_DEPTH, MAX_FILE_BYTES, MAX_NODES, MAX_TEXT

DEFAULT_OUT = Path("docs/config.md")
FILES: tuple[tuple[str, type[BaseModel]], ...] = (
    ("Run config: `harness run CONFIG`, and a sweep's or tune file's `base`", RunConfig),
    ("Sweep file: `harness sweep FILE`", SweepFile),
    ("Tune file: `harness tune FILE`", TuneFile),
)
"""The files a user writes, each with the model its top level validates into."""
_SIZES = textwrap.fill(
    "Sizes, checked before anything runs (by counting, never by building what they count): a file has at most "
    f"{MAX_FILE_BYTES >> 20} MiB, and at most {MAX_DEPTH} levels, {MAX_NODES:,} values and {MAX_TEXT >> 20} MiB of "
    f"text once YAML aliases are expanded; a sweep has at most {MAX_JOBS:,} jobs (`--max-jobs` raises that, up to "
    f"{MAX_JOBS_CEILING:,}) and {MAX_SEEDS_CEILING:,} seeds per arm (`--seeds`, `--until-decided --max-seeds`); a "
    f"grid-sampled tune space has at most {MAX_GRID_POINTS:,} points.",
    120,
    break_on_hyphens=False,
)
_HEADER = f"""# Config reference

Every key of the files harness reads, generated from the settings models' field docstrings by
`python -m harness.config.reference` (do not edit by hand: `python -m harness.config.reference --check` fails, and so
does `tests/test_docs.py`, when this page and the models differ). A key is the dotted path from the file's top level
(`--set key=value` takes the same path); `[]` is any item of a list, `<key>` any key of a mapping. The default is the
value where the key is left out (`required`: it must be given); `f()` is computed when the config is read. A section
is written once for each place its model occurs, with the defaults it has there.

{_SIZES}
"""


@dataclass(frozen=True)
class _Section:
    """One model at one dotted path, with the instance whose values are its defaults there (if any)."""

    path: str
    model: type[BaseModel]
    defaults: BaseModel | None


def render() -> str:
    """The whole reference as Markdown."""
    parts = [_HEADER]
    for title, root in FILES:
        parts.append(f"## {title}\n")
        parts.extend(_section_text(s) for s in _sections(_Section("", root, None)))
    return "\n".join(parts)


def _sections(section: _Section) -> Iterator[_Section]:
    """`section`, then the sections of the models its fields hold, depth first in field order."""
    yield section
    for name, field in section.model.model_fields.items():
        path = _join(section.path, field.alias or name)
        default = getattr(section.defaults, name) if section.defaults is not None else field.default
        for model, suffix in _models(field.annotation):
            inner = default if isinstance(default, model) else None
            yield from _sections(_Section(path + suffix, model, inner))


def _models(annotation: Any, suffix: str = "") -> Iterator[tuple[type[BaseModel], str]]:
    """The models an annotation holds, each with the path suffix of where (`[]` a list item, `.<key>` a mapping's)."""
    origin = get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation, suffix
    elif origin is Annotated:
        yield from _models(get_args(annotation)[0], suffix)
    elif origin in (Union, types.UnionType):
        for arg in get_args(annotation):
            yield from _models(arg, suffix)
    elif origin in (list, tuple, set, frozenset):
        for arg in get_args(annotation):
            yield from _models(arg, suffix + "[]")
    elif origin is dict:
        yield from _models(get_args(annotation)[1], suffix + ".<key>")


def _section_text(section: _Section) -> str:
    model = section.model
    title = f"`{section.path}`: {model.__name__}" if section.path else f"{model.__name__} (top level)"
    lines = [f"### {title}\n", _prose(_doc(model)), "", "| key | type | default | description |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        key = _join(section.path, field.alias or name)
        described = field.description or _first_doc_line(field.annotation)
        cells = [f"`{key}`", f"`{_field_type(field)}`", _default(section, name, field), _prose(described)]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _doc(obj: Any) -> str:
    return inspect.cleandoc(obj.__doc__ or "")


def _first_doc_line(annotation: Any) -> str:
    """A field without a docstring of its own: the first line of its model's docstring."""
    for model, _ in _models(annotation):
        return _doc(model).split("\n\n")[0]
    return ""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _prose(text: str) -> str:
    """`text` with `<` outside code spans escaped, so that `eval/<benchmark>/` is not read as an HTML tag."""
    parts = text.split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;") for i, p in enumerate(parts))


def _field_type(field: FieldInfo) -> str:
    return _with_bounds(_type(field.annotation), field.metadata)


def _type(annotation: Any) -> str:
    """An annotation as the YAML a user writes: `null` for None, a Literal's values, models by name."""
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation is type(None):
        return "null"
    if annotation is Any:
        return "any"
    if origin is Annotated:
        bounds = [m for arg in args[1:] for m in (arg.metadata if isinstance(arg, FieldInfo) else [arg])]
        return _with_bounds(_type(args[0]), bounds, nested=True)
    if origin is Literal:
        return " | ".join(_value(a) for a in args)
    if origin in (Union, types.UnionType):
        rendered = [_type(a) for a in args if a is not type(None)]
        return " | ".join(rendered + (["null"] if type(None) in args else []))
    if origin is not None:
        inner = ", ".join("..." if a is Ellipsis else _type(a) for a in args)
        return f"{origin.__name__}[{inner}]"
    return getattr(annotation, "__name__", str(annotation))


_BOUNDS = ((at.Ge, "ge", "≥ "), (at.Gt, "gt", "> "), (at.Le, "le", "≤ "), (at.Lt, "lt", "< "))


def _with_bounds(text: str, metadata: list[Any], nested: bool = False) -> str:
    """`text` with the numeric bounds and length limits among `metadata` (other metadata says nothing to a user),
    in parentheses where `text` is not one word or stands inside another type."""
    bounds = [
        f"{sign}{_number(getattr(m, attr))}" for m in metadata for kind, attr, sign in _BOUNDS if isinstance(m, kind)
    ]
    bounds += [f"length ≥ {m.min_length}" for m in metadata if isinstance(m, at.MinLen)]
    bounds += [f"length ≤ {m.max_length}" for m in metadata if isinstance(m, at.MaxLen)]
    if not bounds:
        return text
    plain = not nested and " " not in text and not bounds[-1].startswith("length")
    return f"{text} {', '.join(bounds)}" if plain else f"{text} ({', '.join(bounds)})"


def _number(bound: Any) -> str:
    """A bound as written: 2^63 rather than its 19 digits."""
    if isinstance(bound, int) and bound > 2**32 and bound & (bound - 1) == 0:
        return f"2^{bound.bit_length() - 1}"
    return _value(bound)


def _default(section: _Section, name: str, field: FieldInfo) -> str:
    if section.defaults is not None:
        return f"`{_value(getattr(section.defaults, name))}`"
    if field.default_factory is not None:
        return f"`{field.default_factory.__name__}()`"
    if field.default is PydanticUndefined:
        return "required"
    return f"`{_value(field.default)}`"


def _value(value: Any) -> str:
    """A default as YAML reads it; a model as its name and the fields where it differs from the class's defaults."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, BaseModel):
        changed = [
            f"{name}={_value(getattr(value, name))}"
            for name, field in type(value).model_fields.items()
            if field.default_factory is None and getattr(value, name) != field.default
        ]
        return f"{type(value).__name__}({', '.join(changed)})"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def main(argv: list[str] | None = None) -> int:
    """Write the reference, or with `--check` exit 1 when the file differs from it."""
    parser = argparse.ArgumentParser(prog="python -m harness.config.reference", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the file (default {DEFAULT_OUT})")
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is not what the models give")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.is_file() else None
        if current != text:
            print(f"{args.out} is stale: run python -m harness.config.reference", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
