"""A sweep whose every job failed, on the real store `harness sweep FILE --timeout 3` leaves (conftest.failed_sweep):
the report in every format, `harness claims` and every dashboard page say that no run finished, list each failed run
with its reason, and compute no statistics; a bug in a command that only reads the store shows as a bug."""

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from harness.cli import main
from tests.test_dashboard_app import APP, PAGES
from tests.test_report import compile_latex, needs_pdflatex

NO_RUN = "No run of this sweep has finished"
REASON = "timeout after 3 s"  # conftest.FAILED_SWEEP_TIMEOUT_S
TOY_RUN = Path(__file__).resolve().parents[1] / "ablations" / "toy_run.yaml"


@pytest.mark.parametrize("by", ["file", "name"])
def test_the_report_in_every_format_lists_the_failures_and_no_statistics(failed_sweep, tmp_path, capsys, by):
    path, uri = failed_sweep
    out = tmp_path / "report"
    assert main(["report", str(path) if by == "file" else "all_failed", "--tracking-uri", uri, "--out", str(out)]) == 0
    stdout, err = capsys.readouterr()
    assert "Traceback" not in err and "failed:" not in err, err
    assert NO_RUN in stdout and stdout.count(REASON) == 2, stdout

    md = (out / "report.md").read_text()
    assert NO_RUN in md and "its 2 claims (longer_incorrect, arm_vs_arm) cannot be judged" in md
    assert "- jobs: 2 planned: 0 finished, 2 failed, 0 never started" in md
    assert md.count(REASON) == 2 and md.count("- failed: aggregation=") == 2
    for section in ("## Claims", "## Power", "## Main effects", "## train/", "vs baseline", "nan"):
        assert section not in md, section

    page = (out / "report.html").read_text()
    assert NO_RUN in page and page.count(REASON) == 2
    assert "<h2>Main effects" not in page and "<h2>train/" not in page and "plotly" not in page.lower()

    report = json.loads((out / "report.json").read_text())
    h = report["header"]
    assert (h["jobs"], h["planned"], h["finished"], h["failed"], h["never_started"]) == (2, 2, 0, 2, 0)
    assert [f["reason"] for f in h["failures"]] == [REASON, REASON]
    assert {f["arm"] for f in h["failures"]} == {"aggregation=seq_mean_token_mean", "aggregation=constant"}
    assert report["verdicts"] == [] and report["settings"]["metrics"] == []
    assert all(report[k] == [] for k in ("per_arm", "comparisons", "main_effects", "interactions"))

    tex = (out / "report.tex").read_text()
    assert "no run finished (0 of 2 jobs)" in tex and tex.count(REASON) == 2 and r"\begin{tabular}" in tex
    assert not (out / "figures").exists()


@needs_pdflatex
def test_the_latex_of_a_sweep_with_no_finished_run_compiles(failed_sweep, tmp_path):
    path, uri = failed_sweep
    assert main(["report", str(path), "--tracking-uri", uri, "--out", str(tmp_path), "--format", "latex"]) == 0
    assert compile_latex(tmp_path) > 10_000


@pytest.mark.parametrize("by", ["file", "name"])
def test_claims_say_that_none_can_be_judged_and_why(failed_sweep, capsys, by):
    path, uri = failed_sweep
    assert main(["claims", str(path) if by == "file" else "all_failed", "--tracking-uri", uri]) == 0
    out, err = capsys.readouterr()
    assert (
        "all_failed: no run of this sweep has finished (0 of 2 jobs finished: 2 failed, 0 running, 0 never started), "
        "so none of its 2 claims can be judged"
    ) in out
    assert out.count(f"): {REASON}") == 2 and out.count("  failed: aggregation=") == 2
    assert "nan" not in out and "Traceback" not in err and "failed:" not in err, (out, err)


def test_every_dashboard_page_says_no_run_finished(failed_sweep, monkeypatch):
    from dashboard.launch import URI_ENV

    monkeypatch.setenv(URI_ENV, failed_sweep[1])
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    counts = {m.label: m.value for m in at.metric}
    assert counts == {"planned": "2", "done": "0", "running": "0", "stalled": "0", "failed": "2", "never started": "0"}
    assert sum(e.value.endswith(REASON) for e in at.error) == 2, [e.value for e in at.error]
    for page in ["sweeps", *PAGES]:
        at.switch_page(f"views/{page}.py").run()
        assert not at.exception, (page, [e.value for e in at.exception])
        assert any(w.value.startswith(NO_RUN) for w in at.warning), (page, [w.value for w in at.warning])
        assert not any("bug" in e.value for e in at.error), page


def test_a_bug_in_report_or_claims_is_shown_as_a_bug_not_as_a_failed_run(failed_sweep, monkeypatch, capsys, tmp_path):
    import harness.analysis.claims
    import report.build
    from harness.runs.sweep_data import Jobs, SweepData

    def bug(*args, **kwargs):
        raise TypeError("an index of nothing")

    path, uri = failed_sweep
    monkeypatch.setattr(report.build, "build", bug)
    monkeypatch.setattr(harness.analysis.claims, "judge", bug)
    finished = Jobs(total=2, finished=2, running=0, pruned=0, failed=0, missing=0)
    monkeypatch.setattr(SweepData, "jobs", property(lambda self: finished))  # so that claims reach `judge`
    for args in (
        ["report", str(path), "--tracking-uri", uri, "--out", str(tmp_path / "report")],
        ["claims", str(path), "--tracking-uri", uri],
    ):
        assert main(args) == 1
        err = capsys.readouterr().err
        assert "Traceback (most recent call last)" in err and "TypeError: an index of nothing" in err, err
        assert err.strip().splitlines()[-1].startswith(f"harness {args[0]}: internal error (a bug in harness")
        assert "run failed" not in err


def test_a_run_that_fails_still_says_run_failed(monkeypatch, capsys, tmp_path):
    import harness.engine.training

    def fail(*args, **kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(harness.engine.training, "run_training", fail)
    assert main(["run", str(TOY_RUN), "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"]) == 1
    assert capsys.readouterr().err.strip() == "harness: run failed: RuntimeError: out of memory"
