"""Claims judged on runs: each verdict kind on planted effects written through MLflow's API, Holm across the
claims, bad claims refused before any job starts, and the false-reproduction rate of 200 null sweeps."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fake_sweep import FakeRun, write_sweep
from scipy import stats as sps

from harness.analysis import stats
from harness.analysis.claims import decide, evidence
from harness.analysis.evidence import Evidence
from harness.cli import main
from harness.config.claims import Claim
from harness.config.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
M = "train/length_incorrect_mean"


def _claim(**kw) -> Claim:
    base = {
        "id": "c",
        "statement": "s.",
        "paper": "2503.20783",
        "metric": M,
        "contrast": {"arm": "A", "vs": "B"},
        "direction": "increase",
    }
    return Claim.model_validate({**base, **kw})


# ---- the statistics behind a verdict ---------------------------------------------------------------------------


def test_contrast_is_welch_and_tests_a_fold_against_a_threshold():
    a, b = np.array([3.0, 5.0, 4.0, 6.0]), np.array([1.0, 2.0, 1.5, 0.5, 2.5])
    res = stats.contrast(a, b)
    ref = sps.ttest_ind(a, b, equal_var=False)
    assert res["effect"] == pytest.approx(a.mean() - b.mean()) and res["p"] == pytest.approx(ref.pvalue)
    assert res["df"] == pytest.approx(ref.df)
    # mean(a) − 2·mean(b) tested against 1, by hand
    est, se2 = a.mean() - 2 * b.mean(), a.var(ddof=1) / 4 + 4 * b.var(ddof=1) / 5
    df = se2**2 / ((a.var(ddof=1) / 4) ** 2 / 3 + (4 * b.var(ddof=1) / 5) ** 2 / 4)
    res = stats.contrast(a, b, fold=2, null=1)
    assert res["effect"] == pytest.approx(est) and res["se"] == pytest.approx(np.sqrt(se2))
    assert res["p"] == pytest.approx(2 * sps.t.sf(abs(est - 1) / np.sqrt(se2), df))
    assert np.isnan(stats.contrast([1.0], b)["p"]) and "single run" in stats.contrast([1.0], b)["note"]


def test_main_effect_against_a_threshold_shifts_only_the_test():
    rng = np.random.default_rng(0)
    rows = [{"a": a, "b": b, "value": 3.0 * (a == "y") + rng.normal()} for a in "xy" for b in "uv" for _ in range(4)]
    final = pd.DataFrame(rows)
    zero, shifted = (stats.main_effect(final, ["a", "b"], "a", "y", "x", null=n) for n in (0.0, 3.0))
    assert zero["effect"] == shifted["effect"] and (zero["low"], zero["high"]) == (shifted["low"], shifted["high"])
    t = (zero["effect"] - 3.0) / zero["se"]
    assert shifted["p"] == pytest.approx(2 * sps.t.sf(abs(t), zero["df"]))
    assert 3 <= zero["df"] <= 16 - 4 and zero["n"] == zero["n_base"] == 8  # Satterthwaite: within 4 cells' 3 df each


def test_seeds_needed_is_the_smallest_count_with_the_power():
    se, df, seeds = 2.0, 8.0, 5
    m = stats.seeds_needed(3.0, se, df, seeds, alpha=0.05, power=0.8)
    power = lambda k: stats.t_power(3.0, se * np.sqrt(seeds / k), df * k / seeds, alpha=0.05)  # noqa: E731
    assert power(m) >= 0.8 > power(m - 1)
    assert stats.t_power(stats.t_mde(se, df), se, df) == pytest.approx(0.8)
    assert stats.seeds_needed(1e-6, se, df, seeds) is None  # beyond the limit


# ---- verdicts on planted effects, through MLflow --------------------------------------------------------------


def _planted(uri: str, claims: list[dict], name: str = "planted") -> None:
    big, small = [10.0, 11.0, 9.0, 10.5, 9.5], [0.0, 1.0, -1.0, 0.5, -0.5]
    tight_a, tight_b = [5.0, 5.1, 4.9, 5.05, 4.95], [5.02, 5.12, 4.92, 5.07, 4.97]
    noisy_a, noisy_b = [1.0, 4.0, -2.0, 3.0, 0.5], [0.0, 2.5, -3.0, 1.0, 1.0]
    runs = []
    for arm, vals in (("A", (big, tight_a, noisy_a)), ("B", (small, tight_b, noisy_b))):
        for seed in range(5):
            runs.append(
                FakeRun(
                    arm,
                    seed,
                    params={"objective.clip_high": "0.28" if arm == "A" else "0.2"},
                    values={
                        M: [vals[0][seed]] * 3,
                        "policy/entropy": [vals[1][seed]] * 3,
                        "train/accuracy": [vals[2][seed]] * 3,
                    },
                )
            )
    write_sweep(
        uri,
        runs,
        name=name,
        sweep_id=name,
        experiment=name,
        spec={"name": name, "seeds": list(range(5)), "claims": claims},
    )


PLANTED = [
    {
        "id": "longer",
        "statement": "A lengthens.",
        "paper": "2503.20783",
        "quote": "A makes responses longer.",
        "where": "Figure 1",
        "metric": M,
        "contrast": {"arm": "A", "vs": "B"},
        "direction": "increase",
        "at": "last-2",
    },
    {
        "id": "shorter",
        "statement": "A shortens.",
        "paper": "2503.20783",
        "metric": M,
        "contrast": {"arm": {"objective.clip_high": 0.28}, "vs": {"objective.clip_high": 2.0e-1}},
        "direction": "decrease",
    },
    {
        "id": "entropy",
        "statement": "A raises entropy.",
        "paper": "2503.14476",
        "metric": "policy/entropy",
        "contrast": {"arm": "A", "vs": "B"},
        "direction": "increase",
        "min_effect": 0.5,
        "at": "auc",
    },
    {
        "id": "accuracy",
        "statement": "A is more accurate.",
        "paper": "2503.14476",
        "metric": "train/accuracy",
        "contrast": {"arm": "A", "vs": "B"},
        "direction": "increase",
        "min_effect": 0.5,
        "at": "final",
    },
]


@pytest.mark.slow
def test_each_verdict_kind_and_the_exit_code(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/m.db"
    _planted(uri, PLANTED)
    assert main(["claims", "planted", "--tracking-uri", uri]) == 1  # a contradicted claim fails the command
    out = capsys.readouterr().out
    lines = {line.split(":")[0]: line for line in out.splitlines() if line.split(":")[0] in {c["id"] for c in PLANTED}}
    assert "REPRODUCED" in lines["longer"] and "CONTRADICTED" in lines["shorter"]
    assert "INCONCLUSIVE" in lines["entropy"] and "a small effect" in lines["entropy"]
    assert "INCONCLUSIVE" in lines["accuracy"] and "underpowered" in lines["accuracy"]
    assert "seeds for 0.5:" in lines["accuracy"] and "n = 5 vs 5" in lines["longer"]

    _planted(f"sqlite:///{tmp_path}/ok.db", [c for c in PLANTED if c["id"] != "shorter"], name="fine")
    assert main(["claims", "fine", "--tracking-uri", f"sqlite:///{tmp_path}/ok.db"]) == 0


@pytest.mark.slow
def test_a_failed_run_counts_by_the_claim_and_the_verdict_says_so(tmp_path, capsys):
    """A not-worse claim where the method's one extra seed diverged: written through MLflow's API (a FAILED run
    with the trainer's reason), it is counted at the worst value seen by default, which turns a reproduced
    "not worse" into an inconclusive one; with `failed: exclude` it is left out, and both verdicts say so."""
    a, b = [0.50, 0.52, 0.51, 0.49, 0.50], [0.50, 0.51, 0.49, 0.50, 0.40]
    runs = [FakeRun("A", s, values={"train/reward_mean": [a[s]] * 3}) for s in range(5)]
    runs += [FakeRun("B", s, values={"train/reward_mean": [b[s]] * 3}) for s in range(5)]
    runs.append(FakeRun("A", 5, status="FAILED", start=-40, reason="timed out after 3 s"))  # then retried:
    runs.append(FakeRun("A", 5, status="FAILED", reason="TrainingDiverged: diverged at step 2: loss is nan (lr 0.5)"))
    runs.append(FakeRun("B", 5, status="FAILED", job_id="B-4", values={"train/reward_mean": [0.1]}, reason="killed"))
    claim = {
        "id": "not_worse",
        "statement": "A's reward is not lower than B's by more than 0.05.",
        "metric": "train/reward_mean",
        "contrast": {"arm": "A", "vs": "B"},
        "direction": "increase",
        "threshold": -0.05,
    }
    verdicts = {}
    for how in ("default", "exclude"):
        uri = f"sqlite:///{tmp_path}/{how}.db"
        spec_claim = claim if how == "default" else {**claim, "failed": "exclude"}
        write_sweep(
            uri,
            runs,
            name=how,
            sweep_id=how,
            experiment=how,
            spec={"name": how, "seeds": [*range(6)], "claims": [spec_claim]},
        )
        main(["claims", how, "--tracking-uri", uri])
        verdicts[how] = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("not_worse:"))
    # A's job failed twice (a retry): one job, counted once, as its latest run; B's failed run is an earlier attempt
    # of a job that finished (history): not counted
    assert "failed runs 1 vs 0 (1 diverged), counted at the worst value 0.4" in verdicts["default"]
    assert "INCONCLUSIVE" in verdicts["default"] and "n = 6 vs 5" in verdicts["default"]
    assert "failed runs 1 vs 0 (1 diverged), excluded" in verdicts["exclude"]
    assert "REPRODUCED" in verdicts["exclude"] and "n = 5 vs 5" in verdicts["exclude"]
    out = tmp_path / "report"
    assert main(["report", "default", "--tracking-uri", f"sqlite:///{tmp_path}/default.db", "--out", str(out)]) == 0
    assert "failed runs 1 vs 0 (1 diverged), counted at the worst value 0.4" in (out / "report.md").read_text()


@pytest.mark.slow
def test_verdicts_head_every_report_format(tmp_path):
    uri, out = f"sqlite:///{tmp_path}/m.db", tmp_path / "rep"
    _planted(uri, PLANTED)
    assert main(["report", "planted", "--tracking-uri", uri, "--out", str(out), "--metric", M]) == 0
    md = (out / "report.md").read_text()
    assert md.index("## Claims") < md.index("## Arms") and "reproduced" in md and "contradicted" in md
    assert "planted-A-s0" in md  # the runs used are named
    assert "“A makes responses longer.”" in md and "arXiv 2503.20783 (Figure 1)" in md  # the paper's words, and where
    assert "harness, on arXiv 2503.14476" in md  # a claim without a quote is harness's own
    verdicts = json.loads((out / "report.json").read_text())["verdicts"]
    assert [v["verdict"] for v in verdicts] == ["reproduced", "contradicted", "inconclusive", "inconclusive"]
    assert verdicts[0]["n1"] == 5 and len(verdicts[0]["runs"]) == 10 and verdicts[3]["seeds_needed"] > 5
    html = (out / "report.html").read_text()
    assert html.index("<h2>Claims</h2>") < html.index("<h2>Arms</h2>") and "A makes responses longer." in html
    assert "claims" in (out / "report.tex").read_text()


@pytest.mark.slow
def test_factorial_main_effect_claims(tmp_path, capsys):
    """A planted +4 main effect of one switch, none of the other: reproduced, and not reproduced."""
    uri = f"sqlite:///{tmp_path}/m.db"
    noise = [0.3, -0.2, 0.1, -0.4, 0.2]
    runs = [
        FakeRun(
            f"agg={a} adv={b}",
            s,
            params={"objective.aggregation": a, "objective.advantage": b},
            values={M: [40 + 4 * (a == "seq_mean_token_mean") + noise[(s + i) % 5] * 3] * 2},
        )
        for i, (a, b) in enumerate(
            [(a, b) for a in ("constant", "seq_mean_token_mean") for b in ("group_mean", "group_std")]
        )
        for s in range(5)
    ]
    claims = [
        {
            "id": "norm",
            "statement": "1/T lengthens.",
            "paper": "2503.20783",
            "metric": M,
            "contrast": {"effect": "objective.aggregation", "from": "constant", "to": "seq_mean_token_mean"},
            "direction": "increase",
        },
        {
            "id": "std",
            "statement": "std does not lengthen by 5.",
            "paper": "2503.20783",
            "metric": M,
            "contrast": {"effect": "objective.advantage", "from": "group_mean", "to": "group_std"},
            "direction": "decrease",
            "threshold": 5.0,
        },
    ]
    write_sweep(
        uri,
        runs,
        name="grid",
        sweep_id="grid",
        experiment="grid",
        spec={"name": "grid", "seeds": list(range(5)), "claims": claims},
    )
    assert main(["claims", "grid", "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    norm = next(line for line in out.splitlines() if line.startswith("norm:"))
    std = next(line for line in out.splitlines() if line.startswith("std:"))
    assert "REPRODUCED" in norm and "n = 10 vs 10" in norm
    effect = float(norm.split("= ")[1].split(",")[0])
    assert effect == pytest.approx(4.0, abs=1.0)
    assert "REPRODUCED" in std  # the std effect is ~0, well below the claimed 5


def _evidence(p: float) -> Evidence:
    return Evidence(
        pd.DataFrame({"run_id": []}), effect=1.0, low=0.1, high=1.9, p=p, se=0.4, df=8.0, n1=5, n2=5, mean1=1.0,
        mean2=0.0, seeds=5,
    )  # fmt: skip


def _interval(effect: float, low: float, high: float, df: float = 8.0) -> Evidence:
    """An effect with its 95 % t interval (df `df`), the p against 0 that interval implies."""
    se = (high - low) / 2 / sps.t.ppf(0.975, df)
    p = 2 * sps.t.sf(abs(effect) / se, df)
    return Evidence(pd.DataFrame({"run_id": []}), effect=effect, low=low, high=high, p=p, se=se, df=df, seeds=5)


@pytest.mark.parametrize(
    ("direction", "effect", "low", "high", "min_effect", "verdict", "reason"),
    [
        ("increase", 2.0, 1.0, 3.0, 5.0, "inconclusive", "small effect"),  # significant, but inside ±5
        ("increase", -0.5, -0.8, -0.2, 1.0, "inconclusive", "small effect"),  # significant the other way, inside ±1
        ("increase", -1.0, -1.5, -0.5, 1.0, "inconclusive", "underpowered"),  # the other way, not by min_effect
        ("increase", -2.0, -2.5, -1.5, 1.0, "contradicted", ""),  # clears −1
        ("decrease", 2.0, 1.5, 2.5, 1.0, "contradicted", ""),  # clears +1 the other way
        ("decrease", 0.9, 0.6, 1.2, 1.0, "inconclusive", "underpowered"),
        ("increase", 4.0, 2.0, 6.0, 5.0, "reproduced", ""),  # reaches past the band: the claim's side
        ("increase", 2.0, 1.0, 3.0, None, "reproduced", ""),  # no band: significance alone
    ],
)
def test_min_effect_bounds_both_verdicts(direction, effect, low, high, min_effect, verdict, reason):
    """A significant effect shown smaller than min_effect is a small effect, not reproduced; a contradiction must
    clear the threshold by min_effect."""
    claim = _claim(direction=direction, min_effect=min_effect)
    e = _interval(effect, low, high)
    assert e.p < 0.05
    [v] = decide([claim], [e])
    assert (v.verdict, v.reason) == (verdict, reason), v.summary()


def test_holm_is_applied_across_the_claims():
    one = [_claim(id="a")]
    assert decide(one, [_evidence(0.03)])[0].verdict == "reproduced"  # alone, p = 0.03 decides
    two = [_claim(id="a"), _claim(id="b")]
    verdicts = decide(two, [_evidence(0.03), _evidence(0.04)])
    assert [v.verdict for v in verdicts] == ["inconclusive"] * 2  # Holm: 0.06 and 0.06
    assert [v.p_holm for v in verdicts] == pytest.approx([0.06, 0.06])
    assert [v.reason for v in verdicts] == ["underpowered"] * 2


BAD = {
    "metric": ({"metric": "policy/entropyy"}, "claims[0].metric", "unknown metric 'policy/entropyy'"),
    "direction": ({"direction": "up"}, "claims[0].direction", "'increase' or 'decrease'"),
    "arm": (
        {"contrast": {"arm": "GSPO", "vs": "advantage=group_std aggregation=constant"}},
        "claims[0] (c).contrast.arm",
        "'GSPO' matches no arm",
    ),
    "settings": (
        {"contrast": {"arm": {"objective.clip_high": 0.5}, "vs": {"objective.advantage": "group_std"}}},
        "claims[0] (c).contrast.arm",
        "matches no arm",
    ),
    "effect": (
        {"contrast": {"effect": "objective.clip_high", "from": 0.2, "to": 0.28}},
        "claims[0] (c).contrast.effect",
        "not varied by this sweep's grid",
    ),
    "level": (
        {"contrast": {"effect": "objective.aggregation", "from": "constant", "to": "token_mean"}},
        "claims[0] (c).contrast.to",
        "not a level of objective.aggregation",
    ),
    "several arms, no pool": (
        {
            "contrast": {
                "arm": {"objective.aggregation": "seq_mean_token_mean"},
                "vs": {"objective.aggregation": "constant"},
            }
        },
        "claims[0] (c).contrast.arm",
        "picks 2 arms",
    ),
    "pool, unbalanced": (
        {
            "contrast": {
                "arm": {"objective.aggregation": "seq_mean_token_mean"},
                "vs": {"objective.aggregation": "constant", "objective.advantage": "group_mean"},
                "pool": True,
            }
        },
        "claims[0] (c).contrast",
        "do not pick the same combinations of the other settings (objective.advantage=group_std on one side only)",
    ),
    "quote without where": ({"quote": "It does."}, "claims[0]", "quote and where go together"),
    "quote without paper": ({"quote": "It does.", "where": "Fig. 1", "paper": None}, "claims[0]", "needs the paper"),
    "at": ({"at": "best"}, "claims[0].at", "best is a selection"),
    "paper": ({"paper": "Dr. GRPO"}, "claims[0].paper", "not an arXiv id"),
    "both": (
        {"contrast": {"arm": "x", "vs": "y", "effect": "objective.aggregation", "from": "a", "to": "b"}},
        "claims[0].contrast",
        "not both",
    ),
    "since with arms": ({"contrast": {"since": "first-10", "arm": "x", "vs": "y"}}, "claims[0].contrast", "since"),
    "since best": ({"contrast": {"since": "best"}}, "claims[0].contrast", "since: best is a selection"),
    "since typo": ({"contrast": {"since": "start"}}, "claims[0].contrast", "first-K"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_claim_is_one_line_before_any_job(case, tmp_path, capsys):
    change, key, problem = BAD[case]
    claim = {
        "id": "c",
        "statement": "s.",
        "paper": "2503.20783",
        "metric": M,
        "direction": "increase",
        "contrast": {"effect": "objective.aggregation", "from": "constant", "to": "seq_mean_token_mean"},
        **change,
    }
    import yaml

    spec = yaml.safe_load((ROOT / "ablations" / "dr_grpo_bias.yaml").read_text())
    spec.update(base=str(ROOT / "ablations" / "toy_run.yaml"), claims=[claim])
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(spec))
    db = tmp_path / "m.db"
    assert main(["sweep", str(path), "--tracking-uri", f"sqlite:///{db}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(path) in err and key in err and problem in err, err
    assert not db.exists()


def test_a_balanced_pooled_reference_is_accepted_and_is_the_main_effect(tmp_path):
    """Pooled over the other switch, balanced: the contrast of the unweighted arm means, which in a 2×2 grid is the
    switch's main effect, and unbalanced finished runs do not tilt it (a +100 effect of b, none of a, runs 2/5
    against 5/2: pooling the runs would read −43)."""
    import yaml

    spec = yaml.safe_load((ROOT / "ablations" / "dr_grpo_bias.yaml").read_text())
    pooled = {
        "arm": {"objective.aggregation": "seq_mean_token_mean"},
        "vs": {"objective.aggregation": "constant"},
        "pool": True,
    }
    spec.update(
        base=str(ROOT / "ablations" / "toy_run.yaml"), claims=[_claim(contrast=pooled).model_dump(by_alias=True)]
    )
    path = tmp_path / "pooled.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["sweep", str(path), "--dry-run"]) == 0
    settings = {f"a={a} b={b}": {"a": a, "b": b} for a in "xy" for b in "uv"}
    counts = {"a=y b=u": 2, "a=y b=v": 5, "a=x b=u": 5, "a=x b=v": 2}
    rng = np.random.default_rng(0)
    values = pd.DataFrame(
        [
            {"run_id": f"{arm}-{s}", "arm": arm, "seed": s, **st, "value": 100.0 * (st["b"] == "u") + rng.normal()}
            for arm, st in settings.items()
            for s in range(counts[arm])
        ]
    )
    claim = _claim(contrast={"arm": {"a": "y"}, "vs": {"a": "x"}, "pool": True})
    ev = evidence(claim, values, ["a", "b"], settings)
    assert abs(ev.effect) < 3 and ev.mean1 == pytest.approx(
        values[values["a"] == "y"].groupby("arm")["value"].mean().mean()
    )
    runs = values.groupby("a")["value"].mean()
    assert runs["y"] - runs["x"] == pytest.approx(-42.9, abs=3)  # what pooling the runs would have said
    assert ev.p > 0.05 and ev.low < 0 < ev.high
    # a claim logged before `pool` existed (never checked against its sweep) is not pooled silently
    unpooled = evidence(_claim(contrast={"arm": {"a": "y"}, "vs": {"a": "x"}}), values, ["a", "b"], settings)
    assert "picks 2 arms; say pool: true" in unpooled.note and np.isnan(unpooled.p)


@pytest.mark.parametrize("pool", [False, True])
def test_dapo_progressive_cannot_pool_its_clip_high_arms(pool, tmp_path, capsys):
    """{clip_high: 0.28} vs {clip_high: 0.2} in the cumulative DAPO sweep picks 4 arms against 2 that also differ in
    overlong filtering, the loss and dynamic sampling: refused with or without pool, before any job."""
    import yaml

    spec = yaml.safe_load((ROOT / "ablations" / "dapo_progressive.yaml").read_text())
    contrast = {"arm": {"objective.clip_high": 0.28}, "vs": {"objective.clip_high": 0.2}, "pool": pool}
    spec.update(
        base=str(ROOT / "ablations" / "toy_run.yaml"), claims=[_claim(contrast=contrast).model_dump(by_alias=True)]
    )
    path = tmp_path / "dapo.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["sweep", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(path) in err and "claims[0] (c).contrast" in err
    assert ("do not pick the same combinations" if pool else "picks 4 arms") in err, err


def test_fold_needs_a_positive_reference():
    claim = _claim(contrast={"arm": "A", "vs": "B", "fold": 2})
    values = pd.DataFrame(
        {"run_id": list("abcdef"), "arm": ["A"] * 3 + ["B"] * 3, "seed": [0, 1, 2] * 2,
         "value": [0.05, 0.06, 0.04, -0.10, -0.11, -0.09]}
    )  # fmt: skip
    [v] = decide([claim], [evidence(claim, values, [], {"A": {}, "B": {}})])
    assert v.verdict == "inconclusive" and v.reason == "no test" and "positive reference" in v.note, v.summary()
    assert "ratio" not in v.summary()
    positive = values.assign(value=values["value"].abs())
    [v] = decide([claim], [evidence(claim, positive, [], {"A": {}, "B": {}})])
    assert v.reason != "no test" and np.isfinite(v.p)


# ---- each arm against its own start (`since`) --------------------------------------------------------------------


def test_since_is_tested_in_every_arm_and_rests_on_the_weakest():
    """Intersection-union: every arm's change by a one-sample t-test (scipy by hand); the claim's p is the largest
    while every arm is on the claimed side, and an arm clearly on the other side decides it the other way."""
    claim = _claim(contrast={"since": "first-10"}, metric="train/reward_mean")
    changes = {"A": [0.10, 0.12, 0.08, 0.11], "B": [0.02, 0.05, 0.01, 0.04], "C": [0.20, 0.18, 0.25, 0.22]}

    def frame(changes):
        rows = [(f"{arm}{i}", arm, i, v) for arm, vs in changes.items() for i, v in enumerate(vs)]
        return pd.DataFrame(rows, columns=["run_id", "arm", "seed", "value"])

    settings = {arm: {} for arm in changes}
    e = evidence(claim, frame(changes), [], settings)
    ps = {arm: sps.ttest_1samp(vs, 0.0).pvalue for arm, vs in changes.items()}
    assert e.p == pytest.approx(max(ps.values())) and e.effect == pytest.approx(np.mean(changes["B"]))
    assert [a.arm for a in e.per_arm] == ["B", "A", "C"]  # the deciding arm first
    assert [a.p for a in e.per_arm] == pytest.approx([ps["B"], ps["A"], ps["C"]])
    assert all(type(a.n) is int and a.n == 4 for a in e.per_arm)  # a plain int: the report's JSON writes it
    [v] = decide([claim], [e])
    assert v.verdict == "reproduced" and v.n_text() == "4/4/4 runs in 3 arms", v.summary()
    assert "by arm: B +0.03" in v.summary()

    flat = {**changes, "B": [0.02, -0.03, 0.01, 0.0]}  # B unmoved: the claim cannot hold for every arm
    [v] = decide([claim], [evidence(claim, frame(flat), [], settings)])
    assert v.verdict == "inconclusive" and v.p == pytest.approx(sps.ttest_1samp(flat["B"], 0.0).pvalue)

    falls = {**changes, "C": [-0.20, -0.18, -0.25, -0.22]}  # C falls clearly: contradicted, on C's evidence
    [v] = decide([claim], [evidence(claim, frame(falls), [], settings)])
    assert v.verdict == "contradicted" and v.per_arm[0].arm == "C" and v.effect == pytest.approx(-0.2125)
    assert v.p == pytest.approx(3 * sps.ttest_1samp(falls["C"], 0.0).pvalue)  # any of 3 arms may fall: × 3
    assert v.per_arm[0].p == pytest.approx(sps.ttest_1samp(falls["C"], 0.0).pvalue)  # the arm's own p, as is
    barely = {**changes, "C": [-0.02, -0.05, -0.01, -0.04]}  # p 0.04 alone: not below 0.05 after × 3
    [v] = decide([claim], [evidence(claim, frame(barely), [], settings)])
    assert sps.ttest_1samp(barely["C"], 0.0).pvalue < 0.05 and v.verdict == "inconclusive", v.summary()

    lone = {**changes, "D": [0.3]}  # an arm with one run has no test: nothing can be said of every arm
    [v] = decide([claim], [evidence(claim, frame(lone), [], {**settings, "D": {}})])
    assert v.verdict == "inconclusive" and v.reason == "no test" and "arm D" in v.note, v.summary()


def test_since_with_arm_claims_only_the_arms_it_picks():
    """`since` with `arm`: the arms whose settings match (null also picks an arm that leaves the setting out, as a
    random-reward arm's task does not), each against its own start; the others are not read."""
    from harness.config.claims import check_claims, claim_arms

    claim = _claim(contrast={"since": "first-10", "arm": {"task.random_reward": None}}, metric="train/reward_mean")
    settings = {"T1": {"x": 1}, "T2": {"x": 2}, "R": {"x": 1, "task.random_reward": 0.5}}
    assert claim_arms(claim, settings) == {"T1", "T2"}
    assert claim.contrast.describe() == "change since first-10, in each arm with task.random_reward=None"
    rows = [(f"{a}{i}", a, i, v) for a, vs in {"T1": [0.1, 0.12, 0.11], "T2": [0.2, 0.22, 0.19],
            "R": [-0.5, -0.4, -0.6]}.items() for i, v in enumerate(vs)]  # fmt: skip
    e = evidence(claim, pd.DataFrame(rows, columns=["run_id", "arm", "seed", "value"]), [], settings)
    assert sorted(a.arm for a in e.per_arm) == ["T1", "T2"]  # R's fall is not this claim's
    [v] = decide([claim], [e])
    assert v.verdict == "reproduced", v.summary()
    typo = _claim(contrast={"since": "first-10", "arm": {"task.random_rewrd": None}})
    with pytest.raises(ConfigError, match="task.random_rewrd is no setting of this sweep's arms"):
        check_claims([typo], settings, {}, "f.yaml")


def test_since_reads_each_runs_change_from_a_real_store(tmp_path, capsys):
    """Through MLflow: reward curves whose last-2 minus first-2 is known, and a FAILED run of arm B that counts at
    the worst change (failed: worst)."""
    uri = f"sqlite:///{tmp_path}/m.db"
    rises = {0: [0.40, 0.42, 0.50, 0.58, 0.60], 1: [0.30, 0.34, 0.45, 0.52, 0.50], 2: [0.45, 0.45, 0.50, 0.65, 0.61]}
    runs = [FakeRun("A", seed, values={"train/reward_mean": curve}) for seed, curve in rises.items()]
    later = {seed: [*c[:3], *(y + 0.02 * seed for y in c[3:])] for seed, c in rises.items()}  # B: A's, later higher
    runs += [FakeRun("B", seed, values={"train/reward_mean": curve}) for seed, curve in later.items()]
    runs.append(FakeRun("B", 3, status="FAILED", values={"train/reward_mean": [0.4]}))
    claim = {
        "id": "learns",
        "statement": "Training raises reward in every arm.",
        "metric": "train/reward_mean",
        "at": "last-2",
        "contrast": {"since": "first-2"},
        "direction": "increase",
        "failed": "worst",
    }
    write_sweep(uri, runs, name="learn", sweep_id="learn", experiment="learn",
                spec={"name": "learn", "seeds": [0, 1, 2, 3], "claims": [claim]})  # fmt: skip
    assert main(["claims", "learn", "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    change_a = [np.mean(c[-2:]) - np.mean(c[:2]) for c in rises.values()]  # 0.18, 0.165, 0.18
    change_b = [a + 0.02 * seed for seed, a in enumerate(change_a)]
    worst = min(change_a + change_b)  # the failed run of B counts at the lowest change seen
    p_b = sps.ttest_1samp(change_b + [worst], 0.0).pvalue
    p_a = sps.ttest_1samp(change_a, 0.0).pvalue
    line = next(x for x in out.splitlines() if x.startswith("learns:"))
    assert "REPRODUCED" in line and ("3/4 runs in 2 arms" in line or "4/3 runs in 2 arms" in line), line
    assert f"p = {max(p_a, p_b):.3g}" in line and "failed runs 1 vs 0" in line, line


def test_repeated_claim_ids_are_refused(tmp_path, capsys):
    import yaml

    spec = yaml.safe_load((ROOT / "ablations" / "dr_grpo_bias.yaml").read_text())
    spec["base"] = str(ROOT / "ablations" / "toy_run.yaml")
    spec["claims"] = [spec["claims"][0], spec["claims"][0]]
    path = tmp_path / "dup.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["sweep", str(path), "--dry-run"]) == 2
    assert "claim ids repeat" in capsys.readouterr().err


# ---- the false-reproduction rate -------------------------------------------------------------------------------


@pytest.mark.slow
def test_null_sweeps_reproduce_at_most_alpha():
    """200 sweeps of a 2×2 grid × 5 seeds with no effect anywhere, each judged on a main-effect claim and an
    arm-vs-arm claim (Holm across the two): the share of sweeps with any claim reproduced stays within α plus
    three Monte-Carlo standard errors."""
    rng, alpha, n_sweeps = np.random.default_rng(2026), 0.05, 200
    claims = [
        _claim(id="effect", contrast={"effect": "a", "from": "x", "to": "y"}),
        _claim(id="arm", contrast={"arm": "a=y b=u", "vs": "a=x b=u"}),
    ]
    settings = {f"a={a} b={b}": {"a": a, "b": b} for a in "xy" for b in "uv"}
    hits = 0
    for _ in range(n_sweeps):
        values = pd.DataFrame(
            [
                {"run_id": f"{arm}-{s}", "arm": arm, "seed": s, **st, "value": rng.normal()}
                for arm, st in settings.items()
                for s in range(5)
            ]
        )
        found = [evidence(c, values, ["a", "b"], settings, alpha) for c in claims]
        hits += any(v.verdict == "reproduced" for v in decide(claims, found, alpha=alpha))
    bound = alpha + 3 * np.sqrt(alpha * (1 - alpha) / n_sweeps)
    assert hits / n_sweeps <= bound, (hits, bound)


def test_claims_of_one_question_from_two_papers_show_side_by_side():
    """`question` groups claims about the same switch: shown together (in file order) only when two sources answer
    it; the verdicts are the ones of the whole file (Holm across every claim)."""
    from harness.analysis.verdict_table import competing_rows

    q = "What does clipping do to entropy?"
    claims = [
        _claim(id="dapo", paper="2503.14476", question=q, quote="x", where="y"),
        _claim(id="park", paper="2509.26114", question=q, quote="x", where="y", contrast={"arm": "C", "vs": "B"}),
        _claim(id="alone", paper="2503.14476", question="Another?", quote="x", where="y"),
        _claim(id="plain", paper="2503.14476", quote="x", where="y"),
    ]
    values = pd.DataFrame(
        [(f"{a}{i}", a, i, v) for a, vs in {"A": [1.0, 1.1, 0.9, 1.05], "B": [0.0, 0.1, -0.1, 0.05],
         "C": [-1.0, -1.1, -0.9, -1.05]}.items() for i, v in enumerate(vs)],
        columns=["run_id", "arm", "seed", "value"],
    )  # fmt: skip
    settings = {a: {} for a in "ABC"}
    verdicts = decide(claims, [evidence(c, values, [], settings) for c in claims])
    rows = competing_rows(verdicts)
    assert [(r["question"], r["claim"], r["paper"]) for r in rows] == [
        (q, "dapo", "arXiv 2503.14476"),
        (q, "park", "arXiv 2509.26114"),
    ]
    assert rows[0]["verdict"] == "reproduced" and rows[1]["verdict"] == "contradicted"
    assert rows[0]["p (Holm)"] == ("< 0.001" if verdicts[0].p_holm < 0.001 else f"{verdicts[0].p_holm:.3g}")
    assert competing_rows([v for v in verdicts if v.claim.id != "park"]) == []  # one source: nothing to compare


def test_harness_claims_and_the_report_show_the_competing_claims(tmp_path, capsys):
    """Through MLflow: two papers' claims on one question, printed by `harness claims` under its own table and in
    the report's Markdown as "Competing claims"."""
    uri = f"sqlite:///{tmp_path}/m.db"
    curves = {"A": [0.30, 0.31, 0.29], "B": [0.20, 0.21, 0.19], "C": [0.10, 0.12, 0.11]}
    runs = [FakeRun(a, s, values={"policy/entropy": [v, v]}) for a, vs in curves.items() for s, v in enumerate(vs)]
    q = "What does clipping do to entropy?"
    base = {"metric": "policy/entropy", "direction": "increase", "question": q, "quote": "q", "where": "w"}
    claims = [
        {**base, "id": "dapo", "statement": "A above B.", "paper": "2503.14476", "contrast": {"arm": "A", "vs": "B"}},
        {**base, "id": "park", "statement": "C above B.", "paper": "2509.26114", "contrast": {"arm": "C", "vs": "B"}},
    ]
    write_sweep(uri, runs, name="ent", sweep_id="ent", experiment="ent",
                spec={"name": "ent", "seeds": [0, 1, 2], "claims": claims})  # fmt: skip
    main(["claims", "ent", "--tracking-uri", uri])
    out = capsys.readouterr().out
    block = out[out.index("Competing claims") :]
    assert q in block and block.index("dapo") < block.index("park"), block
    assert "reproduced" in block and "contradicted" in block
    assert main(["report", "ent", "--tracking-uri", uri, "--out", str(tmp_path / "r"), "--format", "md"]) == 0
    md = (tmp_path / "r" / "report.md").read_text()
    section = md[md.index("## Competing claims") :]
    assert f"| {q} | arXiv 2503.14476 | dapo |" in section and "| arXiv 2509.26114 | park |" in section


def test_a_preset_in_an_arm_reference_picks_that_presets_arms(tmp_path):
    """`{objective.preset: grpo}` is how a sweep file writes the preset; the resolved settings (and the logged params)
    hold it as objective_preset: a reference by preset picks the arms started from it, at planning and in the
    analysis alike."""
    import yaml

    from harness.config.claims import claim_arms
    from harness.config.plan import arm_settings, plan_sweep

    claim = {
        "id": "c",
        "statement": "s.",
        "metric": "train/reward_mean",
        "direction": "increase",
        "contrast": {"since": "first-10", "arm": {"objective.preset": "grpo"}},
    }
    spec = {"name": "p", "base": str(ROOT / "ablations" / "toy_run.yaml"), "seeds": [0, 1],
            "grid": {"objective.preset": ["grpo", "dr_grpo"]}, "claims": [claim]}  # fmt: skip
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(spec))
    plan = plan_sweep(path)
    arms = arm_settings(plan.jobs)
    (picked,) = claim_arms(plan.settings.claims[0], arms)
    assert arms[picked]["objective_preset"] == "grpo"
