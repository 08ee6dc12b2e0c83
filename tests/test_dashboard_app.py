"""Every dashboard page renders (streamlit.testing AppTest) on a real sweep store, mid-sweep, and empty."""

import os

import pytest
from streamlit.testing.v1 import AppTest

from dashboard.launch import URI_ENV

pytestmark = pytest.mark.slow  # every test drives the Streamlit app (AppTest)

APP = os.path.join(os.path.dirname(__file__), "..", "dashboard", "app.py")
PAGES = {"sweeps": 0, "length_bias": 3, "entropy_clipping": 3, "dynamic_sampling": 3, "ablation": 1, "explorer": 1}


def _app(uri: str, monkeypatch) -> AppTest:
    monkeypatch.setenv(URI_ENV, uri)
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _visit(at: AppTest, page: str) -> AppTest:
    at.switch_page(f"views/{page}.py").run()
    assert not at.exception, (page, [e.value for e in at.exception])
    return at


def test_every_page_renders_on_a_sweep_with_failed_and_running_runs(dashboard_store, monkeypatch):
    at = _app(dashboard_store, monkeypatch)
    assert at.session_state["sweep"] == "dash/dash01"
    counts = {m.label: m.value for m in at.metric}
    assert counts == {"planned": "6", "done": "4", "running": "1", "stalled": "0", "failed": "1", "never started": "0"}
    assert any("diverged at step 1" in e.value for e in at.error), [e.value for e in at.error]
    for page, charts in PAGES.items():
        _visit(at, page)
        assert len(at.get("plotly_chart")) >= charts, page


def test_controls_rerender_without_errors(dashboard_store, monkeypatch):
    at = _visit(_app(dashboard_store, monkeypatch), "length_bias")
    at.toggle(key="len_seeds").set_value(True).run()
    at.select_slider(key="len_ema").set_value(0.2).run()
    at.radio(key="len_x").set_value("tokens").run()
    assert not at.exception and len(at.get("plotly_chart")) >= 3
    _visit(at, "explorer")
    at.radio(key="ex_smooth").set_value("EMA").run()
    at.radio(key="ex_outcome").set_value("incorrect").run()
    assert not at.exception
    assert "response" in at.dataframe[-1].value.columns  # texts are logged in the fixture sweep
    _visit(at, "ablation")
    at.toggle(key="abl_done").set_value(False).run()
    assert not at.exception


def test_every_page_renders_on_an_empty_store(tmp_path, monkeypatch):
    at = _app(f"sqlite:///{tmp_path / 'none.db'}", monkeypatch)
    assert any("No runs" in i.value for i in at.info)
    for page in PAGES:
        _visit(at, page)
        assert any("No runs" in i.value for i in at.info), page
        assert not at.get("plotly_chart")


