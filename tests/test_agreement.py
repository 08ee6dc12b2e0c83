"""The agreement of one claim's effect across two sets of runs, against hand-computed numbers."""

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from harness.analysis.agreement import compare, compare_all
from harness.analysis.evidence import Evidence
from report.agreement import main


def _ev(effect, se, df, half):
    return Evidence(pd.DataFrame(), effect=effect, low=effect - half, high=effect + half, se=se, df=df)


def test_difference_by_hand():
    # se = hypot(3, 4) = 5; df = 5^4 / (3^4/8 + 4^4/8) = 625 / 42.125 = 14.837; t = 10/5 = 2
    g = compare("c", _ev(12.0, 3.0, 8.0, 6.9), _ev(2.0, 4.0, 8.0, 9.2))
    assert g.difference == 10.0
    assert g.p == pytest.approx(0.06415, abs=2e-4)  # scipy: 2 * t.sf(2, 14.837)
    assert (g.high - g.low) / 2 == pytest.approx(2.1335 * 5, abs=2e-3)  # t.ppf(0.975, 14.837) = 2.1335
    assert not g.each_inside  # 12 lies outside [2 - 9.2, 2 + 9.2]
    assert g.overlap


def test_each_inside_and_no_test_without_se():
    g = compare("c", _ev(1.0, 1.0, 4.0, 3.0), _ev(2.0, 1.0, 4.0, 3.0))
    assert g.each_inside and g.p > 0.4
    nan = compare("c", _ev(1.0, math.nan, math.nan, 1.0), _ev(2.0, 1.0, 4.0, 3.0))
    assert math.isnan(nan.p) and math.isnan(nan.low)


def test_holm_across_claims_skips_untested():
    pairs = [
        ("a", _ev(10.0, 1.0, 30.0, 2.0), _ev(0.0, 1.0, 30.0, 2.0)),  # t = 7.07: p ~ 1e-8
        ("b", _ev(1.0, 1.0, 30.0, 2.0), _ev(0.0, 1.0, 30.0, 2.0)),  # t = 0.707: p = 0.485
        ("c", _ev(1.0, math.nan, math.nan, 1.0), _ev(0.0, 1.0, 30.0, 2.0)),
    ]
    a, b, c = compare_all([(*pair, 5.0) for pair in pairs])
    assert a.p_holm == pytest.approx(2 * a.p)
    assert b.p_holm == pytest.approx(b.p)  # the larger of two: times 1
    assert math.isnan(c.p_holm)


def test_missing_store_is_one_line(tmp_path, capsys):
    empty = f"sqlite:///{tmp_path}/none.db"
    with pytest.raises(SystemExit) as exit_:
        main(["ablations/dr_grpo_bias.yaml", "--tracking-uri", empty, "--against", empty])
    assert exit_.value.code == 3
    assert "no sweep 'dr_grpo_bias'" in capsys.readouterr().err.splitlines()[-1]


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        '{"claims": [{"claim": "a"}]}',
        "[1, 2]",
        '{"claims": [{"claim": "a", "yours": {"effect": "x"}}]}',
        '{"sweep": "dr_grpo_bias", "claims": [{"claim": "a", "yours": {"effect": NaN, "low": NaN, "high": NaN, '
        '"se": NaN, "df": NaN}}]}',  # Python's json reads a bare NaN; no JSON has one
    ],
)
def test_bad_reference_is_one_line_before_any_store(tmp_path, capsys, text):
    bad = tmp_path / "ref.json"
    bad.write_text(text)
    with pytest.raises(SystemExit) as exit_:
        main(["ablations/dr_grpo_bias.yaml", "--tracking-uri", f"sqlite:///{tmp_path}/none.db", "--against", str(bad)])
    assert exit_.value.code == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a report.agreement JSON" in err
    assert not (tmp_path / "none.db").exists()  # refused before any store was opened


def test_written_json_reads_back_as_the_reference(tmp_path):
    from report.agreement import _record, _reference

    g = compare("c", _ev(12.0, 3.0, 8.0, 6.9), _ev(2.0, 4.0, 8.0, 9.2))
    path = tmp_path / "ref.json"
    path.write_text(json.dumps({"sweep": "s", "machines": ["20 runs on X"], "claims": [_record(g)]}))
    found, machines, sweep = _reference(path)
    assert machines == ["20 runs on X"] and sweep == "s"
    back = found["c"]
    assert (back.effect, back.low, back.high, back.se, back.df) == (12.0, 12.0 - 6.9, 12.0 + 6.9, 3.0, 8.0)


