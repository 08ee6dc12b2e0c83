"""`harness run` end to end on the toy task, against a real SQLite MLflow store."""

from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from mlflow.tracking import MlflowClient

from harness.cli import main
from harness.config.run_config import load_run_config
from harness.engine.training import run_training
from harness.runs.layout import BASE_MODEL_SHA256_TAG, CPU_CAPABILITY_TAG, TORCH_THREADS_TAG, run_name
from trainer import metric_names as M
from trainer.models.fingerprint import weights_sha256
from trainer.models.toy import ensure_toy_model

TOY_RUN = Path(__file__).resolve().parents[1] / "ablations" / "toy_run.yaml"
NOT_DETERMINISTIC = (M.GENERATE_S, M.DECODE_STEP_S, M.UPDATE_S, M.STEP_S, M.TOKENS_PER_S)


def _run(tmp_path, overrides, *extra):
    cfg = load_run_config(TOY_RUN, [*overrides, f"tracking.results_dir={tmp_path}", *extra])
    result = run_training(cfg, progress=False)
    client = MlflowClient(result.tracking_uri)
    return cfg, client, client.get_run(result.run_id)


def _histories(client, run):
    return {
        key: [(m.step, m.value) for m in sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)]
        for key in run.data.metrics
        if key not in NOT_DETERMINISTIC
    }


def test_run_logs_everything(tmp_path, tiny_run_overrides):
    cfg, client, run = _run(tmp_path, tiny_run_overrides)
    assert run.info.status == "FINISHED" and run.data.tags["status"] == "FINISHED"
    for tag in ("sweep_id", "arm", "config_hash", "seed", "git_commit"):
        assert tag in run.data.tags
    assert run.data.tags["config_hash"] == cfg.config_hash and run.data.tags["seed"] == "0"
    # where it computed: threads as train.threads set them, the toy build's weights by sha256
    toy = ensure_toy_model(cfg.model.toy.for_run(cfg.seed), cfg.model.cache_dir)
    assert run.data.tags[TORCH_THREADS_TAG] == "1" and run.data.tags[BASE_MODEL_SHA256_TAG] == weights_sha256(toy)
    assert run.data.tags[CPU_CAPABILITY_TAG] == torch.backends.cpu.get_cpu_capability()
    # every training metric of trainer/metric_names.py at every step (length splits only when defined)
    for key in M.TRAINING:
        steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
        if key in (M.LENGTH_CORRECT_MEAN, M.LENGTH_INCORRECT_MEAN):
            assert set(steps) <= {1, 2, 3}
        else:
            assert sorted(steps) == [1, 2, 3], key
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "rollouts.parquet"} <= artifacts
    logged = yaml.safe_load(Path(client.download_artifacts(run.info.run_id, "config.yaml", str(tmp_path))).read_text())
    assert logged["objective"]["aggregation"] == "seq_mean_token_mean" and logged["objective"]["max_len"] == 48
    rows = pd.read_parquet(client.download_artifacts(run.info.run_id, "rollouts.parquet", str(tmp_path)))
    assert len(rows) == 3 * 4 * 4
    assert {"step", "prompt_id", "sample_index", "reward", "correct", "length", "truncated", "advantage"} <= set(rows)
    # the table agrees with the logged means
    acc = {m.step: m.value for m in client.get_metric_history(run.info.run_id, M.ACCURACY)}
    assert rows.groupby("step")["correct"].mean().to_dict() == pytest.approx(acc)
    seen = {m.step: m.value for m in client.get_metric_history(run.info.run_id, M.TOKENS_GENERATED)}
    assert rows.groupby("step")["length"].sum().cumsum().to_dict() == pytest.approx(seen)
    assert run.data.params["objective.clip_high"] == "0.2"
    assert run.info.run_name == "toy_run-s0"  # no arm: `<name>-s<seed>`


def test_same_seed_same_metrics_and_presets_differ(tmp_path, tiny_run_overrides):
    _, client, a = _run(tmp_path / "a", tiny_run_overrides)
    _, _, b = _run(tmp_path / "b", tiny_run_overrides)
    assert _histories(client, a) == _histories(MlflowClient(f"sqlite:///{tmp_path / 'b' / 'mlflow.db'}"), b)
    _, client_c, c = _run(tmp_path / "c", tiny_run_overrides, "objective.preset=dr_grpo")
    ha, hc = _histories(client, a), _histories(client_c, c)
    assert ha[M.LOSS] != hc[M.LOSS]
    assert c.data.params["objective.aggregation"] == "constant" and c.data.tags["preset"] == "dr_grpo"


