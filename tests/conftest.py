"""Shared fixtures: one tiny toy model per test session (a short SFT; the real default is 1600 steps)."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# No test reaches a model hub: the one that probes one points HF_ENDPOINT at a closed loopback port.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# pytest started as a background job of a non-interactive shell (`pytest &` in a script, some CI runners)
# inherits an ignored SIGINT, and so would the sweeps the interrupt tests start: give it Python's own handler.
signal.signal(signal.SIGINT, signal.default_int_handler)

SLOW_FIXTURES = {"toy_cache", "tiny_run_overrides", "dashboard_store", "failed_sweep", "local_ray", "default_build"}
"""A test that uses one of these trains a toy model (or starts Ray): it is marked slow."""


LAST = (
    "tests/test_toy_model.py::test_the_default_settings_built_from_scratch_land_in_the_quality_band",
    "tests/test_bad_inputs.py::test_every_malformed_file_is_one_line_exit_2_within_the_cpu_bound_and_writes_nothing",
)
"""Tests that run after all others, in this order: the default toy build's check, so that the build (which runs
beside the suite on the CPU time the suite leaves idle) has the whole suite to finish in; then the malformed-input
battery, which runs one command per core and so runs alone, after the build."""


def pytest_collection_modifyitems(items):
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    last = {nodeid: rank for rank, nodeid in enumerate(LAST, 1)}
    items.sort(key=lambda item: last.get(item.nodeid, 0))  # stable: everything else keeps its order


_DEFAULT_BUILD = pytest.StashKey[tuple[subprocess.Popen, Path]]()


def pytest_collection_finish(session):
    """When a selected test uses `default_build`, start that build (the default toy settings from scratch: ~4 min
    of SFT on one thread) in a process of its own now, so that it runs beside the suite rather than after it, at the
    lowest CPU priority: it takes the CPU time the suite leaves idle, not time from the tests that need both cores
    (a Ray cluster's jobs, a sweep's workers). Its result does not depend on its priority (one thread, one order of
    operations)."""
    if any("default_build" in getattr(item, "fixturenames", ()) for item in session.items):
        into = Path(tempfile.mkdtemp(prefix="harness-default-toy-"))
        with open(into / "build.log", "wb") as log:
            command = [sys.executable, "-m", "trainer.models.toy", "--into", str(into)]
            build = subprocess.Popen(command, stdout=log, stderr=log, start_new_session=True, preexec_fn=_lowest)
        _lowest_autogroup(build.pid)
        session.config.stash[_DEFAULT_BUILD] = (build, into)


def _lowest() -> None:
    os.nice(19)


def _lowest_autogroup(pid: int) -> None:
    """Linux schedules each session as one group (autogroup) whatever its processes' nice values, so a nice build
    in a session of its own would still get the share of any other session: its group is made nice as well."""
    try:
        Path(f"/proc/{pid}/autogroup").write_text("19")
    except OSError:  # not Linux, or a kernel without autogroups: the process's own nice value is what counts
        pass


def pytest_sessionfinish(session):
    started = session.config.stash.get(_DEFAULT_BUILD, None)
    if started is not None:
        started[0].kill()
        started[0].wait()
        shutil.rmtree(started[1], ignore_errors=True)


@pytest.fixture
def default_build(request) -> Path:
    """The folder of a from-scratch build of the default toy settings (started at collection)."""
    process, into = request.config.stash[_DEFAULT_BUILD]
    assert process.wait(timeout=1800) == 0, (into / "build.log").read_text(errors="replace")[-3000:]
    (build,) = into.glob("toy-*")
    return build


@pytest.fixture(scope="session")
def toy_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("toy-cache")


@pytest.fixture(scope="session")
def tiny_run_overrides(toy_cache) -> list[str]:
    """--set items for a fast real run: a toy model briefly trained on 1-digit sums (~15% sampled
    accuracy, so groups are mixed and advantages non-zero) and a small batch."""
    return [
        f"model.cache_dir={toy_cache}",
        "model.toy.sft_steps=250",
        "model.toy.eval_samples=0",
        "model.toy.batch_size=32",
        "model.toy.task.max_digits=1",
        "task.toy_addition.max_digits=1",
        "rollout.prompts_per_step=4",
        "rollout.group_size=4",
        "rollout.max_new_tokens=48",
        "train.steps=3",
        "train.threads=1",
    ]


@pytest.fixture(scope="session")
def dashboard_store(tmp_path_factory, tiny_run_overrides) -> str:
    """A tracking store as a user's would look mid-sweep, for the dashboard tests: a real 2-arm × 2-seed
    sweep (GRPO vs Dr. GRPO's aggregation, 3 steps), a fifth job that diverges at its first step (lr 1e38:
    FAILED with its reason, on any machine, however fast or loaded), and a sixth run still RUNNING with two steps
    logged."""
    import time

    from fake_sweep import plan_of
    from mlflow.entities import Metric, RunTag
    from mlflow.tracking import MlflowClient

    from harness.config.job import Job
    from harness.config.run_config import load_run_config
    from harness.engine.local import LocalExecutor
    from harness.engine.sweep import run_sweep
    from harness.runs.layout import run_tags
    from trainer import metric_names as M
    from trainer.models.toy import ensure_toy_model

    uri = f"sqlite:///{tmp_path_factory.mktemp('dashboard-store') / 'mlflow.db'}"
    base = Path(__file__).resolve().parents[1] / "ablations" / "toy_run.yaml"
    overrides = [*tiny_run_overrides, "tracking.experiment=dash", "train.log_text=true"]
    arms = {
        "aggregation=seq_mean_token_mean": "objective.aggregation=seq_mean_token_mean",
        "aggregation=constant": "objective.aggregation=constant",
    }
    jobs = [
        Job(
            config=load_run_config(base, [*overrides, setting, f"seed={seed}"]),
            arm=label,
            varying={"objective.aggregation": setting.split("=")[1]},
        )
        for label, setting in arms.items()
        for seed in (0, 1)
    ]
    ensure_toy_model(jobs[0].config.model.toy, jobs[0].config.model.cache_dir)
    spec = {"name": "dash", "grid": {"objective.aggregation": ["seq_mean_token_mean", "constant"]}, "seeds": [0, 1]}
    result = run_sweep(
        plan_of("dash", "dash01", "dash", spec, jobs),
        executor=LocalExecutor(workers=2),
        tracking_uri=uri,
        console=False,
    )
    assert result.ok, result.failed
    diverging = Job(
        config=load_run_config(base, [*overrides, "seed=2", "train.lr=1e38"]),
        arm="aggregation=seq_mean_token_mean",
        varying={"objective.aggregation": "seq_mean_token_mean"},
    )
    result = run_sweep(
        plan_of("dash", "dash01", "dash", spec, [*jobs, diverging]),
        executor=LocalExecutor(workers=1, retries=0),
        tracking_uri=uri,
        console=False,
    )
    assert len(result.failed) == 1
    client = MlflowClient(uri)
    live_cfg = load_run_config(base, [*overrides, "seed=3"])
    live = client.create_run(
        client.get_experiment_by_name("dash").experiment_id,
        run_name="toy_run-s3",
        tags={**run_tags(live_cfg, "dash01"), "arm_label": "aggregation=seq_mean_token_mean", "status": "RUNNING"},
    )
    now = int(time.time() * 1000)
    partial = {
        M.ACCURACY: lambda s: 0.2 + 0.05 * s,
        M.LENGTH_CORRECT_MEAN: lambda s: 24.0 + s,
        M.ENTROPY: lambda s: 1.0 - 0.01 * s,
    }
    client.log_batch(
        live.info.run_id,
        metrics=[Metric(k, f(s), now, s) for s in (1, 2) for k, f in partial.items()],
        tags=[RunTag("sweep_id", "dash01")],
    )
    return uri


FAILED_SWEEP_TIMEOUT_S = 3
"""The failed-sweep fixture's `--timeout`: each job asks for 10^5 RL steps, which no machine trains in 3 s."""