def _synthetic_cumulative_store(tmp_path) -> str:
    """A DAPO-style cumulative sweep written straight to MLflow (no training): 3 arms × 2 seeds."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment("prog")
    parent = client.create_run(exp, run_name="prog", tags={"sweep_id": "p1", "sweep_parent": "1", "n_jobs": "6"})
    arms = ["naive_grpo", "clip_higher", "token_level_loss"]
    jobs = []
    for i, arm in enumerate(arms):
        for seed in (0, 1):
            run = client.create_run(
                exp,
                run_name=f"{arm}-s{seed}",
                tags={
                    "sweep_id": "p1",
                    "arm_label": arm,
                    "seed": str(seed),
                    "job_id": f"{arm}{seed}",
                    "mlflow.parentRunId": parent.info.run_id,
                },
            )
            client.log_batch(
                run.info.run_id,
                params=[
                    Param("seed", str(seed)),
                    Param("train.steps", "4"),
                    Param("objective.clip_high", ["0.2", "0.28", "0.28"][i]),
                ],
                metrics=[Metric("train/accuracy", 0.1 * i + 0.01 * seed + 0.001 * s, 0, s) for s in range(1, 5)]
                + [
                    Metric(f"eval/math500/{k}", v + i, 0, s)
                    for s in (2, 4)
                    for k, v in (("accuracy", 0.3), ("length_correct_mean", 300.0), ("length_incorrect_mean", 500.0))
                ],
            )
            client.set_terminated(run.info.run_id)
            jobs.append({"job_id": f"{arm}{seed}", "arm": arm, "seed": seed, "varying": {}})
    client.log_dict(parent.info.run_id, {"cumulative": True, "jobs": jobs}, "jobs.json")
    client.set_terminated(parent.info.run_id)
    return uri


def test_cumulative_sweep_gets_the_progressive_table(tmp_path, monkeypatch):
    at = _visit(_app(_synthetic_cumulative_store(tmp_path), monkeypatch), "ablation")
    table = at.dataframe[0].value
    assert table["arm"].tolist() == ["naive_grpo", "clip_higher", "token_level_loss"]  # plan order, not sorted
    delta = table["Δ train/accuracy vs previous"].tolist()
    assert delta[0] == "" and delta[1] == "+0.1" and delta[2] == "+0.1"
    assert not [s for s in at.subheader if s.value == "Main effects"]  # no factorial effects for a progression


def test_evaluation_sets_get_their_own_length_figures(tmp_path, monkeypatch):
    at = _visit(_app(_synthetic_cumulative_store(tmp_path), monkeypatch), "length_bias")
    assert "Evaluation: math500" in [h.value for h in at.subheader]
    assert any("No length metrics" in w.value for w in at.warning)  # the synthetic runs log no training lengths
    assert len(at.get("plotly_chart")) == 3  # reward/accuracy, and math500's lengths and accuracy


# ---------------------------------------------------------------------------------------------
# clip-fraction axes, pandas warnings, what the reader set aside, empty cells
# ---------------------------------------------------------------------------------------------


def _fake_store(tmp_path, runs, **kw) -> str:
    from fake_sweep import write_sweep

    uri = f"sqlite:///{tmp_path / 'fake.db'}"
    write_sweep(uri, runs, **kw)
    return uri


def _figure(at: AppTest, title: str) -> dict:
    import json

    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    found = [s for s in specs if title in [a.get("text") for a in s["layout"].get("annotations", [])]]
    assert found, [[a.get("text") for a in s["layout"].get("annotations", [])] for s in specs]
    return found[0]


BETA_PANELS = {
    "reward": "adaptive β of the KL in the reward (`reward/kl_coef`)",
    "loss": "adaptive β of the KL in the loss (`policy/kl_coef`)",
}


@pytest.mark.parametrize("adaptive", ["reward", "loss"])
def test_clip_fraction_axes_fit_their_values_and_the_kl_is_drawn_where_logged(tmp_path, monkeypatch, adaptive):
    """Also the KL panels: `policy/kl` for every arm here, the KL penalty in the reward and the adaptive β (of the
    reward's KL or of the loss's) for clip_higher's only."""
    from fake_sweep import FakeRun

    from trainer import metric_names as M

    beta = {"reward": M.KL_REWARD_COEF, "loss": M.KL_COEF}[adaptive]

    def fracs(scale: float, seed: int) -> dict[str, list[float]]:
        low = [0.001 * scale * (1 + 0.1 * seed + 0.01 * s) for s in range(6)]
        high = [0.1 * scale * (1 + 0.1 * seed + 0.01 * s) for s in range(6)]
        return {
            M.CLIP_FRAC_LOW: low,
            M.CLIP_FRAC_HIGH: high,
            M.CLIP_FRAC: [a + b for a, b in zip(low, high)],
            M.ENTROPY: [1.0] * 6,
            M.KL: [0.01 * scale * s for s in range(6)],
            **({M.KL_REWARD_PENALTY: [0.002 * s for s in range(6)]} if scale > 1 else {}),
            **({M.KL_REWARD_MEAN: [0.01] * 6, beta: [0.1 * 1.02**s for s in range(6)]} if scale > 1 else {}),
            **({M.REF_REFRESH_DISTANCE: [0.0, 0.3, 0.0, 0.2, 0.0, 0.1]} if scale > 1 else {}),
        }

    runs = [
        FakeRun(arm, s, values=fracs(scale, s), params={"objective.clip_high": c})
        for arm, scale, c in (("grpo", 1.0, "0.2"), ("clip_higher", 2.0, "0.28"))
        for s in (0, 1)
    ]
    at = _visit(_app(_fake_store(tmp_path, runs), monkeypatch), "entropy_clipping")
    fig = _figure(at, "total")
    ranges = [fig["layout"][axis].get("range") for axis in ("yaxis", "yaxis2", "yaxis3")]
    assert all(r is not None and r != [0, 1] for r in ranges), ranges
    # the low clip fraction (≤ 0.0023 here) fills its panel instead of lying flat on a 0–1 axis
    assert ranges[0][0] == 0 and 0.002 < ranges[0][1] < 0.003, ranges
    assert 0.2 < ranges[1][1] < 0.3 and ranges[2][1] < 0.3, ranges
    kl = _figure(at, "KL penalty in the reward (β Σ_t kl_t, mean over responses)")
    titles = [a.get("text") for a in kl["layout"]["annotations"]]
    assert "KL to the reference (`policy/kl`, token mean; the initial policy unless refreshed)" in titles
    assert BETA_PANELS[adaptive] in titles  # the adaptive coefficient, drawn
    assert "reference refreshed: its move ‖Δθ_ref‖ at each refresh" in titles  # the refreshed reference, drawn
    assert all(t not in titles for side, t in BETA_PANELS.items() if side != adaptive)  # no arm logged it