def test_a_sweep_file_that_is_not_there_is_one_line_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path / "none.yaml"), "--against", f"sqlite:///{tmp_path / 'x.db'}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"report.agreement: config error: {tmp_path / 'none.yaml'}: no such sweep file"], err


def test_a_side_without_an_estimate_or_a_spread_is_not_compared_and_left_out_of_holm():
    """What cannot be tested says so: a claim missing from a side, a side whose runs are all the same, one seed."""
    good = _ev(1.0, 1.0, 4.0, 3.0)
    missing = Evidence(pd.DataFrame(), note="not in the reference")
    flat = _ev(0.30, 0.0, 4.0, 0.0)  # every run the same
    cases = [("m", good, missing), ("f", flat, good), ("one", good, _ev(0.0, math.nan, math.nan, 0.0))]
    found = compare_all(
        [(*case, 1.0) for case in [*cases, ("ok", _ev(10.0, 1.0, 30.0, 2.0), _ev(0.0, 1.0, 30.0, 2.0))]]
    )
    assert [g.not_compared for g in found] == [
        "no estimate on theirs (not in the reference)",
        "no spread on yours (one seed, or every run the same)",
        "no spread on theirs (one seed, or every run the same)",
        "",
    ]
    assert all(math.isnan(g.p_holm) for g in found[:3]) and found[3].p_holm == pytest.approx(found[3].p)


def test_the_written_json_is_valid_json_and_a_not_compared_claim_reads_back_as_not_compared(tmp_path):
    from report.agreement import _record, _reference

    g = compare("c", _ev(1.0, math.nan, math.nan, 1.0), _ev(2.0, 1.0, 4.0, 3.0))
    text = json.dumps({"sweep": "s", "claims": [_record(g)]}, allow_nan=False)  # raises on a bare NaN
    assert "NaN" not in text and json.loads(text)["claims"][0]["p"] is None
    path = tmp_path / "ref.json"
    path.write_text(text)
    back = _reference(path)[0]["c"]
    assert back.effect == 1.0 and math.isnan(back.se)
    assert compare("c", _ev(1.0, 1.0, 4.0, 3.0), back).not_compared.startswith("no spread on theirs")


@pytest.mark.parametrize(
    ("its_sweep", "its_claims", "message"),
    [
        ("gspo_length", {"a"}, "a reference of sweep 'gspo_length', not of 'dr_grpo_bias'"),
        ("dr_grpo_bias", {"a", "z", "y"}, "claims the sweep file does not declare: y, z"),
    ],
)
def test_a_reference_of_another_sweep_or_other_claims_is_refused_in_one_line(its_sweep, its_claims, message):
    from harness.config.errors import DataError
    from report.agreement import _check_reference

    with pytest.raises(DataError) as refused:
        _check_reference(Path("ref.json"), its_sweep, its_claims, "dr_grpo_bias", ["a", "b"])
    assert str(refused.value) == f"ref.json: --against: {message}"
    _check_reference(Path("ref.json"), "dr_grpo_bias", {"a"}, "dr_grpo_bias", ["a", "b"])  # b: not compared


@pytest.mark.parametrize("against", ["huge.json", "notes.txt", "results"])
def test_a_huge_reference_or_a_path_that_is_no_store_is_one_line_before_any_store(tmp_path, capsys, against):
    from report.agreement import REFERENCE_MAX_BYTES

    (tmp_path / "huge.json").write_text("[" + " " * REFERENCE_MAX_BYTES + "]")
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "results").mkdir()
    with pytest.raises(SystemExit) as exit_:
        main(["ablations/dr_grpo_bias.yaml", "--tracking-uri", f"sqlite:///{tmp_path}/none.db", "--against",
              str(tmp_path / against)])  # fmt: skip
    assert exit_.value.code == 3
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert (
        "a reference holds a record a claim" in err
        if against == "huge.json"
        else "neither an evidence file or report.agreement JSON" in err
    ), err
    assert not (tmp_path / "none.db").exists()


