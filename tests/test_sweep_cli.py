"""`harness sweep` from the command line: dry run, bad files, a real run, its verdicts and its resume."""

import contextlib
import io
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from harness.cli import main

ABLATIONS = Path(__file__).resolve().parents[1] / "ablations"

CLAIM = """claims:
  - id: far_longer
    paper: '2503.20783'
    statement: Dr. GRPO's responses are 1000 tokens longer than GRPO's (false by construction; max 48 tokens)
    metric: train/length_mean
    at: final
    contrast: {arm: preset=dr_grpo, vs: preset=grpo}
    direction: increase
    threshold: 1000
"""
"""A claim no run can support: lengths are at most `rollout.max_new_tokens` = 48, so with 2 seeds per arm Welch's
|t| against 1000 exceeds 28 (the two-sided 5% point at the fewest degrees of freedom, 1, is 12.7): contradicted."""


def _smoke(tmp_path, tiny_run_overrides, claims: str = "") -> Path:
    (tmp_path / "toy_run.yaml").write_text((ABLATIONS / "toy_run.yaml").read_text())
    values = {**dict(item.split("=", 1) for item in tiny_run_overrides), "train.steps": "2"}  # a key once
    sets = "\n".join(f"  {key}: {value}" for key, value in values.items())
    path = tmp_path / "smoke.yaml"
    path.write_text(
        f"name: smoke\nbase: toy_run.yaml\nset:\n{sets}\ngrid:\n  objective.preset: [grpo, dr_grpo]\nseeds: [0, 1]\n"
        + claims
    )
    return path


