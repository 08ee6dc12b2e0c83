"""harness.config.yaml_io: every error is one line naming the file and key; overrides parse YAML types."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, Field

from harness.config.errors import ConfigError
from harness.config.yaml_io import apply_overrides, load_yaml, validate


class Objective(BaseModel):
    model_config = ConfigDict(extra="forbid")
    clip_low: float = Field(0.2, gt=0)
    clip_high: float = Field(0.28, gt=0)


class Trainer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lr: float = 1e-6
    steps: int = 100


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    objective: Objective = Objective()
    trainer: Trainer | None = None


def _one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_load_yaml_reads_mapping(tmp_path):
    path = tmp_path / "a.yaml"
    path.write_text("name: x\ntrainer:\n  lr: 1.0e-5\n")
    assert load_yaml(path) == {"name": "x", "trainer": {"lr": 1e-5}}


def test_load_yaml_empty_file_is_empty_mapping(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert load_yaml(path) == {}


def test_load_yaml_missing_file(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as exc:
        load_yaml(path)
    assert _one_line(exc) == f"{path}: file not found"


def test_load_yaml_unreadable(tmp_path):
    with pytest.raises(ConfigError) as exc:
        load_yaml(tmp_path)  # a directory
    assert _one_line(exc).startswith(f"{tmp_path}: cannot read")


def test_load_yaml_syntax_error_names_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\ntrainer:\n  lr: [1, 2\n  steps: 3\n")
    with pytest.raises(ConfigError) as exc:
        load_yaml(path)
    message = _one_line(exc)
    assert message.startswith(f"{path}: line ")
    assert "invalid YAML" in message


def test_load_yaml_rejects_non_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(ConfigError) as exc:
        load_yaml(path)
    assert _one_line(exc) == f"{path}: top level must be a mapping of keys, got list"


def test_load_yaml_does_not_construct_python_objects(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text("x: !!python/object/apply:os.system ['echo hi']\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_yaml(path)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("3", 3),
        ("1e-4", 1e-4),
        ("-2.5E+3", -2500.0),
        ("0.5", 0.5),
        ("true", True),
        ("[1,2]", [1, 2]),
        ("null", None),
        ("grpo", "grpo"),
        ("'3'", "3"),
        ("{a: 1}", {"a": 1}),
    ],
)
def test_override_value_types(raw, expected):
    result = apply_overrides({}, [f"x={raw}"])
    assert result == {"x": expected}
    assert type(result["x"]) is type(expected)


def test_nested_overrides_create_and_replace_without_mutating_input():
    data = {"trainer": {"lr": 1e-6, "steps": 10}, "name": "a"}
    result = apply_overrides(data, ["trainer.lr=3e-6", "objective.clip_high=0.28", "a.b.c=1", "name=b"])
    assert result == {
        "trainer": {"lr": 3e-6, "steps": 10},
        "objective": {"clip_high": 0.28},
        "a": {"b": {"c": 1}},
        "name": "b",
    }
    assert data == {"trainer": {"lr": 1e-6, "steps": 10}, "name": "a"}


def test_later_override_wins_and_value_may_contain_equals():
    assert apply_overrides({}, ["k=1", "k=2"]) == {"k": 2}
    assert apply_overrides({}, ["k=a=b"]) == {"k": "a=b"}


@pytest.mark.parametrize("item", ["trainer.lr", "=3", ".lr=3", "trainer..lr=3", " =1"])
def test_malformed_override_names_item(item):
    with pytest.raises(ConfigError) as exc:
        apply_overrides({}, [item])
    assert repr(item) in _one_line(exc)


def test_override_below_scalar_is_an_error():
    with pytest.raises(ConfigError) as exc:
        apply_overrides({"trainer": {"lr": 1e-6}}, ["trainer.lr.x=1"])
    assert "trainer.lr is 1e-06, not a mapping" in _one_line(exc)


def test_override_with_bad_yaml_value():
    with pytest.raises(ConfigError) as exc:
        apply_overrides({}, ["k=[1, 2"])
    assert "'k=[1, 2'" in _one_line(exc)


def test_validate_returns_model():
    cfg = validate(RunConfig, {"name": "a", "trainer": {"lr": "1e-4"}}, "x.yaml")
    assert cfg.trainer.lr == 1e-4


def test_validate_constraint_error():
    with pytest.raises(ConfigError) as exc:
        validate(RunConfig, {"name": "a", "objective": {"clip_high": -0.1}}, "ablations/x.yaml")
    assert _one_line(exc) == "ablations/x.yaml: objective.clip_high: Input should be greater than 0 (got -0.1)"


def test_validate_unknown_key_suggests_spelling():
    with pytest.raises(ConfigError) as exc:
        validate(RunConfig, {"name": "a", "trainer": {"lrr": 1}}, "ablations/x.yaml")
    assert _one_line(exc) == "ablations/x.yaml: trainer.lrr: unknown key (did you mean 'lr'?)"


def test_validate_missing_key():
    with pytest.raises(ConfigError) as exc:
        validate(RunConfig, {}, "x.yaml")
    assert _one_line(exc) == "x.yaml: name: required key is missing"


def test_validate_several_problems_on_one_line():
    data = {"objective": {"clip_low": 0, "clip_high": 0}, "zzz": 1, "trainer": {"steps": "many"}}
    with pytest.raises(ConfigError) as exc:
        validate(RunConfig, data, "x.yaml")
    message = _one_line(exc)
    problems = message.split("; ")
    assert len(problems) == 5
    assert all(p.startswith("x.yaml: ") for p in problems)
    assert "x.yaml: zzz: unknown key" in problems
    assert "x.yaml: name: required key is missing" in problems


def test_validate_caps_the_number_of_problems():
    class Many(BaseModel):
        model_config = ConfigDict(extra="forbid")

    with pytest.raises(ConfigError) as exc:
        validate(Many, {f"k{i}": i for i in range(8)}, "m.yaml")
    message = _one_line(exc)
    assert message.count("unknown key") == 5
    assert message.endswith("; (+3 more)")


def test_load_override_validate_pipeline(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("name: base\ntrainer:\n  lr: 1.0e-6\n")
    data = apply_overrides(load_yaml(path), ["trainer.steps=5", "objective.clip_high=0.3"])
    cfg = validate(RunConfig, data, str(path))
    assert (cfg.trainer.steps, cfg.trainer.lr, cfg.objective.clip_high) == (5, 1e-6, 0.3)


def test_toy_cache_defaults_to_the_users_cache_shared_by_checkouts(tmp_path, monkeypatch):
    from harness.config.run_config import load_run_config

    toy_run = Path(__file__).resolve().parents[1] / "ablations" / "toy_run.yaml"
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "mine"))
    assert load_run_config(toy_run).model.cache_dir == str(tmp_path / "mine")
    monkeypatch.delenv("HARNESS_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert load_run_config(toy_run).model.cache_dir == str(tmp_path / "xdg" / "harness")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert load_run_config(toy_run).model.cache_dir == str(tmp_path / "home" / ".cache" / "harness")
    assert load_run_config(toy_run, ["model.cache_dir=here"]).model.cache_dir == "here"  # a config's own wins


@pytest.fixture(params=["libyaml", "python"])
def parse(request, monkeypatch):
    """yaml_io's parser with libyaml's events, and with PyYAML's pure-Python ones (a PyYAML built without libyaml)."""
    import importlib

    import yaml

    from harness.config import yaml_io

    if request.param == "python":
        monkeypatch.setattr(yaml, "__with_libyaml__", False)
        importlib.reload(yaml_io)
    assert yaml_io._Events is (yaml.cyaml.CParser if request.param == "libyaml" else yaml_io._PyEvents)
    yield yaml_io._parse
    monkeypatch.undo()
    importlib.reload(yaml_io)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # 4 MiB is 1024 copies of 4096 bytes
        ("a: &s " + "x" * 4096 + "\nb: [" + ",".join(["*s"] * 1025) + "]\n", "b: holds more than 4 MiB of text"),
        # bytes, not characters: 2048 'é' are 4096 bytes
        ("a: &s " + "é" * 2048 + "\nb: [" + ",".join(["*s"] * 1025) + "]\n", "b: holds more than 4 MiB of text"),
        ("a: {k: &s " + "x" * 4096 + "}\n" + "".join(f"c{i}: *s\n" for i in range(1024)), "top level: holds more"),
        # an alias at level 27 (top level 1, b 2, in 25 lists) to a node 7 levels high: 33 levels once expanded
        ("a: &d [[[[[[1]]]]]]\nb: " + "[" * 25 + "*d" + "]" * 25 + "\n", "b" + "[0]" * 25 + ": nested deeper than 32"),
        ("a: " + "[" * 50_000 + "]" * 50_000 + "\n", "f.yaml: a: line 1: nested deeper than 32 levels"),
        # past the 1000 levels at which PyYAML 6.0.4's libyaml refuses a document itself: harness's words all the same
        ("x: 1\ntrain:\n  lr: " + "[" * 1100 + "]" * 1100 + "\n", "f.yaml: train.lr: line 3: nested deeper than 32"),
        ("b:\n" + "".join("  " * i + "- \n" for i in range(1, 1100)), "f.yaml: b: line 33: nested deeper than 32"),
        ("a: &r [*r]\n", "a[0]: a YAML alias refers to itself"),
        ("a: 1\na: 2\n", "a: line 2: duplicate key"),
        ("a: " + "9" * 5000 + "\n", "line 1, column 4: invalid YAML: Exceeds the limit (4300 digits)"),
    ],
    ids=["string aliased", "bytes not characters", "mapping values", "depth through an alias", "nesting",
         "flow nesting past libyaml's limit", "block nesting", "cycle",
         "duplicate key", "int of 5000 digits"],
)  # fmt: skip
def test_documents_that_expand_past_a_limit_are_refused_before_they_are_built(parse, text, message):
    with pytest.raises(ConfigError) as exc:
        parse(text, "f.yaml")
    assert _one_line(exc).startswith("f.yaml: ") and message in str(exc.value), exc.value


