"""Sweep files → jobs: expansion, stable ids, and one-line errors for malformed files."""

from pathlib import Path

import pytest

from harness.config.errors import ConfigError
from harness.config.plan import plan_sweep

ABLATIONS = Path(__file__).resolve().parents[1] / "ablations"


def _sweep(tmp_path, text: str, name: str = "s.yaml") -> Path:
    (tmp_path / "toy_run.yaml").write_text((ABLATIONS / "toy_run.yaml").read_text())
    path = tmp_path / name
    path.write_text(text)
    return path


def test_grid_times_seeds_with_stable_ids(tmp_path):
    path = _sweep(
        tmp_path,
        """
name: t
base: toy_run.yaml
set: {train.steps: 7}
grid:
  objective.aggregation: [seq_mean_token_mean, constant]
  objective.advantage: [group_std, group_mean]
seeds: [0, 1, 2]
""",
    )
    plan = plan_sweep(path)
    assert len(plan.jobs) == 12 and len({j.job_id for j in plan.jobs}) == 12
    assert len({j.arm_id for j in plan.jobs}) == 4
    assert all(j.config.train.steps == 7 and j.config.tracking.experiment == "t" for j in plan.jobs)
    assert plan.jobs[0].arm == "advantage=group_std aggregation=seq_mean_token_mean"
    assert plan.jobs[0].varying == {"objective.advantage": "group_std", "objective.aggregation": "seq_mean_token_mean"}
    assert [j.seed for j in plan.jobs[:3]] == [0, 1, 2]
    again = plan_sweep(path)
    assert [j.job_id for j in again.jobs] == [j.job_id for j in plan.jobs] and again.sweep_id == plan.sweep_id
    # a job id is the hash of its resolved config: the same config in another sweep has the same id
    cfg = plan.jobs[0].config
    assert cfg.model_copy(update={"seed": 0}).config_hash == plan.jobs[0].job_id


@pytest.mark.parametrize(
    "setting",
    ["train.threads: 3", "train.device: cpu", "model.cache_dir: elsewhere", "tracking.experiment: other"],
)
def test_settings_that_do_not_change_a_result_keep_the_job_id(tmp_path, setting):
    body = "name: t\nbase: toy_run.yaml\nseeds: [0, 1]\ngrid: {objective.clip_high: [0.2, 0.28]}\n"
    plan = plan_sweep(_sweep(tmp_path, body))
    moved = plan_sweep(_sweep(tmp_path, body + f"set: {{{setting}}}\n", name="moved.yaml"))
    assert [(j.job_id, j.arm_id) for j in moved.jobs] == [(j.job_id, j.arm_id) for j in plan.jobs]
    switched = plan_sweep(_sweep(tmp_path, body + "set: {objective.clip_low: 0.1}\n", name="switched.yaml"))
    assert not {j.job_id for j in switched.jobs} & {j.job_id for j in plan.jobs}  # a switch does change it


def test_another_kinds_field_is_an_error_not_a_new_job(tmp_path):
    """A toy run has no math settings, so `task.math.template` cannot make a second job id: it is refused."""
    body = "name: t\nbase: toy_run.yaml\nseeds: [0]\nset: {task.math.template: r1}\n"
    with pytest.raises(ConfigError, match=r"task\.math: only the 'math' kind has this key \(this one is 'toy_add"):
        plan_sweep(_sweep(tmp_path, body))
    with pytest.raises(ConfigError, match=r"model\.name_or_path: only the 'hf' kind has this key"):
        plan_sweep(_sweep(tmp_path, "name: t\nbase: toy_run.yaml\nseeds: [0]\nset: {model.name_or_path: x}\n"))


def test_one_list_says_what_is_not_a_switch_for_the_planner_and_the_reader():
    from harness.config.run_config import NOT_IDENTITY, defines_arm

    assert "train.threads" in NOT_IDENTITY and not defines_arm("train.threads") and not defines_arm("tracking.uri")
    assert not defines_arm("seed") and defines_arm("objective.clip_high") and defines_arm("train.lr")
    assert defines_arm("model.toy.sft_steps") and not defines_arm("model.cache_dir")