def _main(argv: list[str]) -> tuple[int, str, str]:
    """`harness ARGV`: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def claimed_sweep(tmp_path_factory, tiny_run_overrides) -> tuple[Path, str, tuple[int, str, str]]:
    """(sweep file, tracking URI, its first `harness sweep`'s exit code, stdout, stderr): the smoke sweep with
    `CLAIM`, run to completion once (2 arms x 2 seeds, 2 steps) for the tests below, which only rerun it."""
    root = tmp_path_factory.mktemp("claimed-sweep")
    path, uri = _smoke(root, tiny_run_overrides, CLAIM), f"sqlite:///{root}/mlflow.db"
    return path, uri, _main(["sweep", str(path), "--workers", "2", "--tracking-uri", uri])


def _tail(out: str) -> str:
    """What a sweep printed after its summary line ('sweep NAME: N finished, ...')."""
    (last,) = [i for i, line in enumerate(out.splitlines()) if line.startswith("sweep smoke: ")]
    return "\n".join(out.splitlines()[last + 1 :])


def _child_runs(uri: str) -> list:
    client = MlflowClient(uri)
    return client.search_runs([client.get_experiment_by_name("smoke").experiment_id])


def test_dry_run_lists_jobs_and_creates_nothing(tmp_path, capsys):
    db = tmp_path / "mlflow.db"
    assert main(["sweep", str(ABLATIONS / "dr_grpo_bias.yaml"), "--dry-run", "--tracking-uri", f"sqlite:///{db}"]) == 0
    out = capsys.readouterr().out
    assert "20 jobs" in out and out.count("group_mean") >= 10 and "aggregation" in out
    assert "claims (α" not in out and "harness report" not in out  # the file has claims; a dry run judges none
    assert not db.exists()


def test_bad_sweep_file_is_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nbase: nowhere.yaml\nseeds: [0]\n")
    assert main(["sweep", str(bad), "--tracking-uri", f"sqlite:///{tmp_path}/m.db"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(bad) in err and "base: no run config" in err
    assert not (tmp_path / "m.db").exists()


def test_sweep_runs_then_resumes_without_training(claimed_sweep):
    path, uri, (code, out, _) = claimed_sweep
    assert code == 0, out  # its claim is contradicted: a finding, not a failed sweep
    runs = _child_runs(uri)
    children = [r for r in runs if "job_id" in r.data.tags]
    assert len(children) == 4 and {r.info.status for r in children} == {"FINISHED"}
    parent = {r.info.run_id for r in runs if r.data.tags.get("sweep_parent") == "1"}
    assert len(parent) == 1 and {r.data.tags["mlflow.parentRunId"] for r in children} == parent
    code, out, err = _main(["sweep", str(path), "--tracking-uri", uri])
    assert code == 0 and "all 4 jobs are done" in err and "sweep smoke: 0 finished, 4 already done" in out
    assert {r.info.run_id for r in _child_runs(uri)} == {r.info.run_id for r in runs}


def test_sweep_ends_with_the_verdicts_harness_claims_prints(claimed_sweep):
    path, uri, (_, out, _) = claimed_sweep
    *table, pointer = _tail(out).splitlines()
    store = f"--tracking-uri {uri}"
    assert pointer == f"figures: harness dashboard {store}; all the statistics: harness report {path} {store}"
    assert "far_longer" in "\n".join(table) and "far_longer: CONTRADICTED" in table[-1]
    code, claims_out, _ = _main(["claims", str(path), "--tracking-uri", uri])
    assert code == 1 and claims_out.splitlines() == table  # the same table; only `harness claims` exits 1


def test_a_rerun_on_the_finished_store_judges_again(claimed_sweep):
    path, uri, (_, first, _) = claimed_sweep
    before = {r.info.run_id for r in _child_runs(uri)}
    code, out, _ = _main(["sweep", str(path), "--tracking-uri", uri])
    assert code == 0 and {r.info.run_id for r in _child_runs(uri)} == before
    assert "far_longer: CONTRADICTED" in _tail(out) and _tail(out) == _tail(first)


def test_the_pointer_names_the_store_only_where_it_is_not_the_default(claimed_sweep, monkeypatch):
    path, uri, _ = claimed_sweep
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)  # what `harness dashboard` and `harness report` read by default
    code, out, _ = _main(["sweep", str(path)])
    assert (
        code == 0 and out.splitlines()[-1] == f"figures: harness dashboard; all the statistics: harness report {path}"
    )


def test_the_main_job_rerun_on_its_finished_store_prints_its_verdicts_and_trains_nothing(tmp_path, tiny_run_overrides):
    """`harness sweep ablations/dr_grpo_bias.yaml` itself (its 4 arms and 6 claims; 2 seeds of 2 tiny steps here):
    a rerun on the finished store trains nothing and ends with the same verdict table."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    argv = ["sweep", str(ABLATIONS / "dr_grpo_bias.yaml"), "--seeds", "0-1", "--tracking-uri", uri]
    argv += [x for item in [*tiny_run_overrides, "train.steps=2"] for x in ("--set", item)]
    code, first, _ = _main(argv)
    assert code == 0, first
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("dr_grpo_bias").experiment_id
    runs = {r.info.run_id for r in client.search_runs([experiment])}
    code, again, _ = _main(argv)
    assert code == 0 and {r.info.run_id for r in client.search_runs([experiment])} == runs  # nothing trained
    assert "dr_grpo_bias: claims (α = 0.05, Holm across 6)" in again
    claims = ("training_improves_accuracy", "incorrect_length", "incorrect_more_than_correct", "std_not_length")
    for claim in (*claims, "accuracy_maintained"):
        assert any(line.startswith(f"{claim}: ") for line in again.splitlines()), claim
    table = again[again.index("dr_grpo_bias: claims") :]
    assert table == first[first.index("dr_grpo_bias: claims") :]  # the same verdicts, judged on the same runs
    assert "harness report" in again.splitlines()[-1]


def test_no_claims_ends_after_the_jobs(claimed_sweep):
    path, uri, _ = claimed_sweep
    code, out, _ = _main(["sweep", str(path), "--no-claims", "--tracking-uri", uri])
    assert code == 0 and out.splitlines()[-1].startswith("sweep smoke: 0 finished, 4 already done")
    assert "far_longer" not in out and "harness report" not in out


def test_a_bug_in_judging_is_its_traceback_and_exit_1_after_the_runs(claimed_sweep, monkeypatch):
    """The runs are in the store, but a sweep whose verdicts were not shown does not end with exit 0."""
    import harness.analysis.claims

    def broken(*args, **kwargs):
        raise RuntimeError("planted bug")

    monkeypatch.setattr(harness.analysis.claims, "judge", broken)
    path, uri, _ = claimed_sweep
    code, out, err = _main(["sweep", str(path), "--tracking-uri", uri])
    assert code == 1 and "sweep smoke: 0 finished, 4 already done" in out
    assert "Traceback" in err and "harness sweep: the claims could not be judged" in err and "planted bug" in err
    assert "far_longer" not in out and _tail(out).startswith("figures: harness dashboard")


def test_markup_in_a_claim_prints_as_written_in_the_verdicts_a_sweep_ends_with(claimed_sweep):
    """Two papers' claims on one question (printed as a row of its own), their words in Rich markup: the sweep's
    verdict table shows them as written, and the sweep ends with exit 0 (a crash there would be exit 1)."""
    path, uri, _ = claimed_sweep
    question, statement = "Does [/] [link=file:///etc/passwd]x[/link] hold?", r"[bold red]Longer[/] <b>x</b> \textbf{"
    claims = "claims:\n" + "".join(
        f"  - {{id: {id_}, paper: '{paper}', question: '{question}', statement: '{statement}', "
        "metric: train/length_mean, at: final, contrast: {arm: preset=dr_grpo, vs: preset=grpo}, "
        "direction: increase}\n"
        for id_, paper in (("far_longer", "2503.20783"), ("rival", "2503.14476"))
    )
    hostile = path.with_name("hostile.yaml")  # the same sweep (name, arms, runs), other claims
    hostile.write_text(path.read_text().replace(CLAIM, claims))
    code, out, err = _main(["sweep", str(hostile), "--tracking-uri", uri])
    assert code == 0 and "Traceback" not in err, err
    assert "smoke: claims (α = 0.05, Holm across 2)" in out and question in out and statement in out


def test_failing_job_makes_exit_code_1(tmp_path, capsys, tiny_run_overrides):
    claim = CLAIM.replace(
        "{arm: preset=dr_grpo, vs: preset=grpo}", "{effect: objective.preset, from: grpo, to: dr_grpo}"
    )
    path, uri = _smoke(tmp_path, tiny_run_overrides, claim), f"sqlite:///{tmp_path}/mlflow.db"
    # dr_grpo jobs fail at run time (no vLLM here; the sweep cannot know before); grpo jobs must still finish
    text = path.read_text().replace(
        "grid:\n  objective.preset: [grpo, dr_grpo]",
        "zip:\n  - objective.preset: [grpo, dr_grpo]\n    rollout.backend: [transformers, vllm]",
    )
    path.write_text(text)
    assert main(["sweep", str(path), "--workers", "2", "--tracking-uri", uri]) == 1
    out, err = capsys.readouterr()
    assert err.count("FAILED") >= 2 and "vllm" in err
    # the claim is still judged, on what finished (only GRPO's arm: no test), and the sweep ends as before
    assert "smoke: 2 of 4 jobs finished: 2 failed" in _tail(out) and "far_longer: INCONCLUSIVE" in _tail(out)
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
