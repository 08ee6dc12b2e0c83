"""Readable arm labels for the pages: the arm's name, else the preset it equals (GRPO, Dr. GRPO, DAPO, GSPO),
else the label as planned; the raw settings go on hover. Display only: the arm key in the data, the run tags and
the claims keep the planned label (harness.config.plan._label).

Which labels are names. `harness.config.plan` labels an arm by its sweep-file name (`arms:`), followed by
`key=value` for each grid or zipped axis; an arm with no name is labelled by its `key=value` parts alone (or
`base`, when nothing varies). So a label is a named arm's when it is one of the sweep file's arm names or starts
with one and a space. Without the sweep file (a sweep run before it was logged) the rule falls back to the form:
a label is a name unless every space-separated part of it is `key=value`, or it is `base` / `all runs` (the
labels of an arm with no name). An arm name that itself holds '=' is only told apart with the sweep file.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from harness.config.claims import canonical
from harness.runs.sweep_data import SweepData
from trainer.objective.settings import PRESETS, preset_fields

PRESET_NAMES = {"grpo": "GRPO", "dr_grpo": "Dr. GRPO", "dapo": "DAPO", "gspo": "GSPO"}
"""Each preset's display name (trainer/objective/settings.py PRESETS)."""
UNNAMED = ("base", "all runs")
"""Labels harness.config.plan and harness.runs.sweep_data give an arm with no name and no varying setting."""


def is_named(label: str, names: Collection[str] | None = None) -> bool:
    """Whether `label` is a named arm's (see the module docstring): `names` are the sweep file's arm names,
    None when the sweep file is not at hand."""
    if names is not None:
        return any(label == n or label.startswith(f"{n} ") for n in names)
    return label not in UNNAMED and not all("=" in part[1:] for part in label.split())


def preset_of(settings: Mapping[str, Any]) -> str | None:
    """The preset (grpo, dr_grpo, dapo, gspo) whose objective equals the run's `objective.*` params (dotted, as
    logged), each preset resolved with the run's own `objective.max_len` as the run config resolves it (dapo's
    overlong_cache_len derives from it); None when none does or a field is missing."""
    max_len = settings.get("objective.max_len")
    try:
        max_len = None if max_len is None or canonical(max_len) == "None" else int(float(str(max_len)))
    except ValueError:
        return None
    for name in PRESETS:
        fields = preset_fields(name, {"max_len": max_len})
        if all(
            f"objective.{k}" in settings and canonical(settings[f"objective.{k}"]) == canonical(v)
            for k, v in fields.items()
        ):
            return name
    return None


def display_label(arm: str, settings: Mapping[str, Any], names: Collection[str] | None = None) -> str:
    """The arm's label for display: unchanged for a named arm; else the display name of the preset its objective
    settings equal (`settings`: its first run's dotted params); else unchanged. See `arm_labels` for duplicates."""
    if is_named(arm, names):
        return arm
    preset = preset_of(settings)
    return PRESET_NAMES[preset] if preset else arm


@dataclass
class ArmLabels:
    """Arm (the planned label, the data's key) → what the pages show and what its hover text says."""

    name: dict[str, str] = field(default_factory=dict)
    """Display label of each arm."""
    detail: dict[str, str] = field(default_factory=dict)
    """The raw settings of each arm, for hover: each varying setting as dotted key=value, after the arm's name for
    a named arm (lines joined by '<br>', as Plotly hover text takes them); the planned label when nothing varies."""

    def __call__(self, arm: str) -> str:
        return self.name.get(arm, arm)

    def hover(self, arm: str) -> str:
        return self.detail.get(arm, arm)

    def plain(self, arm: str) -> str:
        """The hover text on one line, for tables."""
        return self.hover(arm).replace("<br>", "; ")


def first_settings(data: SweepData) -> dict[str, dict[str, Any]]:
    """Each arm → the params (dotted, as logged) of its first run."""
    first = data.runs.drop_duplicates("arm").set_index("arm")["run_id"]
    return {
        arm: (data.params.loc[rid].dropna().to_dict() if rid in data.params.index else {}) for arm, rid in first.items()
    }


def arm_labels(data: SweepData, names: Collection[str] | None = None) -> ArmLabels:
    """Display labels of the sweep's arms (`display_label`); arms that would share one keep their planned
    labels, all of them, as does an arm whose display label is another arm's planned label."""
    settings = first_settings(data)
    shown = {arm: display_label(arm, settings.get(arm, {}), names) for arm in data.arms}
    count = Counter(shown.values())
    shown = {arm: s if s == arm or (count[s] == 1 and s not in shown) else arm for arm, s in shown.items()}
    detail = {}
    for arm in data.arms:  # a named arm's name, then every varying setting (in full: the label shortens keys)
        lines = [f"{k}={settings.get(arm, {}).get(k, '?')}" for k in data.varying]
        detail[arm] = "<br>".join([arm, *lines] if is_named(arm, names) or not lines else lines)
    return ArmLabels(shown, detail)


def arm_names(sweep_file: Mapping[str, Any] | None) -> list[str] | None:
    """The arm names of a sweep file (parsed YAML), [] when it names none; None without a sweep file."""
    if not isinstance(sweep_file, Mapping):
        return None
    arms = sweep_file.get("arms") or []
    return (
        [str(a["name"]) for a in arms if isinstance(a, Mapping) and a.get("name") is not None]
        if isinstance(arms, list)
        else []
    )


def with_settings(table: pd.DataFrame, labels: ArmLabels, column: str = "arm") -> pd.DataFrame:
    """A table's arm column shown by display label, and a `settings` column beside it with the raw settings when
    some arm's display label differs from its planned one."""
    arms = table[column]
    out = table.assign(**{column: arms.map(labels)})
    if any(labels(a) != a for a in arms):
        out.insert(out.columns.get_loc(column) + 1, "settings", arms.map(labels.plain))
    return out