def test_a_logging_only_field_keeps_the_job_id_and_tells_no_arms_apart():
    """`train.reference_kl` adds only `policy/kl`: off, the job is the one published with it on (the main job's ids
    in docs/evidence/dr_grpo_bias.json), and two arms differing only in it are one run config."""
    from harness.config.run_config import LOGGING_ONLY, defines_arm, load_run_config

    on, off = (load_run_config(ABLATIONS / "toy_run.yaml", [f"train.reference_kl={v}"]) for v in ("true", "false"))
    assert LOGGING_ONLY == {"train.reference_kl": True} and not defines_arm("train.reference_kl")
    assert off.train.reference_kl is False and off.config_hash == on.config_hash and off.arm == on.arm
    assert off.identity() == on.identity() and off.identity()["train"]["reference_kl"] is True
    lr = load_run_config(ABLATIONS / "toy_run.yaml", ["train.reference_kl=false", "train.lr=1e-4"])
    assert lr.config_hash != off.config_hash  # the other fields still count
    assert plan_sweep(ABLATIONS / "dr_grpo_bias.yaml").jobs[0].job_id == "c76038c5ca93"


def test_zip_exclude_include_and_cumulative_arms(tmp_path):
    path = _sweep(
        tmp_path,
        """
name: t
base: toy_run.yaml
arms:
  - {name: a, set: {objective.preset: grpo}}
  - {name: b, set: {objective.clip_high: 0.28}}
  - {name: c, set: {objective.aggregation: token_mean}}
cumulative: true
zip:
  - {train.mini_batches: [1, 2], train.epochs: [1, 2]}
exclude:
  - {train.mini_batches: 2, objective.aggregation: token_mean}
include:
  - {objective.preset: dr_grpo}
seeds: [0]
""",
    )
    plan = plan_sweep(path)
    arms = [j.arm for j in plan.jobs]
    assert arms == [
        "a epochs=1 mini_batches=1",
        "a epochs=2 mini_batches=2",
        "b epochs=1 mini_batches=1",
        "b epochs=2 mini_batches=2",
        "c epochs=1 mini_batches=1",
        "preset=dr_grpo",
    ]
    c = plan.jobs[4].config
    assert (c.objective.clip_high, c.objective.aggregation) == (0.28, "token_mean")  # b's override carried on
    assert plan.jobs[1].config.train.epochs == 2
    assert plan.jobs[5].config.objective.aggregation == "constant"


def test_shipped_ablation_files_plan(tmp_path):
    from harness.config.tune import load_tune

    sweeps = [f for f in ABLATIONS.glob("*.yaml") if f.stem != "toy_run" and not f.stem.startswith("tune_")]
    sizes = {f.stem: len(plan_sweep(f).jobs) for f in sweeps}
    assert sizes == {
        "smoke": 4,
        "dr_grpo_bias": 20,
        "dapo_progressive": 18,
        "clip_higher_entropy": 6,
        "clip_higher_entropy_peaked": 6,
        "clip_higher_entropy_collapse": 6,
        "gspo_vs_grpo": 6,
        "engines": 12,
        "entropy_mechanisms": 15,
        "gspo_length": 6,
        "base_models": 10,
        "small_groups": 27,
        "all_wrong_groups": 18,
        "normalisation": 12,
        "strata": 9,
        "kl_placement": 12,
        "two_rollouts": 6,
        "rg_spell_backward_length": 20,
        "rg_spell_backward_gspo": 6,
        "rg_chain_sum_length": 20,
        "rg_chain_sum_gspo": 6,
        "opo_gmpo": 9,
        "one_rollout_baselines": 15,
        "learning_cliffs": 12,
        "shared_prompt_baselines": 9,
    }
    paper = {
        f.stem: len(plan_sweep(f).jobs) for f in (ABLATIONS / "paper").glob("*.yaml") if f.stem != "qwen_math_1p5b"
    }
    assert paper == {"dr_grpo": 12, "dapo_progressive": 18, "gspo": 6, "template_study": 12}
    pilots = {f.stem: plan_sweep(f).jobs for f in (ABLATIONS / "pilots").glob("*.yaml")}
    assert {k: len(v) for k, v in pilots.items()} == {
        "clip_higher_entropy_clean": 2,
        "clip_higher_entropy_peaked_e2": 2,
        "clip_higher_entropy_clean_lr1e4": 2,
        "clip_higher_entropy_clean_lr1e4_mb16": 2,
        "toy_regime": 12,
        "dapo_overlong_filter": 6,
        "takeoff_horizon": 6,
    }
    # the mechanism check's two arms differ in overlong filtering alone, on seeds no other run used
    (a, b) = {j.arm: j.config.identity(with_seed=False) for j in pilots["dapo_overlong_filter"]}.values()
    assert {k for k in a["objective"] if a["objective"][k] != b["objective"][k]} == {"overlong_filter"}
    assert {k for k in a if a[k] != b[k]} == {"objective"}
    assert {j.seed for j in pilots["dapo_overlong_filter"]} == {9101, 9102, 9103}
    regime = {(j.config.train.lr, j.config.train.warmup_steps, j.config.seed) for j in pilots["toy_regime"]}
    assert regime == {(lr, w, 9001) for lr in (1e-4, 2e-4, 5e-4) for w in (0, 10)}  # as docs/toy.md's pilot table
    # each seed of the base-model sweep trains on the build of that seed, and on nothing else
    for job in plan_sweep(ABLATIONS / "base_models.yaml").jobs:
        assert job.config.model.toy.seed == "run" and job.config.model.toy.for_run(job.seed).seed == job.seed
    # the clip-higher pilots ran on the toy of 2026-11-25, and still plan it: no slips, RL at lr 5e-4 unless set
    for name in ("clip_higher_entropy_clean", "clip_higher_entropy_peaked_e2"):
        config = pilots[name][0].config
        assert (config.model.toy.task.slip_prob, config.train.lr) == (None, 5e-4), name
    clean = pilots["clip_higher_entropy_clean"][0].config  # docs/solved_toy/findings.md's pilot table ran exactly this
    assert (
        clean.seed,
        clean.task.toy_addition.hide_prob,
        clean.model.toy.task.hide_prob,
        clean.model.toy.sft_steps,
        clean.train.epochs,
        clean.objective.aggregation,
    ) == (50, 0.0, 0.0, 700, 2, "token_mean")
    assert load_tune(ABLATIONS / "tune_dr_grpo_lr.yaml").settings.trials == 12
    paper = plan_sweep(ABLATIONS / "dr_grpo_bias.yaml", profile="paper").jobs[0].config
    assert (paper.model.name_or_path, paper.rollout.max_new_tokens, paper.train.lr) == (
        "Qwen/Qwen2.5-Math-1.5B",
        3000,
        1e-6,
    )


