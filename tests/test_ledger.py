"""The ledger: every evidence file judged once per seed set, BH across all primary tests, replication and a pooled
estimate, and the documents' tables regenerated from it (and the committed ones checked against it)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from harness.analysis.stats import benjamini_hochberg
from harness.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_benjamini_hochberg_is_statsmodels():
    from statsmodels.stats.multitest import multipletests

    p = np.random.default_rng(0).uniform(size=40) ** 3
    p[[3, 7]] = np.nan
    ok = ~np.isnan(p)
    assert np.allclose(benjamini_hochberg(p)[ok], multipletests(p[ok], method="fdr_bh")[1])
    assert np.isnan(benjamini_hochberg(p)[3])


@pytest.fixture(scope="module")
def evidence(tmp_path_factory) -> Path:
    """The planted sweep's evidence on seeds 0–4 (first), the same seeds again later (a re-analysis), and seeds
    100–104 (a second seed set, its values those of the first shifted by run)."""
    from test_claims import PLANTED, _planted

    where = tmp_path_factory.mktemp("ledger")
    uri = f"sqlite:///{where}/m.db"
    _planted(uri, PLANTED)
    folder = where / "evidence"
    assert main(["evidence", "planted", "--tracking-uri", uri, "--out", str(folder / "planted.json")]) == 0
    first = json.loads((folder / "planted.json").read_text())
    again = json.loads(json.dumps(first))
    for run in again["runs"]:
        run["start_time"] += 86_400_000
    (folder / "planted-again.json").write_text(json.dumps(again))
    fresh = json.loads(json.dumps(first))
    for run in fresh["runs"]:
        run["seed"] += 100
        run["start_time"] += 2 * 86_400_000
        run["values"] = {k: v * 1.1 for k, v in run["values"].items()}
    (folder / "planted-fresh.json").write_text(json.dumps(fresh))
    return folder


def test_the_ledger_counts_each_seed_set_once_and_pools_them(evidence):
    from harness.analysis.ledger import build
    from harness.runs.evidence_file import read_evidence

    ledger = build([read_evidence(p) for p in sorted(evidence.glob("*.json"))])
    assert ledger.totals["tests"] == 8 and ledger.totals["re-analyses"] == 4  # 4 claims × 2 seed sets
    again = [e for e in ledger.entries if e.file == "planted-again.json"]
    assert not any(e.primary for e in again) and all(math.isnan(e.q) for e in again)
    primary = [e for e in ledger.entries if e.primary]
    assert [e.q for e in primary] == pytest.approx(list(benjamini_hochberg([e.verdict.p for e in primary])))
    longer = next(ln for ln in ledger.lines if ln.claim == "longer")
    assert longer.replicated == "both" and [e.file for e in longer.entries] == ["planted.json", "planted-fresh.json"]
    a, b = (e.verdict for e in longer.entries)
    w = np.array([1 / a.se**2, 1 / b.se**2])
    assert longer.effect == pytest.approx((w[0] * a.effect + w[1] * b.effect) / w.sum())
    accuracy = next(ln for ln in ledger.lines if ln.claim == "accuracy")
    assert accuracy.replicated == "neither"


@pytest.mark.parametrize(
    "records, said",
    [
        (["reproduced", "reproduced"], "both"),
        (["reproduced", "inconclusive"], "one"),
        (["inconclusive", "inconclusive"], "neither"),
        (["contradicted", "contradicted"], "both, contradicted"),
        (["inconclusive", "contradicted"], "one, contradicted"),
        (["reproduced", "contradicted"], "conflicting"),
        (["contradicted", "contradicted", "inconclusive"], "2 of 3, contradicted"),
        (["reproduced"], "one set only"),
    ],
)
def test_replicated_counts_the_sets_that_reached_the_decided_verdict_contradictions_included(records, said):
    from types import SimpleNamespace

    from harness.analysis.ledger import Line

    entries = [SimpleNamespace(of_record=r) for r in records]
    assert Line("s", "c", entries, math.nan, math.nan, math.nan).replicated == said


def test_a_fixed_look_that_an_until_decided_design_went_on_from_is_its_first_look(evidence, tmp_path):
    """Seeds 0–2 judged fixed, then taken until decided to 0–4: one test (the sequential design, flagged as
    continued after a look), the fixed table its first look's re-analysis."""
    from harness.analysis.ledger import build
    from harness.runs.evidence_file import read_evidence

    whole = json.loads((evidence / "planted.json").read_text())
    arms = sorted({r["arm"] for r in whole["runs"]})
    first = json.loads(json.dumps(whole))
    first["runs"] = [r for r in first["runs"] if r["seed"] <= 2]
    first["planned"] = [p for p in first["planned"] if p["seed"] <= 2]
    for run in whole["runs"]:
        run["start_time"] += 3_600_000
    design = {"first": 3, "batch": 2, "max_seeds": 5, "alpha": 0.05, "fixed_first": 1.0}
    rounds = [
        {"look": k, "seeds": dict.fromkeys(arms, n), "jobs": 0, "failed": 0, "open": []} for k, n in [(1, 3), (2, 5)]
    ]
    whole["sequential"] = {"procedure": "p", "design": design, "rounds": rounds, "claims": []}
    (tmp_path / "fixed.json").write_text(json.dumps(first))
    (tmp_path / "sequential.json").write_text(json.dumps(whole))
    ledger = build([read_evidence(tmp_path / n) for n in ("sequential.json", "fixed.json")])
    fixed = [e for e in ledger.entries if e.file == "fixed.json"]
    sequential = [e for e in ledger.entries if e.file == "sequential.json"]
    assert fixed and all(not e.primary and e.first_look_of == "sequential.json" for e in fixed)
    assert all(e.primary and e.continued and e.design == "sequential" for e in sequential)
    assert ledger.totals["tests"] == len(sequential) and ledger.totals["re-analyses"] == len(fixed)
    assert all(ln.entries == [e] for ln, e in zip(ledger.lines, sequential))