def test_the_clip_panel_says_why_an_on_policy_arm_clips_nothing(tmp_path, monkeypatch):
    """One optimiser step per rollout batch clips nothing by construction: the page says so for those arms only."""
    from fake_sweep import FakeRun

    from trainer import metric_names as M

    def run(arm, mini_batches, epochs):
        params = {"train.mini_batches": mini_batches, "train.epochs": epochs}
        return FakeRun(arm, 0, values={M.CLIP_FRAC: [0.0] * 3, M.ENTROPY: [1.0] * 3}, params=params)

    at = _visit(_app(_fake_store(tmp_path, [run("a", "1", "1"), run("b", "1", "1")]), monkeypatch), "entropy_clipping")
    notes = [i.value for i in at.info if "nothing is clipped, by construction" in i.value]
    assert len(notes) == 1 and notes[0].startswith("Every arm takes one optimiser step"), [i.value for i in at.info]
    assert any("No arm logged a KL to the reference" in c.value for c in at.caption), [c.value for c in at.caption]
    at = _visit(
        _app(_fake_store(tmp_path / "mixed", [run("a", "1", "1"), run("b", "4", "1")]), monkeypatch), "entropy_clipping"
    )
    notes = [i.value for i in at.info if "by construction" in i.value]
    assert len(notes) == 1 and notes[0].startswith("a take one optimiser step"), notes
    at = _visit(_app(_fake_store(tmp_path / "off", [run("a", "2", "2")]), monkeypatch), "entropy_clipping")
    assert not [i.value for i in at.info if "by construction" in i.value]