def test_diverging_run_ends_failed_with_reason(tmp_path, tiny_run_overrides, monkeypatch):
    import trainer.loop

    calls = {"n": 0}
    real = trainer.loop.policy_loss

    def nan_on_second_step(*args, **kwargs):  # a loss that turns NaN, as a diverging run's does
        out = real(*args, **kwargs)
        calls["n"] += 1
        if calls["n"] > 1:
            out.loss = out.loss * float("nan")
        return out

    monkeypatch.setattr(trainer.loop, "policy_loss", nan_on_second_step)
    one_loss_per_step = "train.length_buckets=1"
    cfg = load_run_config(TOY_RUN, [*tiny_run_overrides, f"tracking.results_dir={tmp_path}", one_loss_per_step])
    with pytest.raises(trainer.loop.TrainingDiverged, match="diverged at step 2: loss is nan"):
        run_training(cfg, progress=False)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("toy").experiment_id])
    assert run.info.status == "FAILED" and run.data.tags["status"] == "FAILED"
    reason = f"TrainingDiverged: diverged at step 2: loss is nan (lr {cfg.train.lr:g})"
    assert cfg.train.lr == 2e-4 and run.data.tags["failure_reason"].startswith(reason), run.data.tags["failure_reason"]
    assert [m.step for m in client.get_metric_history(run.info.run_id, M.LOSS)] == [1]  # step 1 kept
    assert "rollouts.parquet" in {a.path for a in client.list_artifacts(run.info.run_id)}


def test_huge_lr_fails_the_run_as_diverged(tmp_path, tiny_run_overrides):
    """lr 1e38 is finite (validation accepts it) but overflows the first optimiser step; the run fails
    saying so, not with torch's "value cannot be converted to type float without overflow"."""
    cfg = load_run_config(TOY_RUN, [*tiny_run_overrides, f"tracking.results_dir={tmp_path}", "train.lr=1e38"])
    with pytest.raises(Exception, match="diverged at step 1"):
        run_training(cfg, progress=False)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("toy").experiment_id])
    assert run.info.status == "FAILED"
    assert run.data.tags["failure_reason"].startswith("TrainingDiverged: diverged at step 1: ")
    assert "lr 1e+38" in run.data.tags["failure_reason"]


@pytest.mark.parametrize(
    "content, overrides, needle",
    [
        ("objective: {preset: grpo}\ntrian: {steps: 3}\n", [], "trian: unknown key"),
        ("objective: {preset: grpo}\ntrain: {steps: three}\n", [], "train.steps"),
        ("objective: {preset: grpo, clip_high: -0.28}\n", [], "objective.clip_high"),
        ("objective: {preset: grpo}\n", ["rollout.group_size=1"], "rollout.group_size"),
        ("objective: {preset: reinforce}\n", [], "unknown preset 'reinforce'"),
        ("objective: {preset: grpo}\nmodel: {source: hf, name_or_path: ./no/such/model}\n", [], "no model directory"),
        ("objective: {preset: dapo, max_len: 64, overlong_cache_len: 65}\n", [], "must not exceed max_len (64)"),
        ("objective: [grpo\n", [], "invalid YAML"),
        (None, [], "file not found"),
    ],
)
def test_bad_config_is_one_line_and_logs_nothing(tmp_path, capsys, content, overrides, needle):
    path = tmp_path / "bad.yaml"
    if content is not None:
        path.write_text(content)
    results = tmp_path / "results"
    args = ["run", str(path), "--set", f"tracking.results_dir={results}"]
    for item in overrides:
        args += ["--set", item]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and needle in err and str(path) in err
    assert not results.exists()  # nothing was created, let alone logged


def test_cli_help(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--help"])
    assert exit_.value.code == 0 and "--set" in capsys.readouterr().out


def test_run_name_is_the_arm_and_seed_one_clean_line_within_mlflows_limit():
    cfg = load_run_config(TOY_RUN, ["seed=3"])
    assert run_name(cfg) == "toy_run-s3"
    assert run_name(cfg, "aggregation=constant advantage=group_mean") == "aggregation=constant advantage=group_mean-s3"
    assert run_name(cfg, "dr_grpo\n lr=1e-06\x00\t") == "dr_grpo lr=1e-06-s3"  # control characters: one line
    assert run_name(cfg, " \n") == "toy_run-s3"
    long = run_name(cfg, "lr=0.001 " * 100)  # MLflow keeps 250 characters of a run name
    assert len(long) == 250 and long.startswith("lr=0.001 lr=") and long.endswith("...-s3")
    assert run_name(load_run_config(TOY_RUN, ["tracking.run_name=mine"]), "arm") == "mine"  # the user's name wins