def test_the_documents_are_regenerated_byte_for_byte_and_checked(evidence, tmp_path, capsys):
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "README.md").write_text("# x\n\n<!-- ledger: lines planted -->\nstale\n<!-- /ledger -->\n")
    (root / "docs" / "findings.md").write_text(
        "## planted\n\n<!-- ledger: table planted -->\n<!-- /ledger -->\n\n## gone\n\n| a |\n|---|\n| 1 |\n\n"
        "*evidence not kept*: gone\n\n<!-- ledger: claim longer -->\n<!-- /ledger -->\n\n"
        "<!-- ledger: totals -->\n<!-- /ledger -->\n"
    )
    args = ["ledger", "--evidence", str(evidence), "--root", str(root)]
    assert main([*args, "--check"]) == 1
    assert "README.md differs from what the evidence gives" in capsys.readouterr().err
    assert main(args) == 0
    findings = (root / "docs" / "findings.md").read_text()
    assert "| longer | **reproduced**: +10 [+8.847, +11.15]" in findings
    assert "1 published verdict tables whose store is gone" in findings
    one_claim = findings[findings.index("<!-- ledger: claim longer -->") :]
    assert "| planted | longer | 0–4" in one_claim and "| planted | accuracy |" not in one_claim.split("<!-- /")[0]
    wanted = "| planted | longer | 0–4 (not recorded): reproduced; 100–104 (not recorded): reproduced | both |"
    assert wanted in (root / "README.md").read_text()
    assert json.loads((root / "docs" / "ledger.json").read_text())["totals"]["tests"] == 8
    written = {p: p.read_bytes() for p in [*root.rglob("*.md"), *root.rglob("*.json")]}
    assert main([*args, "--check"]) == 0
    assert main(args) == 0 and {p: p.read_bytes() for p in written} == written
    (root / "README.md").write_text("<!-- ledger: table planted sequential -->\n<!-- /ledger -->\n")
    assert main(args) == 3
    assert "README.md: the evidence holds no sequential table of 'planted'" in capsys.readouterr().err