def test_token_and_sequence_ratios_are_compared_in_clipped_tokens(tmp_path, monkeypatch):
    """The levels panel draws policy/clip_frac_tokens, not clip_frac (sequences under GSPO); a run without it (from
    before harness logged it) is named in a caption instead."""
    import base64

    import numpy as np
    from fake_sweep import FakeRun

    from trainer import metric_names as M

    def run(arm, ratio, seqs, tokens):
        values = {
            M.CLIP_FRAC: [seqs] * 3,
            M.ENTROPY: [1.0] * 3,
            **({M.CLIP_FRAC_TOKENS: [tokens] * 3} if tokens else {}),
        }
        return FakeRun(arm, 0, values=values, params={"objective.ratio": ratio})

    runs = [
        run("grpo", "token", 0.002, 0.002),
        run("gspo", "sequence", 0.3, 0.4),
        run("old_gspo", "sequence", 0.3, None),
    ]
    at = _visit(_app(_fake_store(tmp_path, runs), monkeypatch), "entropy_clipping")
    fig = _figure(at, "ratio = sequence (share of clipped tokens)")
    y = {t["name"]: t["y"] for t in fig["data"] if t.get("y") and t.get("xaxis") == "x2"}  # plotly's binary arrays
    drawn = {arm: np.frombuffer(base64.b64decode(v["bdata"]), v["dtype"]).tolist() for arm, v in y.items()}
    assert drawn == {"gspo": pytest.approx([0.4] * 3)}  # its tokens' share, not its sequences' 0.3
    assert any("old_gspo" in c.value and "clip_frac_tokens" in c.value for c in at.caption), [
        c.value for c in at.caption
    ]


def _drawn(fig: dict, axis: str) -> dict[str, list[float]]:
    """Arm → the mean curve a figure draws in the panel on x axis `axis` (plotly's binary arrays decoded)."""
    import base64

    import numpy as np

    means = [t for t in fig["data"] if t.get("y") and t.get("xaxis") == axis and t.get("fill") != "toself"]
    y = {t["name"]: t["y"] for t in means}
    return {arm: np.frombuffer(base64.b64decode(v["bdata"]), v["dtype"]).tolist() for arm, v in y.items()}


def test_advantage_and_stratum_panels_are_drawn_where_logged(tmp_path, monkeypatch):
    """Sign flips beside the other advantage statistics, all-wrong / all-correct groups under their own heading, and
    accuracy per stratum beside accuracy, per arm with seed bands; a sweep without them says so and draws the rest."""
    from fake_sweep import FakeRun

    from trainer import metric_names as M

    def values(flip: float, seed: int, new: bool) -> dict[str, list[float]]:
        common = {
            M.REWARD_MEAN: [0.5] * 3,
            M.ACCURACY: [0.5] * 3,
            M.ADV_ZERO_FRAC: [0.4] * 3,
            M.ADV_ABS_MEAN: [0.6] * 3,
            M.GROUPS_ALL_WRONG_FRAC: [0.3 + 0.1 * seed] * 3,
            M.GROUPS_ALL_CORRECT_FRAC: [0.1] * 3,
            M.GROUPS_MIXED_FRAC: [0.6 - 0.1 * seed] * 3,
        }
        if not new:
            return common
        return {
            **common,
            M.ADV_SIGN_FLIP_FRAC: [flip + 0.1 * seed] * 3,
            M.task_metric("accuracy_clean"): [0.7] * 3,
            M.task_metric("accuracy_hidden"): [0.2 + 0.1 * seed] * 3,
        }

    runs = [
        FakeRun(arm, s, values=values(flip, s, True)) for arm, flip in (("grpo", 0.0), ("mc_grpo", 0.2)) for s in (0, 1)
    ]
    at = _visit(_app(_fake_store(tmp_path, runs), monkeypatch), "dynamic_sampling")
    assert "Groups & advantages (DAPO, NGRPO, MC-GRPO)" in [t.value for t in at.title]
    assert {"All-wrong and all-correct groups", "Advantages"} <= {h.value for h in at.subheader}
    assert _drawn(_figure(at, "all-wrong groups"), "x2") == {
        "grpo": pytest.approx([0.35] * 3),
        "mc_grpo": pytest.approx([0.35] * 3),
    }
    flips = _figure(at, "sign flips vs the group mean")
    assert _drawn(flips, "x3") == {"grpo": pytest.approx([0.05] * 3), "mc_grpo": pytest.approx([0.25] * 3)}
    assert _drawn(flips, "x2") == {"grpo": pytest.approx([0.6] * 3), "mc_grpo": pytest.approx([0.6] * 3)}  # mean |A|
    assert any(t.get("fill") == "toself" for t in flips["data"])  # the seed bands
    assert [c.value for c in at.caption if "Not logged" in c.value] == [
        "Not logged by this sweep's runs: `train/gen_rounds`, `train/groups_dropped`."  # the fake runs log no filter
    ]
    _visit(at, "length_bias")
    strata = _figure(at, "accuracy, hidden digit")
    assert _drawn(strata, "x4") == {"grpo": pytest.approx([0.25] * 3), "mc_grpo": pytest.approx([0.25] * 3)}
    assert _drawn(strata, "x3")["grpo"] == pytest.approx([0.7] * 3)  # clean prompts
    assert any("Accuracy by stratum" in c.value for c in at.caption)
    _visit(at, "ablation")
    assert {"task/accuracy_clean", "task/accuracy_hidden"} <= set(at.dataframe[0].value.columns)

    old = [FakeRun(arm, s, values=values(0.0, s, False)) for arm in ("grpo", "dr_grpo") for s in (0, 1)]
    at = _visit(_app(_fake_store(tmp_path / "old", old), monkeypatch), "dynamic_sampling")
    assert any("Not logged" in c.value and M.ADV_SIGN_FLIP_FRAC in c.value for c in at.caption)
    assert set(_drawn(_figure(at, "mean |advantage|"), "x2")) == {"grpo", "dr_grpo"}
    _visit(at, "length_bias")
    assert any("Not logged" in c.value and "task/accuracy_hidden" in c.value for c in at.caption)
    assert not any("Accuracy by stratum" in c.value for c in at.caption)


