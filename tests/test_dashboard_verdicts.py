"""The Claims panels (verdicts of a sweep's claims on the pages whose metrics they read) and readable arm labels."""

import json

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest
from test_dashboard_app import _app, _visit  # the app driven as the page tests drive it

from dashboard.labels import (
    ArmLabels,
    arm_labels,
    display_label,
    is_named,
    with_settings,
)
from harness.analysis.verdict_table import pval
from harness.runs.sweep_data import SweepData
from harness.runs.writer import flatten_params
from trainer import metric_names as M
from trainer.objective.settings import preset_fields

GRPO, DR = "advantage=group_std aggregation=seq_mean_token_mean", "advantage=group_mean aggregation=constant"
CURVE_PAGES = ("length_bias", "entropy_clipping", "dynamic_sampling")


pytestmark = pytest.mark.slow  # every test drives the Streamlit app (AppTest)


def objective(preset: str, max_len: int = 48, **overrides) -> dict[str, str]:
    """A run's objective.* params as the run logs them: the preset resolved with its max_len."""
    return flatten_params({"objective": preset_fields(preset, {"max_len": max_len, **overrides})})


CLAIMS = [
    {
        "id": "incorrect_length",
        "paper": "2503.20783",
        "statement": "GRPO's 1/|o_i| lengthens incorrect responses.",
        "quote": "which artificially increases response length (especially for incorrect outputs)",
        "where": "Abstract",
        "metric": M.LENGTH_INCORRECT_MEAN,
        "contrast": {
            "arm": {"objective.aggregation": "seq_mean_token_mean"},
            "vs": {"objective.aggregation": "constant"},
        },
        "direction": "increase",
    },
    {
        "id": "entropy_kept",
        "paper": "2503.14476",
        "statement": "Entropy is lower without the constant normaliser.",
        "metric": M.ENTROPY,
        "contrast": {"arm": GRPO, "vs": DR},
        "direction": "decrease",
        "min_effect": 1.0,
    },
]


def _store(tmp_path, claims=CLAIMS, spec_extra=None) -> str:
    """GRPO vs Dr. GRPO (a grid over advantage × aggregation, 2 of its cells), 4 seeds, 12 steps: incorrect responses
    about 6 tokens longer under GRPO (Welch p ≈ 0.0035), entropy the same in both arms."""
    from fake_sweep import FakeRun, write_sweep

    incorrect = {GRPO: [58, 61, 55, 64], DR: [48, 45, 51, 47]}
    entropy = {GRPO: [1.0, 1.1, 0.9, 1.05], DR: [1.02, 0.95, 1.08, 0.98]}
    runs = [
        FakeRun(
            arm,
            seed,
            params=objective(preset),
            values={
                M.LENGTH_INCORRECT_MEAN: [incorrect[arm][seed]] * 12,
                M.LENGTH_CORRECT_MEAN: [30.0 + seed] * 12,
                M.ENTROPY: [entropy[arm][seed]] * 12,
                M.ACCURACY: [0.1 * seed] * 12,
                M.REWARD_MEAN: [0.1] * 12,
            },
        )
        for arm, preset in ((GRPO, "grpo"), (DR, "dr_grpo"))
        for seed in range(4)
    ]
    uri = f"sqlite:///{tmp_path / 'claims.db'}"
    spec = {
        "name": "bias",
        "grid": {"objective.advantage": ["group_std", "group_mean"]},
        "seeds": [0, 1, 2, 3],
        **(spec_extra or {}),
        **({"claims": claims} if claims is not None else {}),
    }
    write_sweep(uri, runs, name="bias", spec=spec)
    return uri


def _boxes(at: AppTest) -> list[str]:
    return [b.value for kind in ("success", "error", "warning") for b in getattr(at, kind)]


def _judged(uri: str):
    from harness.analysis.claims import judge, stored_claims
    from harness.runs.reader import reader_for, sweeps
    from harness.runs.sweep_data import read_sweep

    sweep = sweeps(reader_for(uri).runs())[0]
    claims, warning = stored_claims(sweep)
    assert not warning and len(claims) == 2
    data = read_sweep(reader_for(uri), sweep)
    return {v.claim.id: v for v in judge(data, claims)}, {v.claim.id: v for v in judge(data, claims[:1])}