SIBLING_AND_NULL = ["model.toy.task.hide_prob=0.3", "model.toy.task.slip_prob=null"]


def test_every_shipped_sweep_keeps_the_toy_of_2026_11_25_as_a_profile():
    """`--profile solved_toy` is the toy before the slipping tutor: its build hash, RL lr 5e-4 and no ceiling; the
    default is the new toy at lr 2e-4."""
    from harness.config.run_config import load_run_config
    from trainer.models.toy import config_hash

    for name in ("dr_grpo_bias", "gspo_vs_grpo", "dapo_progressive", "clip_higher_entropy", "engines"):
        old = plan_sweep(ABLATIONS / f"{name}.yaml", profile="solved_toy").jobs[0].config
        new = plan_sweep(ABLATIONS / f"{name}.yaml").jobs[0].config
        assert (config_hash(old.model.toy), old.train.lr, old.model.toy.max_clean_accuracy) == (
            "0de836eccb3ef03c",
            5e-4,
            None,
        ), name
        assert (config_hash(new.model.toy), new.train.lr) == ("815c506b2d1fda13", 2e-4), name
        claims = {c.id: c for c in plan_sweep(ABLATIONS / f"{name}.yaml").settings.claims}
        improves = claims["training_improves_accuracy"]
        assert (str(improves.contrast.since), str(improves.at)) == ("first-10", "last-10"), name
        assert improves.metric == "train/accuracy", name  # the health claim reads accuracy, the same in every arm
    # setting another field of the SFT task keeps the tutor's slips: the peaked toy slips, unless told not to
    peaked = plan_sweep(ABLATIONS / "clip_higher_entropy_peaked.yaml").jobs[0].config.model.toy.task
    assert (peaked.guess_peak, peaked.slip_prob) == (0.8, 0.1)
    slips = [load_run_config(ABLATIONS / "toy_run.yaml", [s]).model.toy.task.slip_prob for s in SIBLING_AND_NULL]
    assert slips == [0.1, None]