def test_each_methods_own_panels_are_drawn_where_logged(tmp_path, monkeypatch):
    """A method's own panels for the arm that logs its metrics: ReMax's greedy reward beside the sampled mean, SPO's
    tracker, the hint rates and PF-PPO's resampling on the groups page; the rollout weight and rejection, Clip-Cov's
    share and the largest ratio on the clipping page. A sweep without them gets none of these headings, nor a "not
    logged" line for them."""
    from fake_sweep import FakeRun

    from trainer import metric_names as M

    common = {
        M.REWARD_MEAN: [0.5] * 3,
        M.ADV_ZERO_FRAC: [0.4] * 3,
        M.ADV_ABS_MEAN: [0.6] * 3,
        M.ENTROPY: [1.0] * 3,
        M.RATIO_MAX: [1.0] * 3,
    }
    own = {
        "remax": lambda seed: {M.GREEDY_REWARD_MEAN: [0.6 + 0.1 * seed] * 3},
        "spo": lambda seed: {
            M.SPO_VALUE_ABS_ERR: [0.4 + 0.1 * seed] * 3,
            M.SPO_VALUE_MEAN: [0.5] * 3,
            M.SPO_TRACKED_FRAC: [1.0] * 3,
            M.SPO_RHO_MEAN: [0.95] * 3,
        },
        "scaf": lambda seed: {
            M.HINT_GROUPS_TRIGGERED_FRAC: [0.1 + 0.1 * seed] * 3,
            M.HINT_RESPONSES_FRAC: [0.05] * 3,
            M.PF_PPO_DISTINCT_FRAC: [0.6] * 3,
            M.PF_PPO_REWARD_MEAN: [0.7 + 0.1 * seed] * 3,
            M.ROLLOUT_REJECTED_FRAC: [0.02 * (seed + 1)] * 3,
            M.COV_SELECTED_FRAC: [0.002] * 3,
            M.RATIO_MAX: [1.2 + 0.1 * seed] * 3,
        },
        "grpo": lambda seed: {},
    }
    headings = {
        "ReMax's greedy baseline",
        "SPO's value tracker",
        "Hints for all-wrong groups (Scaf-GRPO, HiLL)",
        "PF-PPO's resampling by reward",
    }
    runs = [FakeRun(arm, s, values={**common, **own[arm](s)}) for arm in own for s in (0, 1)]
    at = _visit(_app(_fake_store(tmp_path, runs), monkeypatch), "dynamic_sampling")
    assert headings <= {h.value for h in at.subheader}
    assert _drawn(_figure(at, "greedy response's reward"), "x") == {"remax": pytest.approx([0.65] * 3)}
    tracker = _figure(at, "|tracked value − reward|")
    assert _drawn(tracker, "x") == {"spo": pytest.approx([0.45] * 3)}
    assert _drawn(tracker, "x4") == {"spo": pytest.approx([0.95] * 3)}
    assert _drawn(_figure(at, "groups given hinted draws"), "x") == {"scaf": pytest.approx([0.15] * 3)}
    pf = _figure(at, "responses drawn at least once")
    assert _drawn(pf, "x2") == {"scaf": pytest.approx([0.75] * 3)}
    assert set(_drawn(pf, "x3")) == set(own)  # the sampled mean reward, every arm
    logged = [M.GREEDY_REWARD_MEAN, M.SPO_VALUE_MEAN, M.HINT_GROUPS_TRIGGERED_FRAC, M.PF_PPO_DISTINCT_FRAC]
    assert not any("Not logged" in c.value and any(m in c.value for m in logged) for c in at.caption)
    _visit(at, "entropy_clipping")
    clipping = {
        "Rollout correction and rejection",
        "Entropy-keeping switches (Clip-Cov, KL-Cov, the entropy bonus, the 80/20 rule)",
    }
    assert clipping <= {h.value for h in at.subheader}
    assert _drawn(_figure(at, "loss tokens rejected"), "x") == {"scaf": pytest.approx([0.03] * 3)}
    ratios = _drawn(_figure(at, "largest ratio r = π/π_old in the step"), "x")
    assert ratios["scaf"] == pytest.approx([1.25] * 3) and ratios["grpo"] == pytest.approx([1.0] * 3)

    plain = [FakeRun("grpo", s, values=common) for s in (0, 1)]
    at = _visit(_app(_fake_store(tmp_path / "plain", plain), monkeypatch), "dynamic_sampling")
    assert not headings & {h.value for h in at.subheader}
    assert not any(m in c.value for m in logged for c in at.caption)
    _visit(at, "entropy_clipping")
    assert not clipping & {h.value for h in at.subheader}