def test_each_page_shows_the_verdicts_of_its_claims_with_holm_across_all(tmp_path, monkeypatch):
    uri = _store(tmp_path)
    at = _visit(_app(uri, monkeypatch), "length_bias")
    assert "Claims" in [s.value for s in at.subheader]
    assert len(at.success) == 1 and not any("entropy_kept" in b for b in _boxes(at)), _boxes(at)
    shown = at.success[0].value
    assert "**REPRODUCED** · `incorrect_length`" in shown and "arxiv.org/abs/2503.20783" in shown
    assert "Abstract" in shown and "especially for incorrect outputs" in shown  # the paper's words, and where
    every, alone = _judged(uri)
    v = every["incorrect_length"]
    assert v.verdict == "reproduced"
    assert f"Holm p = {pval(v.p_holm)}" in shown and f"p = {pval(v.p)}" in shown and "n = 4 vs 4" in shown
    assert pval(alone["incorrect_length"].p_holm) != pval(v.p_holm)  # Holm over both claims, not this page's one
    assert any("Runs used for incorrect_length (8)" == e.label for e in at.expander)

    _visit(at, "entropy_clipping")
    boxes = _boxes(at)
    assert any("`entropy_kept`" in b and "INCONCLUSIVE" in b and "small effect" in b for b in boxes), boxes
    assert not any("incorrect_length" in b for b in boxes)
    assert any(f"Holm p = {pval(every['entropy_kept'].p_holm)}" in b for b in boxes)

    _visit(at, "dynamic_sampling")  # no claim reads its metrics
    assert "Claims" not in [s.value for s in at.subheader]
    _visit(at, "ablation")  # every claim
    boxes = _boxes(at)
    assert any("incorrect_length" in b for b in boxes) and any("entropy_kept" in b for b in boxes)


def test_a_sequential_sweep_shows_its_sequential_verdicts(tmp_path, monkeypatch):
    """A sweep run with --until-decided: the panel's verdict is the sequential one (here the fixed-design analysis
    of all the runs would say reproduced, the sequential design stopped it at the budget), the fixed one beside
    it for reference."""
    from harness.analysis import sequential as seq
    from harness.runs.reader import reader_for, sweeps
    from harness.runs.writer import log_sequential

    uri = _store(tmp_path)
    parent = sweeps(reader_for(uri).runs())[0].parent["run_id"]
    design = seq.Design(first=2, batch=2, max_seeds=4)
    track = seq.Track("incorrect_length", stop="budget", stopped_at=2)
    track.looks = [
        seq.Look(1, 2, 0.5, 8.0, 4.0, 2.0, 1.5, 4.3, -40.0, 56.0),
        seq.Look(2, 4, 1.0, 7.0, 2.0, 5.0, 2.0, 2.9, -1.0, 15.0),
    ]
    rounds = [seq.Round(1, {"a": 2}, 4, 0, ["incorrect_length"]), seq.Round(2, {"a": 4}, 4, 0, [])]
    log_sequential(uri, parent, seq.Record(design, rounds, [track, seq.Track("entropy_kept")]).to_json())
    at = _visit(_app(uri, monkeypatch), "length_bias")
    assert not at.success, "the fixed design's 'reproduced' must not be the verdict shown"
    shown = next(b for b in _boxes(at) if "incorrect_length" in b)
    assert shown.startswith("**INCONCLUSIVE**") and "Decided sequentially" in shown and "budget, look 2" in shown
    assert "4 seeds per arm" in shown and "Fixed-design analysis of all the runs, for reference" in shown


def test_a_sweep_without_claims_shows_no_claims_panel(tmp_path, monkeypatch):
    at = _app(_store(tmp_path, claims=None), monkeypatch)
    for page in (*CURVE_PAGES, "ablation"):
        _visit(at, page)
        assert "Claims" not in [s.value for s in at.subheader], page
        assert not any("claims" in w.value for w in at.warning), page


def test_unreadable_claims_show_a_warning(tmp_path, monkeypatch):
    at = _visit(_app(_store(tmp_path, claims=[{"id": "x"}]), monkeypatch), "length_bias")
    assert any("could not be read" in w.value for w in at.warning), [w.value for w in at.warning]
    assert "Claims" not in [s.value for s in at.subheader]