def test_the_committed_documents_are_what_the_shipped_evidence_gives(tmp_path):
    """With no store at all (no results/), the README's and docs/findings.md's ledger tables, docs/ledger.md and
    docs/ledger.json are regenerated from docs/evidence/ byte for byte."""
    repo = tmp_path / "repo"
    for part in ("README.md", "docs/findings.md", "docs/ledger.md", "docs/ledger.json"):
        (repo / part).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / part, repo / part)
    assert not (repo / "results").exists()
    assert main(["ledger", "--evidence", str(ROOT / "docs" / "evidence"), "--root", str(repo), "--check"]) == 0


def test_the_across_block_sets_a_claim_of_several_sweeps_side_by_side(evidence, tmp_path):
    """`across A B`: one row per claim, one column per sweep, each cell the claim's verdict and effect on each
    seed set and whether it replicated; a claim one sweep lacks is '—', an unknown sweep a ValueError."""
    from harness.analysis.ledger import build
    from harness.runs.evidence_file import read_evidence
    from report.ledger import across_table, fill

    for name in ("planted.json", "planted-fresh.json"):
        other = json.loads((evidence / name).read_text())
        other["sweep"] = "other_task"
        other["claims"] = [c for c in other["claims"] if c["id"] == "longer"]
        (tmp_path / f"other-{name}").write_text(json.dumps(other))
    files = [*sorted(evidence.glob("planted*.json")), *sorted(tmp_path.glob("other-*.json"))]
    ledger = build([read_evidence(p) for p in files])
    table = across_table(ledger, ["planted", "other_task"])
    rows = {r.split(" | ")[0].strip("| "): r for r in table.splitlines()[2:]}
    mine = {(ln.sweep, ln.claim): ln for ln in ledger.lines}
    longer = mine["planted", "longer"]
    a, b = (e.verdict.effect for e in longer.entries)
    assert rows["longer"].startswith(f"| longer | reproduced +{a:.4g}; reproduced +{b:.4g} (both) | reproduced +")
    assert rows["accuracy"].endswith("| — |")
    assert table.splitlines()[0] == "| claim | planted | other_task |"
    with pytest.raises(ValueError, match="no verdict of 'nothing'"):
        across_table(ledger, ["planted", "nothing"])
    block = "<!-- ledger: across planted other_task -->\n<!-- /ledger -->\n"
    assert fill(block, ledger, 0) == f"<!-- ledger: across planted other_task -->\n{table}<!-- /ledger -->\n"


def test_the_headlines_and_replication_blocks(evidence):
    """`headlines SWEEP:CLAIM …` picks claims in the order given (an unknown one is a ValueError naming it);
    `replication CLAIM` counts the sweeps where it held on every seed set, some, none."""
    from harness.analysis.ledger import build
    from harness.runs.evidence_file import read_evidence
    from report.ledger import headlines_table, replication_text

    ledger = build([read_evidence(p) for p in sorted(evidence.glob("planted*.json"))])
    table = headlines_table(ledger, ["planted:longer,accuracy"]).splitlines()
    longer = next(ln for ln in ledger.lines if ln.claim == "longer")
    a, b = (e.verdict.effect for e in longer.entries)
    assert table[2].startswith("| planted | longer (") and f"0–4: reproduced +{a:.4g}; 100–104: reproduced" in table[2]
    assert table[2].endswith("| both | " + ", ".join(_q(e.q) for e in longer.entries) + " |")
    assert table[3].startswith("| planted | accuracy (") and "| neither |" in table[3] and len(table) == 4
    with pytest.raises(ValueError, match="'planted': nothing"):
        headlines_table(ledger, ["planted:nothing"])
    assert replication_text(ledger, "longer") == (
        "`longer`, in the 1 sweeps whose evidence holds two seed sets or more: reproduced on every seed set in 1 "
        "(planted).\n"
    )
    assert "on none in 1 (planted)" in replication_text(ledger, "accuracy")


def _q(q: float) -> str:
    return "< 0.0001" if q < 1e-4 else f"{q:.2g}"