def test_equivalence_by_hand():
    """TOST against ±m: d = 2, se = 1 (each side 1/√2), df = 10 (each side 5, equal halves: Welch gives 10).
    Upper test: P(t₁₀ > (m − d)/se); lower: P(t₁₀ > (d + m)/se)."""
    h = 1 / math.sqrt(2)
    a, b = _ev(2.0, h, 5.0, 1.0), _ev(0.0, h, 5.0, 1.0)
    inside = compare("c", a, b, margin=5.0)
    assert inside.p_tost == pytest.approx(0.0066718, abs=1e-6)  # t.sf(3, 10)
    assert inside.equivalence == "equivalent"
    assert (inside.low90, inside.high90) == pytest.approx((2 - 1.81246, 2 + 1.81246), abs=1e-4)  # t.ppf(0.95, 10)
    assert inside.mdd == pytest.approx(3.10720, abs=1e-4)  # t.ppf(0.975, 10) + t.ppf(0.8, 10)
    assert compare("c", a, b, margin=3.0).p_tost == pytest.approx(0.170447, abs=1e-5)  # t.sf(1, 10)
    assert compare("c", a, b, margin=3.0).equivalence == "undetermined"  # 95 % CI [-0.23, 4.23] reaches past 3
    far = compare("c", _ev(9.0, h, 5.0, 1.0), b, margin=3.0)  # 95 % CI [6.8, 11.2]: wholly beyond 3
    assert far.equivalence == "different"
    assert compare("c", a, b).equivalence == "" and math.isnan(compare("c", a, b).p_tost)  # no margin stated


def test_the_published_pair_is_judged_from_its_evidence_files(tmp_path, capsys):
    """The main job on the pinned AVX2 path against torch's own AVX512 path, both kept in docs/evidence/: matched run
    by run and claim by claim with no store (the README's sentence on the two paths is this output)."""
    ROOT = Path(__file__).resolve().parents[1]
    out = tmp_path / "agreement.json"
    with pytest.raises(SystemExit) as exit_:
        main([str(ROOT / "ablations" / "dr_grpo_bias.yaml"), "--yours", str(ROOT / "docs/evidence/dr_grpo_bias.json"),
              "--against", str(ROOT / "docs/evidence/dr_grpo_bias-avx512.json"), "--out", str(out)])  # fmt: skip
    printed = capsys.readouterr().out
    written = json.loads(out.read_text())
    assert written["identity"]["matched"] == 20 and "bit-identical:" in printed
    claims = {c["claim"]: c for c in written["claims"]}
    assert written["identity"]["identical"] == 0  # two CPU paths: every run's numbers part at some step
    arms = [c for c in claims if c.startswith("training_improves_accuracy · ")]
    assert len(arms) == 4  # the health claim, arm by arm
    length = claims["incorrect_length"]
    assert (length["difference"], length["low90"], length["high90"]) == pytest.approx((-2.42, -6.12, 1.28), abs=0.01)
    assert length["equivalence"] == "undetermined" and claims["accuracy_maintained"]["equivalence"] == "equivalent"
    assert exit_.value.code == 0 and not list(tmp_path.glob("*.db"))


# ---- evidence files: run by run, then claim by claim -----------------------------------------------------------

HEALTH = {
    "id": "health",
    "statement": "Accuracy rises in every arm.",
    "metric": "train/accuracy",
    "contrast": {"since": "first-1"},
    "direction": "increase",
    "min_effect": 0.5,
    "at": "final",
}


@pytest.fixture(scope="module")
def kept(tmp_path_factory) -> Path:
    """The planted sweep of test_claims, with an every-arm claim, as an evidence file."""
    from test_claims import PLANTED, _planted

    from harness.cli import main as harness

    where = tmp_path_factory.mktemp("kept")
    uri = f"sqlite:///{where}/m.db"
    _planted(uri, [*PLANTED, HEALTH])
    assert harness(["evidence", "planted", "--tracking-uri", uri, "--out", str(where / "yours.json")]) == 0
    written = json.loads((where / "yours.json").read_text())
    rises = {"A": [0.9, 1.1, 1.0, 0.8, 1.2], "B": [0.5, 0.7, 0.6, 0.4, 0.8]}  # each run's change since its start
    for run in written["runs"]:
        run["values"]["train/accuracy @ final"] = (
            run["values"]["train/accuracy @ first-1"] + rises[run["arm"]][run["seed"]]
        )
    (where / "yours.json").write_text(json.dumps(written))
    return where / "yours.json"


def _compare(yours: Path, theirs: dict, tmp_path: Path, capsys) -> tuple[int, str, dict]:
    (tmp_path / "theirs.json").write_text(json.dumps(theirs))
    out = tmp_path / "agreement.json"
    with pytest.raises(SystemExit) as exit_:
        main(["planted", "--yours", str(yours), "--against", str(tmp_path / "theirs.json"), "--out", str(out)])
    written = json.loads(out.read_text()) if out.exists() else {}
    printed = capsys.readouterr()
    return exit_.value.code, printed.out + printed.err, written


