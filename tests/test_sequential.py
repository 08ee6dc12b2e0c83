"""The sequential procedure (harness.analysis.sequential): boundaries against published values, and its error
rates by simulation on synthetic arms drawn from known distributions, through the same decision code a
`--until-decided` sweep uses (claims.evidence → sequential.observe → sequential.decide)."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sp
from statsmodels.stats.power import TTestIndPower

from harness.analysis import sequential as seq
from harness.analysis import stats
from harness.analysis.claims import evidence
from harness.analysis.evidence import Evidence
from harness.config.claims import Claim

ALPHA = 0.05


def _claim(cid: str = "c", min_effect: float | None = 1.0, **kw) -> Claim:
    return Claim.model_validate(
        {
            "id": cid,
            "statement": "arm A beats arm B",
            "paper": "2503.20783",
            "metric": "train/reward_mean",
            "contrast": {"arm": f"{cid}-A", "vs": f"{cid}-B"},
            "direction": "increase",
            "min_effect": min_effect,
            **kw,
        }
    )


def test_boundaries_match_the_published_lan_demets_obrien_fleming_values():
    # ldbounds / gsDesign (two-sided symmetric, α = 0.05, sfLDOF per side), four equally spaced looks
    got = seq.boundaries((0.25, 0.5, 0.75, 1.0), ALPHA)
    assert got == pytest.approx((4.3326, 2.9631, 2.3590, 2.0141), abs=2e-4)
    assert seq.boundaries((1.0,), ALPHA)[0] == pytest.approx(sp.norm.isf(ALPHA / 2), abs=1e-9)
    assert seq.obf_spent(1.0, ALPHA) == pytest.approx(ALPHA)
    spent = [seq.obf_spent(t, ALPHA) for t in np.linspace(0.05, 1, 20)]
    assert np.all(np.diff(spent) > 0)


def test_boundaries_spend_alpha_on_an_uneven_schedule():
    """The crossing probability of the boundaries, by simulating the null Brownian motion directly."""
    looks = (3, 5, 7, 9, 12, 15, 20)
    t = np.array(looks, float) / 20
    c = np.array(seq.boundaries(tuple(t), ALPHA))
    rng = np.random.default_rng(7)
    s = np.cumsum(rng.standard_normal((200_000, t.size)) * np.sqrt(np.diff(t, prepend=0.0)), axis=1)
    crossed = np.abs(s / np.sqrt(t)) >= c
    assert crossed.any(axis=1).mean() == pytest.approx(ALPHA, abs=0.0025)  # MC SE ≈ 0.0005
    first = np.where(crossed.any(axis=1), crossed.argmax(axis=1), -1)
    by_look = np.bincount(first[first >= 0], minlength=t.size) / first.size
    wanted = np.diff([seq.obf_spent(x, ALPHA) for x in t], prepend=0.0)
    assert by_look == pytest.approx(wanted, abs=0.0015)


def test_t_statistics_map_to_the_normal_scale_by_their_p_value():
    for t, df in ((2.5, 3.0), (-4.0, 7.5), (0.3, 30.0)):
        z = seq.z_of_t(t, df)
        assert math.copysign(1, z) == math.copysign(1, t)
        assert sp.norm.sf(abs(z)) == pytest.approx(sp.t.sf(abs(t), df), rel=1e-9)
        assert seq.t_of_z(abs(z), df) == pytest.approx(abs(t), rel=1e-6)


def _experiment(
    claims: list[Claim], effects: list[float], design: seq.Design, rng: np.random.Generator
) -> list[seq.Track]:
    """One sequential experiment on synthetic arms: per claim, arm A ~ N(effect, 1) and arm B ~ N(0, 1); each
    look adds `batch` seeds to the arms of claims still open. The statistic is the one `claims.evidence` takes
    for an arm-vs-arm claim (`stats.contrast`, Welch), without the data frame around it."""
    m = design.max_seeds
    draws = {c.id: (rng.normal(e, 1.0, m), rng.normal(0.0, 1.0, m)) for c, e in zip(claims, effects)}
    tracks = [seq.Track(c.id) for c in claims]
    schedule = design.schedule()
    for look, n in enumerate(schedule, 1):
        for claim, track in zip(claims, tracks):
            if track.open:
                a, b = draws[claim.id]
                ev = stats.contrast(a[:n], b[:n], fold=claim.contrast.fold, null=claim.threshold, alpha=ALPHA)
                seq.observe(track, look, _ev(ev["effect"], ev["se"], ev["df"], n), design, claim.threshold)
        seq.decide(claims, tracks, design, final=look == len(schedule))
        if not any(t.open for t in tracks):
            break
    return tracks


def _ev(effect: float, se: float, df: float, seeds: int) -> Evidence:
    return Evidence(pd.DataFrame(), effect=effect, se=se, df=df, seeds=seeds)


def test_the_simulated_statistic_is_the_claims_evidence():
    """What the simulations feed the decision is what a sweep's claim gets from its runs' values."""
    rng = np.random.default_rng(3)
    a, b = rng.normal(0.5, 1, 6), rng.normal(0, 1, 6)
    values = pd.DataFrame(
        {"run_id": [f"r{i}" for i in range(12)], "arm": ["c-A"] * 6 + ["c-B"] * 6, "seed": [*range(6)] * 2,
         "value": np.concatenate([a, b])}
    )  # fmt: skip
    claim = _claim()
    ev = evidence(claim, values, [], {"c-A": {}, "c-B": {}}, ALPHA)
    direct = stats.contrast(a, b, null=claim.threshold, alpha=ALPHA)
    assert ev.seeds == 6
    assert all(getattr(ev, k) == pytest.approx(direct[k]) for k in ("effect", "se", "df", "p"))


@pytest.mark.slow
def test_under_the_null_the_procedure_reproduces_or_contradicts_at_most_alpha():
    design = seq.Design(first=3, batch=2, max_seeds=15, alpha=ALPHA)
    rng = np.random.default_rng(2026)
    claim = _claim()
    n = 500
    decided = sum(_experiment([claim], [0.0], design, rng)[0].verdict != "inconclusive" for _ in range(n))
    mc = 3 * math.sqrt(ALPHA * (1 - ALPHA) / n)
    print(f"\n{decided}/{n} null experiments reproduced or contradicted (bar {ALPHA + mc:.3f})")
    assert decided / n <= ALPHA + mc, f"{decided}/{n} null experiments ended reproduced or contradicted"


def test_holm_across_claims_keeps_the_familywise_error():
    design = seq.Design(first=3, batch=3, max_seeds=12, alpha=ALPHA)
    rng = np.random.default_rng(11)
    claims = [_claim("x"), _claim("y")]
    n = 300
    any_decided = sum(
        any(t.verdict != "inconclusive" for t in _experiment(claims, [0.0, 0.0], design, rng)) for _ in range(n)
    )
    assert any_decided / n <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / n)


@pytest.mark.slow
def test_at_the_smallest_effect_of_interest_it_needs_fewer_seeds_than_a_fixed_design_of_equal_power():
    design = seq.Design(first=4, batch=2, max_seeds=24, alpha=ALPHA)
    rng = np.random.default_rng(5)
    claim = _claim(min_effect=1.0)
    tracks = [_experiment([claim], [1.0], design, rng)[0] for _ in range(300)]
    power = np.mean([t.verdict == "reproduced" for t in tracks])
    seeds_used = np.mean([t.looks[-1].seeds for t in tracks])
    fixed = math.ceil(TTestIndPower().solve_power(effect_size=1.0, alpha=ALPHA, power=power, alternative="two-sided"))
    assert power >= 0.8
    assert seeds_used < fixed, f"sequential: {seeds_used:.1f} seeds on average at power {power:.2f}; fixed: {fixed}"
    print(f"\nsequential {seeds_used:.1f} seeds/arm on average at power {power:.2f}; fixed design {fixed}")


def test_holm_passes_a_decided_claims_level_to_the_others():
    """x crosses at α/2; y's |z| lies between its boundary at α/2 and at α, so y is reproduced only because x
    was (and would not be on its own at α/2)."""
    design = seq.Design(first=10, batch=1, max_seeds=10, alpha=ALPHA)
    claims = [_claim("x"), _claim("y")]
    c_half, c_full = seq.boundaries((1.0,), ALPHA / 2)[0], seq.boundaries((1.0,), ALPHA)[0]
    z_y = (c_half + c_full) / 2
    tracks = [seq.Track("x"), seq.Track("y")]
    for track, z in zip(tracks, (5.0, z_y)):
        t = seq.t_of_z(z, 1e6)
        seq.observe(track, 1, _ev(t, 1.0, 1e6, 10), design, 0.0)
    seq.decide(claims, tracks, design, final=True)
    assert [t.verdict for t in tracks] == ["reproduced", "reproduced"]
    alone = [seq.Track("x"), seq.Track("y")]
    for track, z in zip(alone, (0.1, z_y)):
        seq.observe(track, 1, _ev(seq.t_of_z(z, 1e6), 1.0, 1e6, 10), design, 0.0)
    seq.decide(claims, alone, design, final=True)
    assert [(t.verdict, t.stop) for t in alone] == [("inconclusive", "budget"), ("inconclusive", "budget")]


def test_a_small_effect_stops_when_the_repeated_ci_lies_within_the_smallest_effect_of_interest():
    design = seq.Design(first=10, batch=10, max_seeds=40, alpha=ALPHA)
    claim = _claim(min_effect=1.0)
    track = seq.Track("c")
    seq.observe(track, 1, _ev(0.02, 0.1, 18.0, 10), design, 0.0)
    seq.decide([claim], [track], design, final=False)
    lk = track.looks[-1]
    assert (track.verdict, track.stop, track.stopped_at) == ("inconclusive", "small effect", 1)
    assert -1.0 <= lk.low < 0.02 < lk.high <= 1.0
    wide = seq.Track("c")
    seq.observe(wide, 1, _ev(0.02, 0.5, 18.0, 10), design, 0.0)
    seq.decide([claim], [wide], design, final=False)
    assert wide.open


def test_a_crossing_inside_the_band_or_short_of_clearing_it_decides_nothing():
    """As the fixed design (claims.decide): a significant effect whose repeated CI lies within threshold ±
    min_effect stops as a small effect, not reproduced; one on the wrong side that does not clear the threshold
    by min_effect is not contradicted; one that clears it is."""
    design = seq.Design(first=10, batch=10, max_seeds=10, alpha=ALPHA)
    claim = _claim(min_effect=1.0)
    outcomes = []
    for effect in (0.5, -0.5, -1.05, -1.5, 3.0):
        track = seq.Track("c")
        seq.observe(track, 1, _ev(effect, 0.1, 1e6, 10), design, 0.0)
        seq.decide([claim], [track], design, final=True)
        outcomes.append((track.verdict, track.stop))
    assert outcomes == [
        ("inconclusive", "small effect"),
        ("inconclusive", "small effect"),
        ("inconclusive", "budget"),  # CI about [-1.25, -0.85]: significant, not clear of -min_effect
        ("contradicted", "efficacy"),
        ("reproduced", "efficacy"),
    ]


def test_a_look_without_new_runs_spends_nothing_and_the_record_round_trips():
    design = seq.Design(first=3, batch=2, max_seeds=7, alpha=ALPHA)
    claim = _claim(min_effect=None)
    track = seq.Track("c")
    seq.observe(track, 1, _ev(0.4, 0.5, 4.0, 3), design, 0.0)
    seq.decide([claim], [track], design, final=False)
    seq.observe(track, 2, _ev(0.4, 0.5, 4.0, 3), design, 0.0)  # every new job failed
    assert math.isnan(track.looks[-1].z) and track.fractions() == (3 / 7,)
    seq.decide([claim], [track], design, final=True)
    assert (track.verdict, track.stop) == ("inconclusive", "budget")
    record = seq.Record(design, [seq.Round(1, {"a": 3}, 2, 0, ["c"])], [track])
    back = json.loads(json.dumps(record.to_json(), allow_nan=False))  # strict JSON
    path = back["claims"][0]
    assert path["stop"] == "budget" and path["looks"][0]["z"] == pytest.approx(track.looks[0].z)
    assert path["looks"][1]["z"] is None
    again = seq.Record.from_json(back)  # NaN back where null was written
    assert again.design == design and again.rounds == record.rounds and again.track("c").stop == "budget"
    assert math.isnan(again.track("c").looks[1].z) and again.track("c").looks[0] == track.looks[0]
    assert again.track("nothing") is None


def test_planning_gives_expected_and_maximum_seeds_and_the_fixed_equivalent():
    design = seq.Design(first=4, batch=2, max_seeds=24, alpha=ALPHA)
    plan = seq.operating(design, 1.0, math.sqrt(2), ALPHA, sesoi=1.0)
    assert plan.max_seeds == 24 and 0.85 < plan.power < 0.97
    assert plan.expected_seeds < plan.fixed_seeds <= 24
    null = seq.operating(design, 0.0, math.sqrt(2), ALPHA, sesoi=1.0)
    assert null.power == pytest.approx(ALPHA, abs=0.01)


def test_only_the_arms_an_open_claim_reads_get_more_seeds():
    from harness.config.claims import claim_arms
    from harness.until_decided import more_seeds

    arms = {
        "std mean": {"objective.advantage": "group_std", "objective.aggregation": "seq_mean_token_mean"},
        "nostd mean": {"objective.advantage": "group_mean", "objective.aggregation": "seq_mean_token_mean"},
        "std const": {"objective.advantage": "group_std", "objective.aggregation": "constant"},
        "extra": {"objective.advantage": "group_std", "objective.aggregation": "token_mean"},
    }
    base = _claim().model_dump(by_alias=True)
    by_effect = {"effect": "objective.aggregation", "from": "constant", "to": "seq_mean_token_mean"}
    effect = Claim.model_validate({**base, "contrast": by_effect})
    by_arms = {"arm": "nostd mean", "vs": {"objective.advantage": "group_std"}}
    pair = Claim.model_validate({**base, "contrast": by_arms})
    assert claim_arms(effect, arms) == {"std mean", "nostd mean", "std const"}  # every cell at either level
    assert claim_arms(pair, arms) == {"nostd mean", "std mean", "std const", "extra"}
    given = dict.fromkeys(arms, 5)
    assert more_seeds(given, 7, [{"std mean", "std const"}]) == {**given, "std mean": 7, "std const": 7}
    assert more_seeds(given, 7, []) == given


def test_the_interval_beside_a_verdict_is_at_the_level_its_test_used():
    """Two claims open at the first look: each is tested at α/2, so its repeated CI is at α/2 too. A z between the
    α-level and the α/2-level boundaries leaves the claim open, and its interval then holds the threshold (at α it
    would not: the findings printed −0.009 [−0.018, −0.001] beside "inconclusive")."""
    design = seq.Design(first=3, batch=2, max_seeds=7)
    claims = [_claim("a", min_effect=None), _claim("b", min_effect=None)]
    tracks = [seq.Track("a"), seq.Track("b")]
    c_alpha = seq.boundaries((3 / 7,), 0.05)[0]
    c_half = seq.boundaries((3 / 7,), 0.025)[0]
    z = (c_alpha + c_half) / 2
    for track in tracks:
        seq.observe(track, 1, _ev(z * 0.1, 0.1, 1e6, 3), design, 0.0)  # df huge: t and z agree
    seq.decide(claims, tracks, design, final=False)
    for track in tracks:
        [lk] = track.looks
        assert track.open and lk.level == pytest.approx(0.025) and lk.boundary == pytest.approx(c_half)
        assert lk.low < 0.0 < lk.high
        assert lk.high - lk.effect == pytest.approx(c_half * 0.1, rel=1e-5)


def test_a_fixed_look_counted_first_spends_its_alpha_there():
    """A fixed test at α of the first look's seeds (`fixed_first` 1) is that look's boundary, z₀.₉₇₅, and leaves no
    α to the later looks; a fixed test at a fifth of α leaves the rest, spent as O'Brien–Fleming would."""
    looks = (3 / 7, 5 / 7, 1.0)
    c = seq.boundaries(looks, 0.05, 1.0)
    assert c[0] == pytest.approx(sp.norm.isf(0.025)) and c[1:] == (math.inf, math.inf)
    part = seq.boundaries(looks, 0.05, 0.2)
    assert part[0] == pytest.approx(sp.norm.isf(0.005)) and all(math.isfinite(x) for x in part)
    assert seq.spent(1.0, 0.05, 0.2, 3 / 7) == pytest.approx(0.05)
    plan = seq.operating(seq.Design(3, 2, 7, fixed_first=1.0), 0.0, 1.0, 0.05, draws=20000)
    assert plan.power == pytest.approx(0.05, abs=0.006)  # the null decision rate: the fixed test's, no more


