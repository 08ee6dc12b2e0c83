"""`harness report` on a store with known numbers: every table against numpy/scipy, all four formats, errors."""

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient
from scipy import stats as sps

from harness.analysis.values import run_values
from harness.cli import main
from harness.config.at import At
from harness.config.plan import plan_sweep
from harness.engine.sweep import _log_plan
from harness.runs.reader import reader_for, sweeps
from harness.runs.sweep_data import read_sweep
from report.build import build

ROOT = Path(__file__).resolve().parents[1]
AGG = ["seq_mean_token_mean", "constant"]
ADV = ["group_std", "group_mean"]
SEEDS = [0, 1, 2]
STEPS = 20


def truth(agg: str, adv: str, seed: int, step: int) -> float:
    """Incorrect length: +24 tokens for GRPO's normaliser, +15 for std normalisation, seed noise, a slow drift."""
    noise = [0.0, 4.0, -2.5][seed] + (1.5 if (agg, adv) == ("constant", "group_mean") and seed == 2 else 0.0)
    return 40.0 + 24.0 * (agg == "seq_mean_token_mean") + 15.0 * (adv == "group_std") + noise + 0.1 * step


@pytest.fixture(scope="module")
def sweep_file(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("report-sweep")
    (d / "sweep.yaml").write_text(
        f"name: bias_report\nbase: {ROOT / 'ablations' / 'toy_run.yaml'}\n"
        "grid:\n  objective.aggregation: [seq_mean_token_mean, constant]\n"
        "  objective.advantage: [group_std, group_mean]\n"
        "seeds: [0, 1, 2]\n"
    )
    return d / "sweep.yaml"


@pytest.fixture(scope="module")
def store(sweep_file, tmp_path_factory) -> str:
    """The sweep's 12 runs written straight to MLflow (tags as `harness sweep` sets them), one FAILED extra."""
    plan = plan_sweep(sweep_file)
    uri = f"sqlite:///{tmp_path_factory.mktemp('report-store') / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment(plan.experiment)
    parent = client.create_run(exp, run_name=plan.name, tags={"sweep_id": plan.sweep_id, "sweep_parent": "1"})
    for job in plan.jobs:
        agg, adv = job.config.objective.aggregation, job.config.objective.advantage
        run = client.create_run(
            exp,
            run_name=f"r-{job.seed}",
            tags={
                "sweep_id": plan.sweep_id,
                "arm": job.arm_id,
                "arm_label": job.arm,
                "seed": str(job.seed),
                "config_hash": job.job_id,
                "job_id": job.job_id,
                "git_commit": "abc1234",
                "mlflow.parentRunId": parent.info.run_id,
            },
        )
        metrics = [
            Metric("train/length_incorrect_mean", truth(agg, adv, job.seed, s), 0, s) for s in range(1, STEPS + 1)
        ]
        metrics += [Metric("train/accuracy", 0.5 + 0.01 * job.seed, 0, s) for s in range(1, STEPS + 1)]
        metrics += [
            Metric(f"eval/{b}/accuracy", 0.3 + 0.1 * i + 0.01 * job.seed, 0, STEPS)
            for i, b in enumerate(["math500", "aime24"])
        ]
        client.log_batch(
            run.info.run_id,
            metrics=metrics,
            params=[
                Param("seed", str(job.seed)),
                Param("objective.aggregation", agg),
                Param("objective.advantage", adv),
            ],
        )
        client.set_terminated(run.info.run_id)
    bad = client.create_run(
        exp,
        run_name="r-9",
        tags={
            "sweep_id": plan.sweep_id,
            "arm_label": plan.jobs[0].arm,
            "seed": "9",
            "failure_reason": "timeout after 5 s",
        },
    )
    client.set_terminated(bad.info.run_id, status="FAILED")
    _log_plan(client, parent.info.run_id, plan.jobs, cumulative=False)  # as `harness sweep` does
    client.set_terminated(parent.info.run_id)
    return uri


def _data(uri):
    reader = reader_for(uri)
    return read_sweep(reader, sweeps(reader.runs())[0])


def test_at_parsing_and_values(store):
    assert At.parse("last-10") == At("last", k=10) and At.parse("step 7") == At("step", n=7)
    assert At.parse("final").kind == "final" and At.parse("best").kind == "best"
    assert At.parse("first-10") == At("first", k=10)
    assert [str(At.parse(t)) for t in ("final", "last-3", "first-10", "step=7", "auc", "best")] == [
        "final",
        "last-3",
        "first-10",
        "step 7",
        "auc",
        "best",
    ]  # the text it reads back as
    data = _data(store)
    last5 = run_values(data, "train/length_incorrect_mean", At.parse("last-5"))
    row = last5[(last5["arm"] == "advantage=group_std aggregation=constant") & (last5["seed"] == 1)].iloc[0]
    assert row["value"] == pytest.approx(np.mean([truth("constant", "group_std", 1, s) for s in range(16, 21)]))
    at7 = run_values(data, "train/length_incorrect_mean", At.parse("step 7"))
    assert at7["value"].iloc[0] == pytest.approx(truth(*_agg_adv(at7["arm"].iloc[0]), at7["seed"].iloc[0], 7))
    assert len(last5) == 12  # the FAILED run has no value


def test_a_runs_value_by_hand():
    """`At.value`, the one place a curve becomes a number (report, claims, dashboard windows, tune trials)."""
    steps, ys = [0, 2, 4, 5], [1.0, float("nan"), 3.0, 5.0]  # the NaN point counts as never logged
    assert At.parse("final").value(steps, ys) == 5.0
    assert At.parse("last-2").value(steps, ys) == 4.0
    assert At.parse("last-9").value(steps, ys) == 3.0
    assert At.parse("first-2").value(steps, ys) == 2.0 and At.parse("first-9").value(steps, ys) == 3.0
    assert At.parse("best").value(steps, ys) == 5.0
    assert At.parse("best").value(steps, ys, larger_is_better=False) == 1.0
    assert At.parse("step 4").value(steps, ys) == 3.0
    assert np.isnan(At.parse("step 2").value(steps, ys)) and np.isnan(At.parse("final").value([], []))
    # trapezoids over 0..4 and 4..5: (1+3)/2*4 + (3+5)/2*1 = 12, over a span of 5
    assert At.parse("auc").value(steps, ys) == pytest.approx(12 / 5)
    assert At.parse("auc").value([3], [7.0]) == 7.0


def _agg_adv(arm: str) -> tuple[str, str]:
    kv = dict(p.split("=") for p in arm.split())
    return kv["aggregation"], kv["advantage"]


def test_tables_match_numpy_and_scipy(store):
    data = _data(store)
    r = build(data, metrics=["train/length_incorrect_mean", "train/accuracy"], at=At.parse("final"))
    base = "advantage=group_std aggregation=seq_mean_token_mean"
    assert r.settings.baseline == base == data.arms[0]
    per = r.per_arm.set_index(["metric", "arm"]).loc[("train/length_incorrect_mean", base)]
    x = np.array([truth("seq_mean_token_mean", "group_std", s, STEPS) for s in SEEDS])
    assert per["n"] == 3 and per["failed"] == 1
    assert per["mean"] == pytest.approx(x.mean()) and per["sd"] == pytest.approx(x.std(ddof=1))
    arm = "advantage=group_mean aggregation=constant"
    y = np.array([truth("constant", "group_mean", s, STEPS) for s in SEEDS])
    c = r.comparisons.set_index(["metric", "arm"]).loc[("train/length_incorrect_mean", arm)]
    assert c["diff"] == pytest.approx(y.mean() - x.mean())
    assert c["welch_p"] == pytest.approx(sps.ttest_ind(y, x, equal_var=False).pvalue)
    assert c["p"] == c["welch_p"]
    fam = r.comparisons["p"].to_numpy()  # Holm over arms × metrics: 3 arms × 2 metrics
    assert len(fam) == 6 and c["p_holm"] >= c["p"]
    # main effect of the length normaliser: −24 exactly (noise cancels except the +1.5 on one cell's seed)
    eff = r.effects.set_index(["metric", "factor", "level"]).loc[
        ("train/length_incorrect_mean", "objective.aggregation", "constant")
    ]
    assert eff["effect"] == pytest.approx(-24.0 + 1.5 / 6)
    assert eff["p"] < 0.01 and eff["welch_low"] < eff["effect"] < eff["welch_high"]
    # the factorial model removes the advantage switch's +15 from the noise: a narrower interval than Welch's
    assert (
        eff["model_effect"] == pytest.approx(eff["effect"]) and 2 <= eff["model_df"] <= 12 - 4
    )  # Satterthwaite: between one cell's df and the pooled df
    assert eff["model_high"] - eff["model_low"] < eff["welch_high"] - eff["welch_low"]
    assert eff["test_p"] == eff["model_p"] and eff["p_holm"] >= eff["test_p"]
    assert any(
        "objective.aggregation: seq_mean_token_mean → constant changes train/length_incorrect_mean by" in f
        for f in r.findings
    )
    assert len(r.interactions) == 2  # one pair of 2-level switches × 2 metrics
    assert r.header.failed == 1
    assert [(f.arm, f.seed, f.reason) for f in r.header.failures] == [(base, 9, "timeout after 5 s")]
    assert r.header.code_version == ["abc1234"] and r.header.seeds == [0, 1, 2, 9]


def test_small_n_rank_test_warning_and_stratified_benchmarks(store):
    data = _data(store)
    r = build(
        data,
        metrics=["train/length_incorrect_mean", "eval/math500/accuracy", "eval/aime24/accuracy"],
        test="mannwhitney",
    )
    assert any("can never give p < 0.05" in w and "0.1" in w for w in r.warnings), r.warnings
    assert r.comparisons["min_p"].tolist() == pytest.approx([0.1] * len(r.comparisons))
    assert np.isinf(r.comparisons["mde"]).all()
    strat = r.per_arm[r.per_arm["metric"] == "eval/mean of 2/accuracy"].set_index("arm")
    arm = data.arms[0]
    expected = np.mean([np.mean([0.3 + 0.01 * s for s in SEEDS]), np.mean([0.4 + 0.01 * s for s in SEEDS])])
    assert strat.loc[arm, "mean"] == pytest.approx(expected)
    assert strat.loc[arm, "ci_low"] <= expected <= strat.loc[arm, "ci_high"]


def test_cli_writes_every_format(store, sweep_file, tmp_path, capsys):
    out = tmp_path / "rep"
    code = main(
        [
            "report",
            str(sweep_file),
            "--tracking-uri",
            store,
            "--metric",
            "train/length_incorrect_mean",
            "--metric",
            "train/accuracy",
            "--out",
            str(out),
            "--format",
            "md,html,json,latex",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "objective.aggregation: seq_mean_token_mean → constant changes train/length_incorrect_mean" in printed
    md = (out / "report.md").read_text()
    assert "## Main effects" in md and "abc1234" in md and "timeout after 5 s" in md and "Holm" in md
    assert "3 vs 3 seeds: smallest possible two-sided p — Welch any, MWU 0.1, perm. 0.1" in md
    assert (out / "figures" / "train_length_incorrect_mean.png").stat().st_size > 10_000
    assert (out / "figures" / "train_length_incorrect_mean.svg").read_text().lstrip().startswith("<?xml")
    html = (out / "report.html").read_text()
    assert "plotly" in html and "<table" in html and "Main effects" in html
    # each curve twice: an SVG image (shown offline) and a Plotly chart from the CDN, which replaces it online
    images = re.findall(r"src='data:image/svg\+xml;base64,([^']+)'", html)
    assert len(images) == html.count("class='live'") == 2
    assert all(base64.b64decode(i).lstrip().startswith(b"<?xml") for i in images)
    assert html.count("cdn.plot.ly/plotly") == 1 and len(html) < 1_500_000  # plotly.js itself is 4.8 MB
    tex = (out / "report.tex").read_text()
    assert tex.count("\\begin{tabular}") == tex.count("\\end{tabular}") == 3  # 2 metrics + main effects
    assert "objective.aggregation" in tex and "seq\\_mean\\_token\\_mean $\\to$ constant" in tex
    assert tex.count("{") == tex.count("}")
    doc = json.loads((out / "report.json").read_text())
    assert {"header", "per_arm", "comparisons", "main_effects", "interactions"} <= set(doc)
    assert (
        main(["report", "bias_report", "--tracking-uri", store, "--out", str(tmp_path / "by-name"), "--format", "json"])
        == 0
    )


@pytest.mark.parametrize(
    "args, message, code",
    [
        (["nope_sweep"], "harness: data error: nope_sweep: no sweep named or with id 'nope_sweep'", 3),
        (["bias_report", "--at", "middle"], "--at: 'middle' is not one of", 2),
        (["bias_report", "--format", "md,pdf"], "--format: pdf is not one of", 2),
        (["bias_report", "--baseline", "zzz"], "harness: config error: --baseline: 'zzz' is not an arm", 2),
        (["bias_report", "--test", "anova"], "--test: 'anova' is not one of", 2),
    ],
)
def test_bad_input_is_one_line(store, tmp_path, capsys, args, message, code):
    """A bad flag value is a usage error (argparse's SystemExit) and a bad arm or --at a config error: exit 2; a
    sweep the store does not hold is a data error: exit 3."""
    try:
        got = main(["report", *args, "--tracking-uri", store, "--out", str(tmp_path)])
    except SystemExit as exc:
        got = exc.code
    assert got == code
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


needs_pdflatex = pytest.mark.skipif(
    shutil.which("pdflatex") is None,
    reason="needs pdflatex (Debian texlive-latex-base and texlive-latex-recommended; .ci/run installs them)",
)


def compile_latex(folder) -> int:
    """Compile `folder`/report.tex inside a paper's preamble; the PDF's size in bytes."""
    (folder / "doc.tex").write_text(
        "\\documentclass{article}\n\\usepackage[T1]{fontenc}\n"
        "\\usepackage{booktabs,graphicx}\n\\begin{document}\n\\input{report.tex}\n"
        "\\end{document}\n"
    )
    done = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    return (folder / "doc.pdf").stat().st_size


@needs_pdflatex
def test_latex_tables_compile(store, tmp_path):
    assert main(["report", "bias_report", "--tracking-uri", store, "--out", str(tmp_path), "--format", "latex"]) == 0
    assert compile_latex(tmp_path) > 10_000


# ---------------------------------------------------------------------------------------------
# What the reader counts: duplicates, retries, failures, partial sweeps
# ---------------------------------------------------------------------------------------------

from fake_sweep import T0, FakeRun, write_sweep  # noqa: E402

LEN = "train/length_incorrect_mean"


def _fake(tmp_path, runs, **kw):
    uri = f"sqlite:///{tmp_path / 'fake.db'}"
    ids = write_sweep(uri, runs, **kw)
    return uri, _data(uri), ids


def _curve(v: float) -> dict[str, list[float]]:
    return {LEN: [v] * 5}


def test_two_finished_runs_of_one_job_count_once(tmp_path):
    # a killed sweep's surviving worker set its run back to FINISHED after the rerun had trained the job again
    five = {"train.steps": "5"}
    runs = [
        FakeRun(arm, s, values=_curve(10.0 * (arm == "B") + s), start=s, params=five) for arm in "AB" for s in (0, 1, 2)
    ]
    runs.append(FakeRun("B", 0, values=_curve(99.0), start=60, params=five))  # job B-0 again, later, also complete
    uri, data, ids = _fake(tmp_path, runs)
    kept = data.runs[(data.runs["arm"] == "B") & (data.runs["seed"] == 0)].set_index("run_id")["state"]
    assert kept.to_dict() == {ids["3"]: "duplicate", ids["6"]: "done"}  # the latest complete FINISHED run counts
    (warning,) = [w for w in data.warnings if "B-0" in w]
    assert "2 FINISHED runs" in warning and ids["6"] in warning and ids["3"] in warning, warning
    r = build(data, metrics=[LEN])
    assert r.arms.set_index("arm").loc["B", "seeds"] == [0, 1, 2]
    per = r.per_arm.set_index("arm").loc["B"]
    assert per["n"] == 3 and per["mean"] == pytest.approx((99.0 + 11.0 + 12.0) / 3)
    assert any("B-0" in w for w in r.warnings)
    assert r.curves[LEN]["B"].shape[1] == 3


def test_of_two_finished_runs_the_complete_one_counts_even_when_earlier(tmp_path):
    # the battery's case: one run complete to train.steps, a later one that logged 2 of its 5 steps
    five = {"train.steps": "5"}
    runs = [
        FakeRun("A", 0, values=_curve(1.0), start=0, params=five),
        FakeRun("A", 0, values={LEN: [7.0, 7.0]}, start=60, params=five),
        FakeRun("B", 0, values={LEN: [3.0]}, start=0, params=five),  # neither of B-0's runs is complete:
        FakeRun("B", 0, values={LEN: [4.0, 4.0]}, start=1, params=five),  # the one with more steps counts
    ]
    uri, data, ids = _fake(tmp_path, runs)
    state = data.runs.set_index("run_id")["state"]
    assert (state[ids["0"]], state[ids["1"]], state[ids["2"]], state[ids["3"]]) == (
        "done",
        "duplicate",
        "duplicate",
        "done",
    )
    (a,) = [w for w in data.warnings if "A-0" in w]
    assert f"as run {ids['0']} (5 of 5 steps) (the latest complete)" in a and f"{ids['1']} (2 of 5 steps)" in a, a
    (b,) = [w for w in data.warnings if "B-0" in w]
    assert "none is complete" in b, b


def test_resumed_sweep_counts_the_finished_retry_draws_only_counted_runs_and_starts_with_the_sweep(tmp_path):
    # invocation 1 (parent started at 0) was interrupted while B-1 ran; invocation 2 (at 120) finished everything
    runs = [FakeRun("A", s, values=_curve(float(s)), start=10 + s) for s in (0, 1, 2)]
    runs += [
        FakeRun("B", 0, values=_curve(5.0), start=10),
        FakeRun("B", 1, status="FAILED", values={LEN: [50.0, 50.0]}, start=11, reason="interrupted"),
        FakeRun("B", 1, values=_curve(6.0), start=120),
        FakeRun("B", 2, values=_curve(7.0), start=121),
    ]
    uri, data, ids = _fake(tmp_path, runs, parent_start=0)
    assert data.runs.set_index("run_id").loc[ids["4"], "state"] == "retried"
    r = build(data, metrics=[LEN])
    assert r.header.failed == 0 and r.header.failures == [] and r.header.retried == 1
    assert r.arms.set_index("arm").loc["B", "failed"] == []
    assert r.per_arm.set_index("arm").loc["B", "failed"] == 0
    # the figures draw the runs the statistics use: 3 seeds of B, not the failed attempt as a fourth
    assert list(r.curves[LEN]["B"].columns) == ["seed 0", "seed 1", "seed 2"]
    assert r.curves[LEN]["B"].max().max() < 50
    from datetime import datetime, timezone

    assert r.header.started == f"{datetime.fromtimestamp(T0 / 1000, timezone.utc):%Y-%m-%d %H:%M} UTC"
    from report.render import to_markdown

    md = to_markdown(r)
    assert "1 failed attempt of a job that later finished" in md and "- failed:" not in md


def test_partial_sweep_says_how_many_jobs_never_ran_and_prints_no_nan(tmp_path):
    # 4 arms × 5 seeds planned; 8 jobs ran: A and B 3 seeds each, C one seed, D only a FAILED run
    runs = [FakeRun(a, s, values=_curve(float(s) + 10 * (a == "B"))) for a in "AB" for s in (0, 1, 2)]
    runs += [FakeRun("C", 0, values=_curve(3.0)), FakeRun("D", 0, status="FAILED", reason="boom")]
    planned = [(a, s) for a in "ABCD" for s in range(5)]
    uri, data, ids = _fake(tmp_path, runs, planned=planned)
    r = build(data, metrics=[LEN])
    assert r.header.planned == 20 and r.header.jobs - r.header.finished == 13
    text = "\n".join(r.findings)
    assert "nan" not in text.lower(), text
    assert any(f.startswith("C vs A") and "no CI or test" in f and "1 finished run" in f for f in r.findings), text
    assert any(f.startswith("D vs A") and "no comparison" in f and "0 finished runs" in f for f in r.findings), text
    assert any(f.startswith("B vs A") and "+10" in f for f in r.findings), text
    from report.render import to_markdown

    md = to_markdown(r)
    assert "- jobs: 20 planned: 7 finished, 1 failed, 12 never started" in md
    assert (
        "- failed: D · seed 0 (run " in md
        and md.count("- never started: ") == 12
        and "- never started: C · seed 4" in md
    )


def test_all_failed_sweep_writes_a_report_listing_the_failures(tmp_path, capsys):
    runs = [FakeRun(a, s, status="FAILED", reason=f"boom {a}{s}") for a in "AB" for s in (0, 1)]
    uri, data, ids = _fake(tmp_path, runs)
    out = tmp_path / "rep"
    assert main(["report", "fake", "--tracking-uri", uri, "--out", str(out), "--format", "md,html,json,latex"]) == 0
    md = (out / "report.md").read_text()
    assert "boom A0" in md and "boom B1" in md and "4 planned: 0 finished, 4 failed" in md
    assert "No run of this sweep has finished" in md and "## Power" not in md
    assert json.loads((out / "report.json").read_text())["header"]["failed"] == 4
    # an unreadable store or a crash must leave no half-written folder: render first, then write
    from report import render

    def boom(r):
        raise RuntimeError("render failed")

    out2 = tmp_path / "rep2"
    import unittest.mock

    with unittest.mock.patch.object(render, "to_json", boom), pytest.raises(RuntimeError):
        render.write(build(data), out2, ["md", "json"])
    assert not out2.exists()


def test_sweep_with_no_job_run_yet_says_so(tmp_path):
    # interrupted before its first job started (during the toy build, say): only the parent run exists
    uri, data, ids = _fake(tmp_path, [], planned=[("A", 0), ("A", 1)])
    out = tmp_path / "rep"
    assert main(["report", "fake", "--tracking-uri", uri, "--out", str(out), "--format", "md"]) == 0
    md = (out / "report.md").read_text()
    assert (
        "No run of this sweep has finished" in md and "- jobs: 2 planned: 0 finished, 0 failed, 2 never started" in md
    )
    assert "- never started: A · seed 0" in md and "- never started: A · seed 1" in md


def test_sweep_name_cannot_escape_the_reports_folder(tmp_path, monkeypatch):
    uri, data, ids = _fake(tmp_path, [FakeRun("A", 0, values=_curve(1.0))], name="../../../../ESCAPED_REPORT")
    cwd = tmp_path / "a" / "b"
    cwd.mkdir(parents=True)
    monkeypatch.chdir(cwd)
    assert main(["report", "f1", "--tracking-uri", uri, "--format", "md"]) == 0
    assert not list(tmp_path.rglob("ESCAPED_REPORT")) and not (tmp_path / "ESCAPED_REPORT").exists()
    (written,) = (cwd / "results" / "reports").iterdir()
    assert (written / "report.md").is_file() and "ESCAPED_REPORT" in written.name and ".." not in written.name
    from report.render import safe_name

    assert safe_name("a/b\\c\x00d\ne") == safe_name("a/b\\c\x00d\ne") and "/" not in safe_name("a/b")
    assert safe_name("..") not in ("", ".", "..") and safe_name("dr_grpo_bias") == "dr_grpo_bias"
    assert safe_name("a/b") != safe_name("a_b")  # two names never share a folder
    assert len(safe_name("x" * 100_000)) <= 120


def test_non_finite_value_is_refused_naming_run_and_metric(tmp_path, capsys):
    runs = [FakeRun("A", s, values=_curve(float(s))) for s in (0, 1)]
    runs += [FakeRun("B", 0, values=_curve(1.0)), FakeRun("B", 1, values={LEN: [1.0, float("inf")]})]
    uri, data, ids = _fake(tmp_path, runs)
    capsys.readouterr()
    assert main(["report", "fake", "--tracking-uri", uri, "--metric", LEN, "--out", str(tmp_path / "r")]) == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ids["3"] in err and LEN in err and "inf" in err, err
    assert err.startswith("harness: data error: metric")  # the store's runs, not the config, are the problem
    assert not (tmp_path / "r").exists()


def test_empty_cell_is_reported_with_its_reason(tmp_path):
    # 2×2 grid, the cell (x=1, y=1) never finished: no main effect, and the report says why
    runs = [
        FakeRun(f"x={x} y={y}", s, values=_curve(1.0 * x + 3.0 * y + 0.1 * s), params={"x": str(x), "y": str(y)})
        for x in (0, 1)
        for y in (0, 1)
        for s in (0, 1, 2)
        if (x, y) != (1, 1)
    ]
    uri, data, ids = _fake(tmp_path, runs)
    assert data.varying == ["x", "y"]
    r = build(data, metrics=[LEN])
    assert r.effects["test_p"].isna().all() and r.effects["p_holm"].isna().all()
    assert any("empty cells" in w and "x=1, y=1" in w for w in r.warnings), r.warnings
    assert any(f.startswith("x: 0 → 1") and "no estimate: empty cells x=1, y=1" in f for f in r.findings), r.findings


def test_latex_text_is_plain_for_t1_fonts():
    from report.render import tex

    out = tex("incorrect − correct ≥ 5 · “quoted” → ε_high")
    assert all(ord(ch) < 256 for ch in out), out
    assert r"$-$" in out and r"$\geq$" in out and "``quoted''" in out and r"$\to$" in out
    assert "{[}GREEK SMALL LETTER EPSILON{]}" in out and r"\_high" in out  # named, not left to stop the compile