def test_a_document_just_within_the_limits_is_read_with_its_aliases_shared(parse):
    data = parse("a: &s " + "x" * 4096 + "\nb: [" + ",".join(["*s"] * 1022) + "]\nc: &d [[[[[[1]]]]]]\n"
                 "e: " + "[" * 24 + "*d" + "]" * 24 + "\n", "f.yaml")  # fmt: skip
    assert len(data["b"]) == 1022 and all(s is data["a"] for s in data["b"])


def test_a_string_bomb_is_measured_without_being_expanded():
    """63 GB once expanded, in a file under 1 MiB: refused without expanding it (each node measured once). Bounded in
    this thread's CPU time, which other threads and a busy machine hardly change: parsing the 1 MB took 0.3 s on a
    2-core AMD EPYC; copying out the 63 GB would take well over the bound, were there the memory for it."""
    import time

    from harness.config.yaml_io import _parse

    text = "a: &s " + "x" * 700_000 + "\nb: [" + ",".join(["*s"] * 90_000) + "]\n"
    start = time.thread_time()
    with pytest.raises(ConfigError, match="b: holds more than 4 MiB of text"):
        _parse(text, "f.yaml")
    assert time.thread_time() - start < 2.0


def test_a_logged_sweep_file_is_read_under_the_config_bounds():
    """A store's sweep.yaml (read by `stored_claims` and the dashboard) may come from anyone: the same bounds as a
    config file, so a string aliased many times is refused as text, not expanded."""
    from harness.config.errors import ConfigError
    from harness.config.yaml_io import load_yaml_text

    assert load_yaml_text("name: s\nseeds: [0]\n", "w") == {"name": "s", "seeds": [0]}
    bomb = 'a: &a "' + "x" * 700_000 + '"\nb: [' + ", ".join(["*a"] * 10) + "]\n"
    with pytest.raises(ConfigError, match="4 MiB"):
        load_yaml_text(bomb, "sweep.yaml")
    with pytest.raises(ConfigError, match="mapping"):
        load_yaml_text("[1, 2]", "sweep.yaml")