def test_the_first_look_counts_as_fixed_only_when_a_fixed_sweep_ran_it(monkeypatch):
    from types import SimpleNamespace

    from harness import until_decided as ud

    jobs = [SimpleNamespace(arm=a, seed=s, job_id=f"{a}{s}") for a in "AB" for s in range(5)]
    s = SimpleNamespace(plan=SimpleNamespace(jobs=jobs, sweep_id="x", experiment="e"), seeds=(0, 1, 2, 3, 4))
    given = {"A": 3, "B": 3}
    state = {"record": None, "done": {f"{a}{i}" for a in "AB" for i in range(3)}}
    monkeypatch.setattr("harness.runs.reader.find_sweep", lambda *a: object())
    monkeypatch.setattr(seq, "stored_record", lambda found: state["record"])
    monkeypatch.setattr("harness.engine.resume.finished_job_ids", lambda *a: state["done"])
    assert ud.fixed_look(s, given, "sqlite:///x.db") == 1.0  # seeds 0-2 of both arms were run: judged already
    state["done"] = state["done"] - {"B2"}
    assert ud.fixed_look(s, given, "sqlite:///x.db") == 0.0
    state["record"] = SimpleNamespace(design=seq.Design(3, 2, 5, fixed_first=1.0))  # a resumed design keeps its own
    assert ud.fixed_look(s, given, "sqlite:///x.db") == 1.0
