"""The take-off distribution per arm, read from each finished run's tag (a fake sweep in a real store)."""

import math

from fake_sweep import FakeRun, write_sweep
from mlflow.tracking import MlflowClient

from harness.analysis.takeoff import takeoff_by_arm
from harness.runs.layout import LENGTH_TAKEOFF_TAG
from harness.runs.reader import find_sweep, reader_for
from harness.runs.sweep_data import read_sweep


def test_takeoff_steps_per_arm_with_never_and_unrecorded_runs(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    curve = {"train/reward_mean": [0.1, 0.2, 0.3]}
    runs = [FakeRun("grpo", s, values=curve) for s in (0, 1, 2, 3)] + [
        FakeRun("dr_grpo", s, values=curve) for s in (0, 1)
    ]
    runs.append(FakeRun("dr_grpo", 2, status="FAILED", values=curve))
    ids = write_sweep(uri, runs)
    client = MlflowClient(uri)
    for index, tag in {"0": "140", "1": "never", "2": "96", "4": "never", "6": "20"}.items():
        client.set_tag(ids[index], LENGTH_TAKEOFF_TAG, tag)  # run 3 (grpo seed 3) predates the tag
    found = {a.arm: a for a in takeoff_by_arm(read_sweep(reader_for(uri), find_sweep(uri, "f1")))}
    grpo, dr = found["grpo"], found["dr_grpo"]
    assert (grpo.runs, grpo.steps, grpo.never, grpo.unrecorded) == (4, (140, 96), 1, 1)
    assert grpo.quartiles == (96.0, 140.0, 140.0)  # of 96, 140, never: positions 0.5, 1, 1.5, taken lower
    assert (dr.runs, dr.steps, dr.never, dr.unrecorded) == (2, (), 1, 1)  # the FAILED run is not counted
    assert dr.quartiles == (math.inf, math.inf, math.inf)


def test_the_report_shows_the_takeoff_per_arm_in_every_format(tmp_path):
    import json

    from report.build import build
    from report.render import to_html, to_json, to_markdown

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    curve = {"train/reward_mean": [0.1, 0.2, 0.3], "train/length_incorrect_mean": [40.0, 50.0, 60.0]}
    ids = write_sweep(uri, [FakeRun("grpo", s, values=curve) for s in (0, 1, 2)])
    for index, tag in {"0": "140", "1": "never", "2": "96"}.items():
        MlflowClient(uri).set_tag(ids[index], LENGTH_TAKEOFF_TAG, tag)
    report = build(read_sweep(reader_for(uri), find_sweep(uri, "f1")))
    markdown = to_markdown(report)
    assert (
        "## Length take-off" in markdown
        and r"| grpo | 3 | 2 of 3 | 140 \[96, 140\] | 140, 96; never in 1 |" in markdown
    )
    assert "Length take-off" in to_html(report)
    (arm,) = json.loads(to_json(report))["takeoff"]
    assert arm["steps"] == [140, 96] and arm["never"] == 1 and arm["quartiles"] == [96, 140, 140]
