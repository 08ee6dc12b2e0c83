"""`harness sweep` from the command line: dry run, bad files, a real run and its resume."""

from pathlib import Path

from mlflow.tracking import MlflowClient

from harness.cli import main

ABLATIONS = Path(__file__).resolve().parents[1] / "ablations"


def _smoke(tmp_path, tiny_run_overrides) -> Path:
    (tmp_path / "toy_run.yaml").write_text((ABLATIONS / "toy_run.yaml").read_text())
    values = {**dict(item.split("=", 1) for item in tiny_run_overrides), "train.steps": "2"}  # a key once
    sets = "\n".join(f"  {key}: {value}" for key, value in values.items())
    path = tmp_path / "smoke.yaml"
    path.write_text(
        f"name: smoke\nbase: toy_run.yaml\nset:\n{sets}\ngrid:\n  objective.preset: [grpo, dr_grpo]\nseeds: [0, 1]\n"
    )
    return path


def test_dry_run_lists_jobs_and_creates_nothing(tmp_path, capsys):
    db = tmp_path / "mlflow.db"
    assert main(["sweep", str(ABLATIONS / "dr_grpo_bias.yaml"), "--dry-run", "--tracking-uri", f"sqlite:///{db}"]) == 0
    out = capsys.readouterr().out
    assert "20 jobs" in out and out.count("group_mean") >= 10 and "aggregation" in out
    assert not db.exists()


def test_bad_sweep_file_is_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nbase: nowhere.yaml\nseeds: [0]\n")
    assert main(["sweep", str(bad), "--tracking-uri", f"sqlite:///{tmp_path}/m.db"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(bad) in err and "base: no run config" in err
    assert not (tmp_path / "m.db").exists()


def test_sweep_runs_then_resumes_without_training(tmp_path, capsys, tiny_run_overrides):
    path, uri = _smoke(tmp_path, tiny_run_overrides), f"sqlite:///{tmp_path}/mlflow.db"
    assert main(["sweep", str(path), "--workers", "2", "--tracking-uri", uri]) == 0
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("smoke").experiment_id])
    children = [r for r in runs if "job_id" in r.data.tags]
    assert len(children) == 4 and {r.info.status for r in children} == {"FINISHED"}
    parent = {r.info.run_id for r in runs if r.data.tags.get("sweep_parent") == "1"}
    assert len(parent) == 1 and {r.data.tags["mlflow.parentRunId"] for r in children} == parent
    capsys.readouterr()
    assert main(["sweep", str(path), "--tracking-uri", uri]) == 0
    assert "all 4 jobs are done" in capsys.readouterr().err
    assert len(client.search_runs([client.get_experiment_by_name("smoke").experiment_id])) == len(runs)


def test_failing_job_makes_exit_code_1(tmp_path, capsys, tiny_run_overrides):
    path, uri = _smoke(tmp_path, tiny_run_overrides), f"sqlite:///{tmp_path}/mlflow.db"
    # dr_grpo jobs fail at run time (no vLLM here; the sweep cannot know before); grpo jobs must still finish
    text = path.read_text().replace(
        "grid:\n  objective.preset: [grpo, dr_grpo]",
        "zip:\n  - objective.preset: [grpo, dr_grpo]\n    rollout.backend: [transformers, vllm]",
    )
    path.write_text(text)
    assert main(["sweep", str(path), "--workers", "2", "--tracking-uri", uri]) == 1
    err = capsys.readouterr().err
    assert err.count("FAILED") >= 2 and "vllm" in err
    client = MlflowClient(uri)
    runs = [
        r for r in client.search_runs([client.get_experiment_by_name("smoke").experiment_id]) if "job_id" in r.data.tags
    ]
    assert sorted(r.info.status for r in runs) == ["FAILED", "FAILED", "FINISHED", "FINISHED"]


def test_ray_executor_gives_the_local_result(tmp_path, capsys, tiny_run_overrides):
    """`--executor ray` on a local Ray instance: same jobs FINISHED, same metrics, same layout."""
    import pytest

    pytest.importorskip("ray", reason="the ray extra is not installed")
    path = _smoke(tmp_path, tiny_run_overrides)
    path.write_text(path.read_text().replace("seeds: [0, 1]", "seeds: [0]"))  # one job per arm is enough here
    results = {}
    for executor in ("local", "ray"):
        uri = f"sqlite:///{tmp_path}/{executor}.db"
        assert main(["sweep", str(path), "--executor", executor, "--workers", "2", "--tracking-uri", uri]) == 0
        client = MlflowClient(uri)
        runs = client.search_runs([client.get_experiment_by_name("smoke").experiment_id])
        children = {r.data.tags["job_id"]: r for r in runs if "job_id" in r.data.tags}
        assert len(runs) == 3 and {r.info.status for r in children.values()} == {"FINISHED"}
        results[executor] = {
            job: {
                k: [m.value for m in sorted(client.get_metric_history(r.info.run_id, k), key=lambda m: m.step)]
                for k in ("policy/loss", "train/accuracy", "train/length_mean", "policy/entropy")
            }
            for job, r in children.items()
        }
    assert results["ray"] == results["local"]