@pytest.mark.parametrize(
    "body, needle",
    [
        ("name: t\nbase: toy_run.yaml\nseeds: [0]\ngrdi: {seed: [1]}\n", "grdi: unknown key"),
        ("name: t\nbase: toy_run.yaml\n", "seeds: required key is missing"),
        ("name: t\nbase: toy_run.yaml\nseeds: [0, 0]\n", "seeds repeat"),
        ("name: t\nbase: toy_run.yaml\nseeds: [-1]\n", "seeds[0]: Input should be greater than or equal to 0"),
        ("name: t\nbase: toy_run.yaml\nseeds: [0]\ngrid: {objective.clip_high: 0.28}\n", "grid.objective.clip_high"),
        ("name: t\nbase: toy_run.yaml\nseeds: [0]\ngrid: {objective.clip_high: []}\n", "at least one value"),
        (
            "name: t\nbase: toy_run.yaml\nseeds: [0]\nzip: [{train.epochs: [1, 2], train.mini_batches: [1]}]\n",
            "different lengths",
        ),
        (
            "name: t\nbase: toy_run.yaml\nseeds: [0]\ngrid: {train.epochs: [1]}\nzip: [{train.epochs: [1]}]\n",
            "also varies elsewhere",
        ),
        (
            "name: t\nbase: toy_run.yaml\nseeds: [0]\ngrid: {train.epochs: [1, 2]}\nexclude: [{train.lr: 1}]\n",
            "train.lr does not vary",
        ),
        ("name: t\nbase: missing.yaml\nseeds: [0]\n", "base: no run config"),
        (
            "name: t\nbase: toy_run.yaml\nseeds: [0]\ngrid: {objective.clip_hihg: [0.2]}\n",
            "objective.clip_hihg: unknown key (did you mean 'clip_high'?)",
        ),
        (
            "name: t\nbase: toy_run.yaml\nseeds: [0]\ngrid: {objective.clip_high: [-0.2, 0.28]}\n",
            "arm 'clip_high=-0.2': objective.clip_high",
        ),
        ("name: t\nbase: toy_run.yaml\nseeds: [0]\narms: [{name: a}, {name: a}]\n", "arm names repeat"),
        ("name: t\nbase: toy_run.yaml\nseeds: [0]\ncumulative: true\n", "cumulative needs arms"),
        (
            "name: t\nbase: toy_run.yaml\nseeds: [0]\narms: [{name: a, set: {objective.preset: grpo}},"
            " {name: b, set: {objective.preset: grpo}}]\n",
            "arms 'a' and 'b' resolve to the same run config",
        ),
        (
            "name: t\nbase: toy_run.yaml\nseeds: [0]\nset: {train.steps.n: 3}\n",
            "set: train.steps.n: train.steps is 120, not a mapping",
        ),
        ("[not, a, mapping]\n", "top level must be a mapping"),
    ],
)
def test_malformed_sweep_is_one_line_naming_the_key(tmp_path, body, needle):
    path = _sweep(tmp_path, body)
    with pytest.raises(ConfigError) as err:
        plan_sweep(path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message and needle in message, message


def test_unknown_profile(tmp_path):
    path = _sweep(tmp_path, "name: t\nbase: toy_run.yaml\nseeds: [0]\n")
    with pytest.raises(ConfigError, match="no profile 'paper'"):
        plan_sweep(path, profile="paper")


def test_seeds_given_on_the_command_line_replace_the_files(tmp_path, capsys):
    from harness.cli import main

    path = _sweep(tmp_path, "name: t\nbase: toy_run.yaml\ngrid: {objective.clip_high: [0.2, 0.28]}\nseeds: [0, 1]\n")
    plan = plan_sweep(path, seeds=[100, 101, 102])
    assert [j.seed for j in plan.jobs] == [100, 101, 102] * 2 and plan.raw["seeds"] == [100, 101, 102]
    assert plan.sweep_id == plan_sweep(path).sweep_id  # the same sweep: keep a replication in its own store
    assert (
        main(
            [
                "sweep",
                str(path),
                "--dry-run",
                "--seeds",
                "100-102,7",
                "--tracking-uri",
                f"sqlite:///{tmp_path / 'm.db'}",
            ]
        )
        == 0
    )
    assert "8 jobs" in capsys.readouterr().out
    for bad, needle in (("3-1", "runs backwards"), ("1,1", "seeds repeat"), ("x", "'x' is not a seed")):
        with pytest.raises(SystemExit):
            main(["sweep", str(path), "--dry-run", "--seeds", bad])
        assert needle in capsys.readouterr().err


def test_every_shipped_sweep_claims_that_training_raises_accuracy_in_every_arm():
    """harness's health claim reads task accuracy, defined the same way in every arm (a shaped reward is not: the
    soft overlong punishment scores truncated responses −1, so a reward can fall while accuracy rises)."""
    import yaml

    sweeps = [p for p in sorted(ABLATIONS.glob("*.yaml")) if "claims" in (yaml.safe_load(p.read_text()) or {})]
    assert len(sweeps) >= 10
    for path in sweeps:
        (improves,) = [c for c in plan_sweep(path).settings.claims if c.id == "training_improves_accuracy"] or [None]
        assert improves is not None, path.name
        assert (improves.metric, str(improves.contrast.since), improves.direction) == (
            "train/accuracy",
            "first-10",
            "increase",
        ), path.name