@pytest.fixture(scope="session")
def failed_sweep(tmp_path_factory, tiny_run_overrides) -> tuple[Path, str]:
    """(sweep file, tracking URI) of a real sweep whose every job failed through `harness sweep FILE --timeout 3`:
    2 arms (GRPO's and Dr. GRPO's aggregation) × 1 seed, each job killed by the executor and left FAILED with its
    reason, none finished. The file declares two claims (a switch's main effect, and arm vs arm)."""
    from harness.cli import main

    root = tmp_path_factory.mktemp("failed-sweep")
    (root / "toy_run.yaml").write_text((Path(__file__).resolve().parents[1] / "ablations" / "toy_run.yaml").read_text())
    values = {**dict(item.split("=", 1) for item in tiny_run_overrides), "train.steps": "100000"}
    sets = "".join(f"  {key}: {value}\n" for key, value in values.items())
    claim = "    paper: '2503.20783'\n    statement: s\n    metric: train/length_incorrect_mean\n    at: last-10\n"
    path = root / "all_failed.yaml"
    path.write_text(
        f"name: all_failed\nbase: toy_run.yaml\nset:\n{sets}"
        "grid:\n  objective.aggregation: [seq_mean_token_mean, constant]\nseeds: [0]\nclaims:\n"
        f"  - id: longer_incorrect\n{claim}"
        "    contrast: {effect: objective.aggregation, from: constant, to: seq_mean_token_mean}\n"
        "    direction: increase\n    min_effect: 5\n"
        f"  - id: arm_vs_arm\n{claim}"
        "    contrast: {arm: aggregation=seq_mean_token_mean, vs: aggregation=constant}\n    direction: increase\n"
    )
    uri = f"sqlite:///{root / 'mlflow.db'}"
    code = main(["sweep", str(path), "--workers", "2", "--timeout", str(FAILED_SWEEP_TIMEOUT_S), "--tracking-uri", uri])
    assert code == 1
    return path, uri
