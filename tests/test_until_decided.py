"""`harness sweep --until-decided` end to end on the toy: rounds, the decision, and a kill -9 between rounds.

A two-arm sweep (GRPO vs Dr. GRPO, 3 steps) with one claim, `--max-seeds 6 --batch 2` from 2 seeds: looks at 2,
4 and 6 seeds per arm. With 2 seeds per arm the first look cannot decide (the O'Brien–Fleming boundary at a
third of the information needs |z| > 5 on about one degree of freedom), so there is always a second round
to kill the sweep before.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from harness.cli import main
from harness.config.plan import plan_sweep
from harness.engine.resume import job_runs
from harness.runs.layout import SEQUENTIAL_ARTIFACT, SEQUENTIAL_TAG

pytestmark = pytest.mark.slow  # sweeps run as subprocesses

ROOT = Path(__file__).resolve().parents[1]
TOY_RUN = ROOT / "ablations" / "toy_run.yaml"
EXPERIMENT = "seq"
CLAIM = """claims:
  - id: reward
    paper: "2503.20783"
    statement: Dr. GRPO's objective changes the training reward.
    metric: train/reward_mean
    at: last-2
    contrast: {arm: "preset=dr_grpo", vs: "preset=grpo"}
    direction: increase
    min_effect: 0.05
    planning_sd: 0.1