def test_pages_show_preset_names_with_the_settings_on_hover(tmp_path, monkeypatch):
    at = _visit(_app(_store(tmp_path), monkeypatch), "length_bias")
    table = at.dataframe[0].value
    assert table["arm"].tolist() == ["GRPO", "Dr. GRPO"]
    assert table["settings"].str.contains("objective.aggregation=constant").tolist() == [False, True]
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    means = [t for t in spec["data"] if t.get("showlegend") is not False and t.get("mode") == "lines"]
    assert [t["name"] for t in means] == ["GRPO", "Dr. GRPO"]
    assert "objective.advantage=group_mean" in means[1]["hovertemplate"]
    _visit(at, "ablation")
    assert at.dataframe[0].value["arm"].tolist() == ["GRPO", "Dr. GRPO"]


def test_named_arms_keep_their_names(tmp_path, monkeypatch):
    spec = {"arms": [{"name": GRPO.split()[0]}]}  # an arm named like a grid label's first part: a name
    at = _visit(_app(_store(tmp_path, spec_extra=spec), monkeypatch), "length_bias")
    assert at.dataframe[0].value["arm"].tolist() == [GRPO, "Dr. GRPO"]


# ---- display_label --------------------------------------------------------------------------------------------
def test_display_label_names_the_preset_an_arm_equals():
    assert display_label(DR, objective("dr_grpo")) == "Dr. GRPO"
    assert display_label(GRPO, objective("grpo", max_len=3000)) == "GRPO"
    assert display_label("ratio=sequence clip_low=0.0003 clip_high=0.0004", objective("gspo")) == "GSPO"
    assert display_label("dynamic_sampling=True", objective("dapo")) == "DAPO"  # overlong_cache_len = 48 // 5
    assert display_label("x=1", objective("dapo", overlong_cache_len=32)) == "x=1"  # not the preset's derived 9
    assert display_label("clip_high=0.28", objective("grpo", clip_high=0.28)) == "clip_high=0.28"
    assert display_label("base", {}) == "base"  # no objective params: no preset


def test_named_arms_keep_their_names_and_the_rule_without_the_sweep_file():
    grpo = objective("grpo")
    assert display_label("naive_grpo", grpo) == "naive_grpo"
    assert display_label("naive_grpo lr=0.001", grpo) == "naive_grpo lr=0.001"
    assert display_label("base", grpo) == display_label("all runs", grpo) == "GRPO"
    assert display_label("a=b", grpo, names=["a=b"]) == "a=b"  # a name with '=': told apart by the sweep file
    assert display_label("a=b", grpo) == "GRPO"
    assert not is_named("naive_grpo", names=[]) and is_named("naive lr=1", names=["naive"])


def _data(arms: dict[str, dict[str, str]], varying: list[str]) -> SweepData:
    runs = pd.DataFrame({"run_id": [f"r{i}" for i in range(len(arms))], "arm": list(arms)})
    params = pd.DataFrame(list(arms.values()), index=pd.Index(runs["run_id"], name="run_id"))
    return SweepData(None, runs, pd.DataFrame(columns=["run_id", "key", "step", "value"]), varying, list(arms), params)


def test_arms_that_would_share_a_display_label_keep_their_planned_ones():
    data = _data(
        {
            "lr=0.001": {**objective("grpo"), "train.lr": "0.001"},
            "lr=0.01": {**objective("grpo"), "train.lr": "0.01"},
            "lr=0.1": {**objective("dr_grpo"), "train.lr": "0.1"},
        },
        ["train.lr"],
    )
    labels = arm_labels(data)
    assert labels.name == {"lr=0.001": "lr=0.001", "lr=0.01": "lr=0.01", "lr=0.1": "Dr. GRPO"}
    assert labels.hover("lr=0.1") == "train.lr=0.1" and labels.plain("lr=0.1") == "train.lr=0.1"
    assert arm_labels(data, names=["lr=0.1"]).hover("lr=0.1") == "lr=0.1<br>train.lr=0.1"  # a named arm: its name too
    # a display label that is another arm's planned label falls back as well
    data = _data({"GRPO": objective("dr_grpo"), "advantage=group_std": objective("grpo")}, [])
    assert arm_labels(data, names=["GRPO"]).name == {"GRPO": "GRPO", "advantage=group_std": "advantage=group_std"}


@pytest.mark.parametrize("shown", [{"a": "a"}, {"a": "A"}])
def test_tables_get_a_settings_column_only_when_a_label_changes(shown):
    labels = ArmLabels(shown, {"a": "a<br>x=1"})
    out = with_settings(pd.DataFrame({"arm": ["a"], "v": [1]}), labels)
    assert out["arm"].tolist() == [shown["a"]]
    assert ("settings" in out) == (shown["a"] != "a") and list(out.columns)[:2] == [
        "arm",
        *(["settings"] if shown["a"] != "a" else ["v"]),
    ]