def test_the_same_runs_are_bit_identical_and_equivalent(kept, tmp_path, capsys):
    code, out, written = _compare(kept, json.loads(kept.read_text()), tmp_path, capsys)
    assert "bit-identical: 10 of 10 runs (matched by job id and seed)" in out
    assert written["identity"]["identical"] == 10 and code == 0, out
    claims = {c["claim"]: c for c in written["claims"]}
    assert set(claims) >= {"health · A", "health · B"}  # the every-arm claim, arm by arm
    assert claims["health · A"]["difference"] == 0 and claims["health · A"]["equivalence"] == "equivalent"


def test_another_cpu_vendor_is_said_to_carry_no_promise_of_the_same_bits(kept, tmp_path, capsys):
    """Runs on an Intel CPU against runs on an AMD one (the same pin, torch and base model): compared run by run
    all the same, but the output says the pinned path promises no bitwise match there, and why."""
    yours = json.loads(kept.read_text())
    machine = {"cpu_model": "AMD EPYC", "cpu_capability": "AVX2", "torch_version": "2.13.0+cpu", "threads": 1,
               "base_model_sha256": "ab" * 32}  # fmt: skip
    theirs = json.loads(json.dumps(yours))
    for run in yours["runs"]:
        run["machine"] = machine
    for run in theirs["runs"]:
        run["machine"] = {**machine, "cpu_model": "Intel(R) Xeon(R) CPU @ 2.50GHz", "cpu_vendor": "GenuineIntel"}
    (tmp_path / "yours.json").write_text(json.dumps(yours))
    code, out, written = _compare(tmp_path / "yours.json", theirs, tmp_path, capsys)
    assert "bit-identity is not promised here (CPU vendor AuthenticAMD vs GenuineIntel)" in out
    assert written["bitwise_promised"] is False and "GenuineIntel" in written["why_not_bitwise"]
    code, out, written = _compare(tmp_path / "yours.json", yours, tmp_path, capsys)
    assert "bit-identity is promised here" in out and written["bitwise_promised"] is True


def test_a_run_that_differs_is_named_at_its_first_differing_value(kept, tmp_path, capsys):
    theirs = json.loads(kept.read_text())
    run = next(r for r in theirs["runs"] if r["arm"] == "B" and r["seed"] == 3)
    run["values"]["policy/entropy @ auc"] += 1e-12
    code, out, written = _compare(kept, theirs, tmp_path, capsys)
    assert "bit-identical: 9 of 10 runs" in out
    assert "first difference: B · seed 3 (job B-3): policy/entropy @ auc" in out
    assert len(written["identity"]["differences"]) == 1


def test_another_weakest_arm_is_compared_arm_by_arm(kept, tmp_path, capsys):
    """Their arm A rises 0.5 less, their B as ours: the weakest arm is B on both sides (the claim's effect is
    unchanged), but arm A's difference is there to see."""
    theirs = json.loads(kept.read_text())
    for run in theirs["runs"]:
        if run["arm"] == "A":
            run["values"]["train/accuracy @ final"] -= 0.45
    code, out, written = _compare(kept, theirs, tmp_path, capsys)
    claims = {c["claim"]: c for c in written["claims"]}
    assert claims["health · A"]["difference"] == pytest.approx(0.45) and claims["health · A"]["p"] < 0.01
    assert claims["health · B"]["difference"] == 0 and code == 1


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.update(sweep="other"), "a reference of sweep 'other', not of 'planted'"),
        (lambda t: [r.update(seed=r["seed"] + 100) for r in t["runs"]], "other seeds (100–104 against yours 0–4)"),
        (lambda t: t["claims"].append({**HEALTH, "id": "extra"}), "claims the sweep file does not declare: extra"),
    ],
)
def test_other_sweeps_seeds_or_claims_are_refused_in_one_line(kept, tmp_path, capsys, edit, message):
    theirs = json.loads(kept.read_text())
    edit(theirs)
    code, out, _ = _compare(kept, theirs, tmp_path, capsys)
    assert code == 3 and message in out and len(out.strip().splitlines()) == 1, out


def test_a_claim_their_file_has_no_values_for_is_not_compared(kept, tmp_path, capsys):
    theirs = json.loads(kept.read_text())
    for run in theirs["runs"]:
        run["values"].pop("train/accuracy @ final", None)
    code, out, written = _compare(kept, theirs, tmp_path, capsys)
    claims = {c["claim"]: c for c in written["claims"]}
    assert claims["accuracy"]["not_compared"].startswith("no estimate on theirs") and code == 1
    assert "not compared: accuracy" in out