"""


@pytest.fixture(scope="module")
def sweep_file(tmp_path_factory, tiny_run_overrides) -> Path:
    from harness.config.run_config import load_run_config
    from trainer.models.toy import ensure_toy_model

    cfg = load_run_config(TOY_RUN, tiny_run_overrides)
    ensure_toy_model(cfg.model.toy, cfg.model.cache_dir)
    overrides = dict(item.split("=", 1) for item in tiny_run_overrides)
    lines = [
        "name: seq_toy",
        f"experiment: {EXPERIMENT}",
        f"base: {TOY_RUN}",
        "set:",
        *[f"  {k}: {v}" for k, v in overrides.items()],
        "grid:",
        "  objective.preset: [grpo, dr_grpo]",
        "seeds: [0, 1]",
    ]
    path = tmp_path_factory.mktemp("seq") / "seq_toy.yaml"
    path.write_text("\n".join(lines) + "\n" + CLAIM)
    return path


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "harness.cli", "sweep", *args]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _record(uri: str) -> dict | None:
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(EXPERIMENT)
    if exp is None:
        return None
    parents = client.search_runs([exp.experiment_id], f"tags.{SEQUENTIAL_TAG} = '1'")
    if not parents:
        return None
    path = client.download_artifacts(parents[0].info.run_id, SEQUENTIAL_ARTIFACT)
    return json.loads(Path(path).read_text())


def test_until_decided_runs_rounds_decides_and_resumes_after_a_kill_between_rounds(sweep_file, tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = [str(sweep_file), "--until-decided", "--max-seeds", "6", "--batch", "2", "--workers", "2"]
    log = tmp_path / "first.log"
    first = subprocess.Popen(
        _cli(*args, "--tracking-uri", uri), cwd=ROOT, env=_env(), start_new_session=True,
        stdout=log.open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 600
    killed_after = None
    while first.poll() is None and time.monotonic() < deadline:
        if " done," not in log.read_text():  # no job finished yet: the sweep may still be creating the store, and
            time.sleep(0.2)  # a second process migrating a fresh SQLite store at once breaks the migration
            continue
        try:
            killed_after = _record(uri)
        except Exception:  # noqa: BLE001 - the store racing the sweep's writes: not there yet
            killed_after = None
        if killed_after:
            os.killpg(first.pid, signal.SIGKILL)  # round 1 judged: the sweep is between rounds
            break
        time.sleep(0.2)
    first.wait(30)
    assert killed_after is not None, f"round 1 never recorded:\n{log.read_text()[-3000:]}"
    assert [r["look"] for r in killed_after["rounds"]] == [1]
    assert killed_after["claims"][0]["stop"] == "", "2 seeds per arm cannot decide the claim"

    rerun = subprocess.run(
        _cli(*args, "--tracking-uri", uri), cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=900
    )
    print(rerun.stdout[-4000:], rerun.stderr[-4000:])
    assert rerun.returncode in (0, 1), rerun.stderr[-3000:]
    final = _record(uri)
    rounds = final["rounds"]
    track = final["claims"][0]
    assert rounds[0] == killed_after["rounds"][0]  # the replayed look 1 is the look the killed sweep made
    assert track["looks"][0] == killed_after["claims"][0]["looks"][0]
    assert [r["seeds"]["preset=grpo"] for r in rounds] == [2, 4, 6][: len(rounds)]
    assert len(rounds) >= 2 and track["stop"] in ("efficacy", "small effect", "budget")
    assert track["stop"] != "budget" or len(rounds) == 3
    assert f"reward: {track['verdict']} ({track['stop']}, look {track['stopped_at']})" in rerun.stdout
    assert "round 1" in rerun.stderr and f"round {len(rounds)}" in rerun.stderr
    assert rerun.returncode == (1 if track["verdict"] == "contradicted" else 0)
    assert "claims (α" not in rerun.stdout  # its sequential verdicts are its answer: no fixed-design table
    assert rerun.stdout.splitlines()[-1].startswith("figures: harness dashboard --tracking-uri")

    # every job of the rounds run has exactly one FINISHED run: nothing trained twice, nothing lost
    plan = plan_sweep(sweep_file, seeds=[0, 1, 2, 3, 4, 5])
    wanted = {j.job_id for j in plan.jobs if j.seed < rounds[-1]["seeds"][j.arm]}
    statuses = job_runs(uri, EXPERIMENT, plan.sweep_id)
    assert {j for j, s in statuses.items() if "FINISHED" in s} == wanted
    assert all(statuses[j].count("FINISHED") == 1 for j in wanted)

    # the rest in this process (no interpreter start each): harness claims, harness report, a third invocation
    assert main(["claims", str(sweep_file), "--tracking-uri", uri]) == rerun.returncode
    out = capsys.readouterr().out
    assert "claims decided sequentially" in out and "each claim's path" in out
    kept = tmp_path / "evidence.json"  # the record and the runs' values as a file: the same paths, with no store
    assert main(["evidence", str(sweep_file), "--tracking-uri", uri, "--out", str(kept)]) == 0
    capsys.readouterr()
    assert main(["claims", str(kept)]) == rerun.returncode
    judged = out[out.index("seq_toy: claims decided sequentially") :]  # what `harness claims` printed above
    assert capsys.readouterr().out == judged
    folder = tmp_path / "report"
    args_report = ["report", str(sweep_file), "--tracking-uri", uri, "--format", "md,json", "--out", str(folder)]
    assert main(args_report) == 0
    md = next(folder.glob("*.md")).read_text()
    assert md.index("## Claims, decided sequentially") < md.index("## Claims\n")
    assert "O'Brien–Fleming" in md and "Maurer & Bretz 2013" in md
    assert json.loads(next(folder.glob("*.json")).read_text())["sequential"]["claims"] == final["claims"]

    capsys.readouterr()
    assert main(["sweep", *args, "--tracking-uri", uri]) == rerun.returncode
    err = capsys.readouterr().err
    assert _record(uri)["claims"] == final["claims"]  # a third invocation replays the same design, trains nothing
    assert all(f"all {n} jobs are done" in err for n in {2 * r["seeds"]["preset=grpo"] for r in rounds})
    assert "running" not in err


def test_dry_run_plans_expected_and_maximum_seeds(sweep_file, tmp_path):
    uri = f"sqlite:///{tmp_path / 'none.db'}"
    out = subprocess.run(
        _cli(str(sweep_file), "--dry-run", "--until-decided", "--max-seeds", "6", "--tracking-uri", uri),
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "looks at 2, 4, 6 seeds per arm" in out.stdout
    assert "planning_sd 0.1 (no runs yet)" in out.stdout
    row = next(line for line in out.stdout.splitlines() if line.startswith("│ reward"))
    assert "│ 6 " in row


@pytest.mark.parametrize(
    "extra, text, message",
    [
        (["--until-decided"], "", "claims: --until-decided decides claims, and the file declares none"),
        (["--until-decided", "--max-seeds", "1"], CLAIM, "seeds: --max-seeds 1 is below the file's 2 seeds"),
        (["--batch", "2"], CLAIM, "--max-seeds, --batch and --alpha need --until-decided"),
        (["--until-decided", "--no-claims"], CLAIM, "--no-claims: an --until-decided sweep's answer is its claims"),
    ],
    ids=["no claims", "max below the file's seeds", "batch without until-decided", "no-claims until decided"],
)
def test_bad_sequential_settings_are_one_line_errors_before_any_job(tmp_path, extra, text, message):
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\nbase: {TOY_RUN}\ngrid:\n  objective.preset: [grpo, dr_grpo]\nseeds: [0, 1]\n{text}")
    out = subprocess.run(
        _cli(str(path), *extra, "--tracking-uri", f"sqlite:///{tmp_path / 'x.db'}"),
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and str(path) in lines[0]
    assert not (tmp_path / "x.db").exists()
