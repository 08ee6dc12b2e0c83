"""Text from a config is data: a claim whose words hold Rich markup, HTML, Markdown and LaTeX is valid, is judged,
and every output shows those words as written (the terminal, Markdown, HTML, LaTeX) without crashing. Texts that a
terminal would act on (control characters) and over-long texts are refused at load: tests/test_bad_inputs.py."""

from __future__ import annotations

import re

import pytest
from fake_sweep import FakeRun, write_sweep

from harness.analysis.verdict_table import md
from harness.cli import main
from tests.test_report import compile_latex, needs_pdflatex

M = "train/length_incorrect_mean"
NAME = "*hostile* [b]"
"""The sweep's name, in Markdown and Rich markup."""
ARM = "[bold]A $^$"
"""An arm's name in Rich markup (a name holds no '/', so no closing tag) and matplotlib's mathtext."""
QUESTION = "Does [/] [link=file:///etc/passwd]x[/link] hold?"
STATEMENT = "[bold red]A[/] <script>alert(1)</script> is **up**"
WHERE = r"Fig. [2] \textbf{x} & 5% $y$ # _ ^ ~ {z}"
QUOTE = r"[/] <b>bold</b> \begin{x} `c` [a](javascript:alert(1)) :smile:"
CLAIMS = [
    {
        "id": "[b]up",  # a row of the LaTeX table that starts with [ would be read as \\'s optional argument
        "statement": STATEMENT,
        "question": QUESTION,
        "paper": "2503.14476",
        "quote": QUOTE,
        "where": WHERE,
        "metric": M,
        "contrast": {"arm": ARM, "vs": "B"},
        "direction": "increase",
    },
    {
        "id": "down",
        "statement": "C is above B [/]",
        "question": QUESTION,
        "paper": "2509.26114",
        "metric": M,
        "contrast": {"arm": "C", "vs": "B"},
        "direction": "increase",
    },
]
"""Two papers' claims on one question (so `harness claims` prints the question as a row of its own)."""


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    uri = f"sqlite:///{tmp_path_factory.mktemp('hostile') / 'm.db'}"
    level = {ARM: 10.0, "B": 5.0, "C": 0.0}
    runs = [FakeRun(arm, s, values={M: [level[arm] + 0.3 * s] * 2}) for arm in level for s in range(3)]
    spec = {"name": NAME, "seeds": [0, 1, 2], "claims": CLAIMS}
    write_sweep(uri, runs, name=NAME, sweep_id="hostile", experiment="hostile", spec=spec)
    return uri


def test_harness_claims_prints_markup_in_a_claim_as_written(store, capsys):
    assert main(["claims", NAME, "--tracking-uri", store]) == 1  # `down` is contradicted
    out, err = capsys.readouterr()
    assert "internal error" not in err and "Traceback" not in err and "\x1b" not in out, err
    assert QUESTION in out and STATEMENT in out  # the question's own row, and the statement of the competing table
    assert f"arXiv 2503.14476 ({WHERE}): “{QUOTE}”" in out
    assert f"{ARM} vs B" in out and "[b]up" in out and f"{NAME}: claims (α = 0.05, Holm across 2)" in out


def test_every_report_format_shows_the_claims_words_as_written(store, tmp_path):
    out = tmp_path / "report"
    assert main(["report", NAME, "--tracking-uri", store, "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert text.startswith(r"# Report: \*hostile\* \[b\]")
    assert "<script>" not in text and "<b>" not in text and "[a](javascript" not in text and "[/]" not in text
    assert r"\[bold red\]A\[/\] \<script\>alert(1)\</script\> is \*\*up\*\*" in text
    assert r"\[link=file:///etc/passwd\]x\[/link\]" in text and r"\\textbf{x} \& 5% \$y\$ \# \_ ^ \~ {z}" in text
    html = (out / "report.html").read_text()
    assert "<script>alert" not in html and "<b>bold" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "[link=file:///etc/passwd]x[/link]" in html
    tex = (out / "report.tex").read_text()
    assert r"{[}b{]}up" in tex and r"\textbackslash{}textbf\{x\} \& 5\% \$y\$ \# \_ \^{} \textasciitilde{} \{z\}" in tex
    assert r"{[}bold{]}A \$\^{}\$ vs B" in tex
    assert not re.search(r"\\\\\s*\[", tex)  # no row starts with [ after the previous row's \\


@needs_pdflatex
def test_the_latex_of_claims_with_latex_in_their_words_compiles(store, tmp_path):
    assert main(["report", NAME, "--tracking-uri", store, "--out", str(tmp_path), "--format", "latex"]) == 0
    assert compile_latex(tmp_path) > 10_000


@pytest.mark.slow  # drives the Streamlit app (AppTest)
def test_the_dashboard_shows_the_claims_words_as_written(store, monkeypatch):
    from test_dashboard_app import PAGES, _app, _visit

    at = _app(store, monkeypatch)
    assert [h.value for h in at.header] == [md(NAME)]
    _visit(at, "length_bias")
    assert md(QUESTION) in [c.value for c in at.caption]
    (box,) = [b.value for b in at.success]
    assert md(STATEMENT) in box and md(QUOTE) in box and md(WHERE) in box and "`[b]up`" in box
    assert "Runs used for \\[b\\]up (6)" in [e.label for e in at.expander]
    for page in PAGES:  # each page draws the arms' curves, named in markup, and raises nothing
        _visit(at, page)