def test_flat_zero_clip_fraction_is_not_drawn_on_a_unit_axis():
    import pandas as pd

    from harness.analysis.figures import curves_by_arm

    zero = {"a": pd.DataFrame({"seed 0": [0.0, 0.0, 0.0]}, index=[1, 2, 3])}
    fig = curves_by_arm([("low", zero)], ["a"], fit_y=True)
    assert list(fig.layout.yaxis.range) == [0.0, 0.01]


@pytest.mark.filterwarnings("error::pandas.errors.Pandas4Warning")
def test_sweeps_page_raises_no_pandas_warning(tmp_path, monkeypatch):
    from fake_sweep import FakeRun

    runs = [FakeRun(a, s, values={"train/accuracy": [0.1, 0.2]}) for a in "AB" for s in (0, 1)]  # no failure reason
    at = _app(_fake_store(tmp_path, runs), monkeypatch)  # the Sweeps page is the default one
    assert at.dataframe and not at.exception


def test_sweeps_page_lists_the_machines_of_the_sweep(tmp_path, monkeypatch):
    from fake_sweep import FakeRun

    from harness.runs.layout import machine_tags
    from trainer.models.fingerprint import Machine

    runs = [
        FakeRun(a, s, values={"train/accuracy": [0.1]}, tags=machine_tags(Machine("EPYC", cap, "2.6.0", 1), "ab" * 32))
        for a, cap in (("A", "AVX2"), ("B", "AVX512"))
        for s in (0, 1)
    ]
    runs.append(FakeRun("B", 2, values={"train/accuracy": [0.1]}))  # logged before the tags existed
    at = _app(_fake_store(tmp_path, runs), monkeypatch)
    machines = next(d.value for d in at.dataframe if "capability" in d.value)
    assert machines["capability"].tolist() == ["AVX2", "AVX512", "—"] and machines["runs"].tolist() == [2, 2, 1]
    assert machines["CPU"].tolist()[-1] == "not recorded" and not at.exception