def test_a_verdict_box_says_how_failed_runs_counted():
    from dashboard.verdicts import body
    from harness.analysis.claims import Verdict
    from harness.analysis.verdict_table import verdict_rows
    from harness.config.claims import Claim

    claim = Claim.model_validate({**CLAIMS[0], "threshold": -5.0})  # a not-worse claim: worst value by default
    v = Verdict(claim, "inconclusive", effect=1.0, failed1=1, diverged1=1, failed_value=40.0)
    assert "Failed runs 1 vs 0 (1 diverged), counted at the worst value 40" in body(v, verdict_rows([v])[0])
    assert "Failed" not in body(Verdict(claim, "inconclusive"), verdict_rows([Verdict(claim, "inconclusive")])[0])

    mixed = Verdict(claim, "reproduced", mixed="runs from 2 CPU capabilities (AVX2, AVX512)")
    assert body(mixed, verdict_rows([mixed])[0]).startswith(
        "**REPRODUCED** · runs from 2 CPU capabilities (AVX2, AVX512) · `"
    )


def test_claims_on_advantages_and_strata_show_where_those_are_drawn():
    from dashboard.verdicts import on_page
    from harness.config.claims import Claim

    flips = Claim.model_validate({**CLAIMS[0], "metric": M.ADV_SIGN_FLIP_FRAC})
    hidden = Claim.model_validate({**CLAIMS[0], "metric": M.task_metric("accuracy_hidden")})
    assert on_page(flips, "dynamic_sampling") and not on_page(flips, "length_bias")
    assert on_page(hidden, "length_bias") and not on_page(hidden, "dynamic_sampling")


def test_a_claim_on_every_arm_shows_each_arm(tmp_path, monkeypatch):
    """A `since` claim's box lists every arm's change, the deciding (weakest) arm first, and n per arm."""
    from fake_sweep import FakeRun, write_sweep

    gain = {GRPO: [0.10, 0.12, 0.11], DR: [0.03, 0.04, 0.035]}
    runs = [
        FakeRun(arm, seed, params=objective(preset), values={M.REWARD_MEAN: [0.4] * 3 + [0.4 + gain[arm][seed]] * 3})
        for arm, preset in ((GRPO, "grpo"), (DR, "dr_grpo"))
        for seed in range(3)
    ]
    claim = {
        "id": "learns",
        "statement": "Training raises reward in every arm.",
        "metric": M.REWARD_MEAN,
        "at": "last-3",
        "contrast": {"since": "first-3"},
        "direction": "increase",
    }
    uri = f"sqlite:///{tmp_path / 'learn.db'}"
    spec = {"name": "bias", "grid": {"objective.advantage": ["group_std", "group_mean"]}, "seeds": [0, 1, 2]}
    write_sweep(uri, runs, name="bias", spec={**spec, "claims": [claim]})
    at = _visit(_app(uri, monkeypatch), "ablation")
    [box] = [b for b in _boxes(at) if "`learns`" in b]
    assert "**REPRODUCED**" in box and "harness's own claim" in box, box
    assert "n = 3/3 runs in 2 arms" in box and "By arm (the deciding one first):" in box, box
    assert box.index("group_mean aggregation=constant +0.035") < box.index("group_std"), box


def test_competing_claims_show_side_by_side_on_their_page(tmp_path, monkeypatch):
    """Two papers' claims on one question: the entropy page shows them in one table under the question, each with
    its verdict, before the claims' own boxes."""
    q = "What does clipping do to entropy?"
    claims = [
        {**CLAIMS[1], "id": "dapo", "paper": "2503.14476", "question": q, "quote": "x", "where": "y"},
        {**CLAIMS[1], "id": "park", "paper": "2509.26114", "question": q, "quote": "x", "where": "y",
         "direction": "increase", "min_effect": None},
    ]  # fmt: skip
    at = _visit(_app(_store(tmp_path, claims=claims), monkeypatch), "entropy_clipping")
    assert any("Competing claims" in m.value for m in at.markdown), [m.value for m in at.markdown]
    assert q in [c.value for c in at.caption]
    [frame] = [d.value for d in at.dataframe if "paper" in d.value.columns]
    assert frame["claim"].tolist() == ["dapo", "park"] and frame["paper"].tolist() == [
        "arXiv 2503.14476",
        "arXiv 2509.26114",
    ]