def test_pages_show_what_the_reader_set_aside(tmp_path, monkeypatch):
    from fake_sweep import FakeRun

    runs = [
        FakeRun(
            f"x={x} y={y}",
            s,
            values={"train/accuracy": [0.1 * x + 0.2 * y + 0.01 * s] * 3},
            params={"x": str(x), "y": str(y)},
            start=s,
        )
        for x in (0, 1)
        for y in (0, 1)
        for s in (0, 1)
        if (x, y) != (1, 1)
    ]
    runs.append(FakeRun("x=0 y=0", 0, values={"train/accuracy": [0.9] * 3}, params={"x": "0", "y": "0"}, start=60))
    at = _app(_fake_store(tmp_path, runs), monkeypatch)
    assert any("job x=0 y=0-0 has 2 FINISHED runs" in w.value for w in at.warning), [w.value for w in at.warning]
    _visit(at, "ablation")
    assert any("empty cells" in w.value and "x=1, y=1" in w.value for w in at.warning), [w.value for w in at.warning]
    assert at.dataframe[0].value["seeds"].tolist() == [2, 2, 2]  # the duplicate is not a third seed


def test_a_link_names_the_sweep_the_pages_start_on(tmp_path, monkeypatch):
    """`?sweep=NAME` (the screenshots' way to show each page's own sweep) picks that sweep on a first visit."""
    from fake_sweep import FakeRun, write_sweep

    uri = f"sqlite:///{tmp_path / 'two.db'}"
    runs = [FakeRun(a, s, values={"train/accuracy": [0.1, 0.2]}) for a in "AB" for s in (0, 1)]
    write_sweep(uri, runs, name="older", sweep_id="o1", experiment="older")
    write_sweep(uri, runs, name="newer", sweep_id="n1", experiment="newer", parent_start=60)
    monkeypatch.setenv(URI_ENV, uri)
    for wanted, chosen in ((None, "newer/n1"), ("older", "older/o1"), ("o1", "older/o1"), ("nope", "newer/n1")):
        at = AppTest.from_file(APP, default_timeout=120)
        if wanted:
            at.query_params["sweep"] = wanted
        at.run()
        assert not at.exception and at.session_state["sweep"] == chosen, wanted
        assert any("No sweep 'nope'" in w.value for w in at.warning) == (wanted == "nope")


def test_tables_show_a_dash_where_a_value_is_missing():
    """Text, time and numeric columns: a dash instead of Streamlit's `None`, numbers kept as numbers."""
    import pandas as pd

    from dashboard.page import DASH, shown

    df = pd.DataFrame(
        {
            "arm": ["a", None],
            "started": pd.to_datetime([1_700_000_000_000, None], unit="ms"),
            "reward": [0.51234, float("nan")],
            "seed": [0, 1],
        }
    )
    styled = shown(df)
    data = styled.data
    assert data["arm"].tolist() == ["a", DASH] and data["started"].tolist() == ["2023-11-14 22:13:20", DASH]
    assert data["reward"].dtype == float and data["seed"].tolist() == [0, 1]  # still numbers, still sortable
    html = styled.to_html()
    assert f">{DASH}<" in html and ">0.5123<" in html and "None" not in html and "nan" not in html
    assert shown(df.dropna()) is not None and isinstance(shown(df[["seed"]]), pd.DataFrame)  # no gap: no Styler


def test_a_p_value_bound_reads_as_a_bound():
    from dashboard.verdicts import _p

    assert _p("p", "< 0.001") == "p \\< 0.001" and _p("Holm p", "0.0292") == "Holm p = 0.0292"  # < escaped
