"""TRL as a second engine (`train.engine: trl`) and `HarnessCallback` on a user's own GRPOTrainer: the switch table,
its errors, real 3-step jobs through `harness run` and a 2x2 `harness sweep`, the dashboard on their runs, and the
callback leaving TRL's training unchanged. Everything runs on the session's tiny toy model, on CPU."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from harness.cli import main
from harness.config.errors import ConfigError
from harness.config.run_config import load_run_config
from harness.config.trl_args import TABLE, grpo_args, settings_of, trl_problems
from trainer import metric_names as M
from trainer.config import RolloutConfig, TrainConfig
from trainer.objective.settings import ObjectiveSettings

ROOT = Path(__file__).resolve().parents[1]
TOY_RUN = ROOT / "ablations" / "toy_run.yaml"
EXPRESSIBLE = ["objective.adv_eps=0.0001", "train.reference_kl=false"]  # what every TRL job here sets
trl = pytest.importorskip("trl", reason="the trl extra (CI installs it with dev)")


def _cfg(*sets: str):
    return load_run_config(TOY_RUN, ["train.engine=trl", *EXPRESSIBLE, *sets])


# ---- the table ---------------------------------------------------------------------------
def test_the_table_names_every_setting_and_the_readme_shows_it():
    fields = {
        *(f"objective.{f}" for f in ObjectiveSettings.model_fields),
        *(f"rollout.{f}" for f in RolloutConfig.model_fields),
        *(f"train.{f}" for f in TrainConfig.model_fields),
    }
    assert set(TABLE) == fields  # a new switch must say how TRL expresses it
    readme = (ROOT / "docs" / "trl.md").read_text()
    for key, how in TABLE.items():
        assert f"| `{key}` | {how} |" in readme, key


@pytest.mark.parametrize(
    ("preset", "expected"),
    [
        ("grpo", {"loss_type": "grpo", "scale_rewards": "group", "importance_sampling_level": "token"}),
        ("dr_grpo", {"loss_type": "dr_grpo", "scale_rewards": "none", "max_completion_length": 128}),
        ("gspo", {"importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4}),
    ],
)
def test_presets_map_to_grpo_config(preset, expected):
    cfg = _cfg(f"objective.preset={preset}")
    args = grpo_args(cfg.objective, cfg.rollout, cfg.train)
    assert expected.items() <= args.items()
    assert args["per_device_train_batch_size"] == 128 and args["steps_per_generation"] == 1
    assert args["beta"] == 0 and args["use_bias_correction_kl"] is False and args["max_steps"] == 120
    trl.GRPOConfig(output_dir="unused", report_to="none", bf16=False, **args)  # TRL accepts every argument


def test_the_kl_gradient_maps_to_use_bias_correction_kl_and_reads_back():
    """objective.kl_gradient trl_bias_correction ↔ TRL's use_bias_correction_kl=True, estimator ↔ False, both ways."""
    for form, flag in (("trl_bias_correction", True), ("estimator", False)):
        cfg = _cfg("objective.kl_coef=0.04", f"objective.kl_gradient={form}")
        args = grpo_args(cfg.objective, cfg.rollout, cfg.train)
        assert args["beta"] == 0.04 and args["use_bias_correction_kl"] is flag
        built = trl.GRPOConfig(output_dir="unused", report_to="none", bf16=False, **args)
        assert settings_of(built, built.max_steps, [])["objective"]["kl_gradient"] == form


def test_the_refreshed_reference_maps_to_sync_ref_model_and_reads_back():
    """train.reference_sync_steps and reference_mixup_alpha ↔ TRL's sync_ref_model, ref_model_sync_steps (in optimiser
    steps: RL steps × mini_batches × epochs) and ref_model_mixup_alpha, both ways; off ↔ sync_ref_model=False."""
    sets = ["objective.kl_coef=0.04", "train.mini_batches=2", "train.epochs=3"]
    cfg = _cfg(*sets, "train.reference_sync_steps=4", "train.reference_mixup_alpha=0.6")
    args = grpo_args(cfg.objective, cfg.rollout, cfg.train)
    assert (args["sync_ref_model"], args["ref_model_sync_steps"], args["ref_model_mixup_alpha"]) == (True, 24, 0.6)
    built = trl.GRPOConfig(output_dir="unused", report_to="none", bf16=False, **args)
    back = settings_of(built, built.max_steps, [])["train"]
    assert (back["reference_sync_steps"], back["reference_mixup_alpha"]) == (4, 0.6)
    off = _cfg(*sets)
    built = trl.GRPOConfig(
        output_dir="unused", report_to="none", bf16=False, **grpo_args(off.objective, off.rollout, off.train)
    )
    assert built.sync_ref_model is False
    back = settings_of(built, built.max_steps, [])["train"]
    assert (back["reference_sync_steps"], back["reference_mixup_alpha"]) == (None, None)
    # a sync between two generations' optimiser steps has no harness setting: named as TRL's
    odd = trl.GRPOConfig(output_dir="unused", report_to="none", bf16=False, **{**args, "ref_model_sync_steps": 25})
    assert settings_of(odd, odd.max_steps, [])["train"]["reference_sync_steps"] == "trl:ref_model_sync_steps=25"
    o = ObjectiveSettings.preset("grpo", adv_eps=1e-4, kl_reward_coef=0.1)
    problems = trl_problems(
        o, RolloutConfig(), TrainConfig(reference_kl=False, reference_sync_steps=4, reference_mixup_alpha=1.0)
    )
    assert (
        "train.reference_sync_steps: 4 (TRL syncs its reference only when beta > 0: set objective.kl_coef)" in problems
    )


def test_dapo_without_dynamic_sampling_maps_its_other_switches():
    cfg = _cfg("objective.preset=dapo", "objective.dynamic_sampling=false", "train.mini_batches=4")
    args = grpo_args(cfg.objective, cfg.rollout, cfg.train)
    assert args["loss_type"] == "dapo" and args["epsilon_high"] == 0.28 and args["mask_truncated_completions"]
    assert args["steps_per_generation"] == 4 and args["per_device_train_batch_size"] == 32
    assert args["max_steps"] == 480  # TRL counts optimiser steps


@pytest.mark.parametrize(
    ("sets", "key"),
    [
        (["objective.dynamic_sampling=true"], "objective.dynamic_sampling"),
        (["objective.advantage=group_median"], "objective.advantage"),
        (["objective.ratio=sequence_token"], "objective.ratio"),
        (["objective.kl_coef=0.01", "objective.kl_estimator=k1"], "objective.kl_estimator"),
        (["objective.kl_coef=0.01", "objective.kl_estimator=abs"], "objective.kl_estimator"),
        (["objective.kl_coef=0.01", "objective.kl_gradient=k2_straight_through"], "objective.kl_gradient"),
        (["objective.kl_coef=0.01", "objective.kl_gradient=openrlhf_unbiased_gradient"], "objective.kl_gradient"),
        (["objective.kl_coef=0.01", "objective.kl_target=0.1", "objective.kl_horizon=1000"], "objective.kl_target"),
        (["objective.dual_clip=1.1"], "objective.dual_clip"),
        (["objective.preset=dr_grpo", "objective.max_len=100"], "objective.max_len"),
        (["objective.adv_eps=1e-6"], "objective.adv_eps"),
        (["train.reference_kl=true"], "train.reference_kl"),
        (["train.mini_batches=3"], "train.mini_batches"),
        (["train.micro_batch_size=48"], "train.micro_batch_size"),
        (["objective.surrogate=cispo"], "objective.aggregation"),  # TRL's cispo has the token-mean loss only
        (["objective.clip_cov_ratio=0.001", "objective.clip_cov_bounds=[1,5]"], "objective.clip_cov_ratio"),
        (
            ["objective.surrogate=kl_cov", "objective.kl_cov_ratio=0.002", "objective.kl_cov_coef=1"],
            "objective.aggregation",
        ),
        (
            ["objective.rollout_correction=token_truncate", "objective.rollout_correction_max=2"],
            "objective.rollout_correction",
        ),
        (["objective.preset=gmpo", "objective.adv_eps=1e-4"], "objective.surrogate"),
        (["objective.preset=dppo_tv", "objective.adv_eps=1e-4", "objective.max_len=128"], "objective.surrogate"),
        (["objective.preset=dppo_kl", "objective.adv_eps=1e-4", "objective.max_len=128"], "objective.surrogate"),
        (["objective.surrogate=dro", "objective.dro_beta=0.05"], "objective.surrogate"),
        (["objective.surrogate=gpg"], "objective.surrogate"),
        (["objective.advantage=gpg"], "objective.advantage"),
        (["objective.advantage=gpg_nonzero"], "objective.advantage"),
        (["objective.advantage=remax"], "objective.advantage"),  # TRL draws no greedy response
        (["objective.preset=remax"], "objective.advantage"),
        (["objective.ratio=sequence_product"], "objective.ratio"),
    ],
)
def test_a_switch_trl_cannot_express_is_a_one_line_error_naming_it(sets, key):
    with pytest.raises(ConfigError) as err:
        _cfg(*sets)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{TOY_RUN}: train.engine: trl cannot express {key}: ")


def test_the_error_comes_before_any_job_of_a_sweep(tmp_path, capsys):
    sweep = tmp_path / "bad.yaml"
    sweep.write_text(
        yaml.safe_dump(
            {
                "name": "bad",
                "base": str(TOY_RUN),
                "set": {"objective.adv_eps": 1e-4, "train.reference_kl": False, "objective.dynamic_sampling": True},
                "grid": {"train.engine": ["harness", "trl"]},
                "seeds": [0],
            }
        )
    )
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["sweep", str(sweep), "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "objective.dynamic_sampling: true (TRL has no dynamic sampling)" in err[0]
    assert not (tmp_path / "mlflow.db").exists()


def test_without_trl_the_engine_is_a_one_line_error_naming_the_extra(monkeypatch):
    import importlib.metadata

    from harness.engine.preflight import check_host

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    with pytest.raises(
        ConfigError, match=r'^job 1: train.engine: trl needs TRL, which is not installed: .*"\.\[trl\]"$'
    ):
        check_host(_cfg(), "job 1")
    check_host(load_run_config(TOY_RUN, []), "job 1")  # harness's own engine needs nothing more


def test_settings_read_back_from_grpo_config_are_the_run_config():
    """The table both ways: a run config → GRPOConfig → harness's settings gives the config's mapped fields, for
    every preset TRL can run and with the newer switches set."""
    newer = (
        "objective.top_entropy_quantile=0.3",
        "objective.off_policy_threshold=0.5",
        "objective.entropy_coef=0.01",
        "objective.entropy_target=0.2",
        "objective.entropy_coef_step=0.005",
        "objective.entropy_coef_max=0.5",
    )
    presets = ("grpo", "dr_grpo", "gspo", "cispo", "sapo", "luspo", "vespo", "lite_ppo")
    for preset, extra in [(p, ()) for p in presets] + [("grpo", newer)]:
        cfg = _cfg(
            f"objective.preset={preset}",
            "train.mini_batches=2",
            "train.epochs=2",
            "train.micro_batch_size=16",
            *extra,
        )
        args = trl.GRPOConfig(
            output_dir="unused", report_to="none", bf16=False, **grpo_args(cfg.objective, cfg.rollout, cfg.train)
        )
        back = settings_of(args, args.max_steps, [])
        for section in ("objective", "rollout", "train"):
            mine = getattr(cfg, section).model_dump(mode="json")
            for key, value in back[section].items():
                assert mine[key] == pytest.approx(value) if isinstance(value, float) else mine[key] == value, (
                    preset,
                    section,
                    key,
                )
        assert not trl_problems(
            ObjectiveSettings(**back["objective"], dynamic_sampling_key="correct"), cfg.rollout, cfg.train
        )


def test_trl_names_the_trainer_it_would_take_for_gmpo_and_the_sequence_product_ratio():
    """GMPO is TRL's experimental GMPOTrainer and Π_t r_t its RLOOTrainer's: other trainers than the GRPOTrainer
    harness's engine runs, said so in the one line."""
    o = ObjectiveSettings.preset("gmpo", adv_eps=1e-4)
    assert (
        "objective.surrogate: gmpo (TRL's GMPO is trl.experimental.gmpo.GMPOTrainer"
        in trl_problems(o, RolloutConfig(), TrainConfig(reference_kl=False))[0]
    )
    o = ObjectiveSettings.preset("grpo", adv_eps=1e-4, ratio="sequence_product")
    assert trl_problems(o, RolloutConfig(), TrainConfig(reference_kl=False)) == [
        "objective.ratio: sequence_product (TRL's importance_sampling_level is token or sequence; Π_t r_t is its "
        "RLOOTrainer's, another trainer)"
    ]


def test_trl_cannot_express_verls_token_sum_in_one_line():
    with pytest.raises(ConfigError) as err:
        load_run_config(TOY_RUN, ["train.engine=trl", *EXPRESSIBLE, "objective.aggregation=token_sum"])
    assert "\n" not in str(err.value) and str(err.value).endswith(
        "train.engine: trl cannot express objective.aggregation: token_sum with objective.surrogate clip "
        "(TRL's loss_type has no equivalent)"
    )


@pytest.mark.parametrize("mode, refused", [("sequence_mask", True), ("sequence_truncate", True), ("token_mask", False)])
def test_trl_refuses_vespo_with_a_sequence_level_rollout_correction(mode, refused):
    """TRL 1.16's trainer raises on VESPO with a sequence-level vLLM correction: refused before any job instead."""
    o = ObjectiveSettings.preset(
        "vespo", adv_eps=1e-4, rollout_correction=mode, rollout_correction_min=0.5, rollout_correction_max=2.0
    )
    problems = trl_problems(o, RolloutConfig(backend="vllm"), TrainConfig(reference_kl=False))
    line = f"objective.rollout_correction: {mode} with objective.surrogate vespo (TRL's VESPO takes only "
    assert any(p.startswith(line) for p in problems) == refused


def test_a_plain_trl_runs_settings_without_a_harness_switch_are_logged_as_trl_names():
    """What harness has no switch for is not logged as the nearest harness setting: a delta at or below 1 + ε_high
    (it then caps positive-advantage tokens too: not a dual clip). Its bias-corrected KL (on by default) is harness's
    kl_gradient trl_bias_correction; its multi-reward normalise-then-sum is GDPO."""
    trl = pytest.importorskip("trl")

    def back(**kw):
        args = trl.GRPOConfig(output_dir="unused", report_to="none", bf16=False, **kw)
        return settings_of(args, args.max_steps, [])["objective"]

    plain = back(beta=0.0)
    assert (plain["advantage"], plain["kl_estimator"], plain["dual_clip"]) == ("group_std", "k3", None)
    assert back(multi_objective_aggregation="normalize_then_sum")["advantage"] == "gdpo"  # GDPO (test_gdpo.py)
    assert plain["kl_gradient"] == "estimator"  # beta 0: no KL term, whatever use_bias_correction_kl says
    kl = lambda o: (o["kl_estimator"], o["kl_gradient"])  # noqa: E731
    assert kl(back(beta=0.04)) == ("k3", "trl_bias_correction")
    assert kl(back(beta=0.04, use_bias_correction_kl=False)) == ("k3", "estimator")
    assert kl(back(beta=0.04, sync_ref_model=True)) == ("k3", "trl_bias_correction")  # train.reference_sync_steps
    assert back(delta=1.1, epsilon_high=0.28)["dual_clip"] == "trl:delta=1.1"
    assert back(delta=4.0, epsilon_high=0.28)["dual_clip"] == 4.0


def test_trl_clip_fractions_are_mapped_only_in_their_own_unit():
    from harness.integrations.trl import trl_logs

    token, sequence = (dict((name, key) for key, name in trl_logs(level)) for level in ("token", "sequence"))
    # one TRL number, clip_ratio/region_mean: a share of loss tokens at level token, of responses at level sequence
    assert token[M.CLIP_FRAC] == token[M.CLIP_FRAC_TOKENS] == "clip_ratio/region_mean" and M.CLIP_FRAC_SEQS not in token
    assert sequence[M.CLIP_FRAC] == sequence[M.CLIP_FRAC_SEQS] == "clip_ratio/region_mean"
    assert M.CLIP_FRAC_TOKENS not in sequence


# ---- real jobs ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny(tiny_run_overrides):
    from trainer.models.toy import ensure_toy_model

    cfg = load_run_config(TOY_RUN, tiny_run_overrides)
    ensure_toy_model(cfg.model.toy, cfg.model.cache_dir)
    return [*tiny_run_overrides, *EXPRESSIBLE, "train.log_text=true"]


# every training metric of the contract; KL only exists with beta > 0 (as in harness's runs without a reference),
# TRL logs no share of responses clipped at importance_sampling_level token (`trl_logs`), and its decode is its own
CONTRACT = set(M.TRAINING) - {M.KL, M.CLIP_FRAC_SEQS, M.DECODE_STEP_S}


def _runs(uri: str, experiment: str):
    client = MlflowClient(uri)
    return client, client.search_runs([client.get_experiment_by_name(experiment).experiment_id])


def test_a_trl_job_through_harness_run_logs_every_contract_metric(tmp_path, tiny):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sets = [x for s in [*tiny, "train.engine=trl", "tracking.experiment=trl1"] for x in ("--set", s)]
    assert main(["run", str(TOY_RUN), *sets, "--tracking-uri", uri, "--quiet"]) == 0
    client, (run,) = _runs(uri, "trl1")
    assert run.info.status == "FINISHED" and run.data.params["train.engine"] == "trl"
    assert CONTRACT <= set(run.data.metrics), CONTRACT - set(run.data.metrics)
    assert run.data.metrics[M.CLIP_FRAC_TOKENS] == run.data.metrics[M.CLIP_FRAC]  # level token: both count tokens
    assert M.CLIP_FRAC_SEQS not in run.data.metrics
    assert [m.step for m in client.get_metric_history(run.info.run_id, M.ACCURACY)] == [1, 2, 3]
    table = __import__("pandas").read_parquet(client.download_artifacts(run.info.run_id, "rollouts.parquet"))
    assert len(table) == 3 * 4 * 4 and table["advantage"].notna().all()
    assert {"prompt", "response", "correct", "length", "truncated", "reward_task_reward"} <= set(table.columns)
    assert table.groupby("step")["correct"].mean().tolist() == pytest.approx(
        [m.value for m in sorted(client.get_metric_history(run.info.run_id, M.ACCURACY), key=lambda m: m.step)]
    )


def _dashboard(uri: str, page: str):
    """The dashboard on `uri`, showing `page` of its newest sweep (AppTest), with no exception."""
    from streamlit.testing.v1 import AppTest

    from dashboard.launch import URI_ENV

    os.environ[URI_ENV] = uri
    try:
        at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=120)
        at.run()
        at.switch_page(f"views/{page}.py").run()
    finally:
        del os.environ[URI_ENV]
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_a_two_by_two_sweep_of_engine_and_preset_and_the_dashboard_on_it(tmp_path, tiny):
    sweep = tmp_path / "engines.yaml"
    sets = dict(s.split("=", 1) for s in tiny)
    sweep.write_text(
        yaml.safe_dump(
            {
                "name": "engines_tiny",
                "base": str(TOY_RUN),
                "set": {k: yaml.safe_load(v) for k, v in sets.items()},
                "grid": {"train.engine": ["harness", "trl"]},
                "zip": [  # the grpo and dr_grpo presets
                    {
                        "objective.aggregation": ["seq_mean_token_mean", "constant"],
                        "objective.advantage": ["group_std", "group_mean"],
                    }
                ],
                "seeds": [0],
            }
        )
    )
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["sweep", str(sweep), "--tracking-uri", uri, "--workers", "2"]) == 0
    client, runs = _runs(uri, "engines_tiny")
    jobs = [r for r in runs if r.data.tags.get("sweep_parent") != "1"]
    assert sorted((r.data.params["train.engine"], r.data.params["objective.aggregation"]) for r in jobs) == [
        ("harness", "constant"),
        ("harness", "seq_mean_token_mean"),
        ("trl", "constant"),
        ("trl", "seq_mean_token_mean"),
    ]
    for run in jobs:
        assert run.info.status == "FINISHED" and CONTRACT <= set(run.data.metrics), run.data.params["train.engine"]
    assert main(["sweep", str(sweep), "--tracking-uri", uri]) == 0  # resumes: nothing left to train
    assert len(_runs(uri, "engines_tiny")[1]) == len(runs)

    at = _dashboard(uri, "length_bias")
    charts = [c.proto.spec for c in at.get("plotly_chart")]
    assert charts and any("engine=trl" in spec for spec in charts)  # the TRL arms are drawn


# ---- the callback on a user's own script ----------------------------------------------------
def _user_script(
    model_dir: str,
    tmp: Path,
    *,
    with_callback: bool,
    uri: str = "",
    fail_at: int = 0,
    more: dict | None = None,
    after: list | None = None,
):
    """What a TRL user writes: a dataset, a reward, GRPOConfig (with `more` settings) and GRPOTrainer (plus, here,
    HarnessCallback, then the callbacks `after`)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from trainer.tasks.toy_addition import parse_completion

    data = Dataset.from_dict({"prompt": [f"{a}+{b}=" for a in range(4) for b in range(4)]})

    def sums(prompts, completions, trainer_state, **_):
        if fail_at and trainer_state.global_step + 1 >= fail_at:
            raise RuntimeError("the grader's server went away")
        answers = [parse_completion(c)[0] for c in completions]
        return [float(a == str(sum(map(int, p[:-1].split("+"))))) for p, a in zip(prompts, answers)]

    args = GRPOConfig(
        output_dir=str(tmp / "out"),
        per_device_train_batch_size=32,
        num_generations=4,
        max_completion_length=48,
        max_steps=2,
        learning_rate=1e-3,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
        seed=3,
        **(more or {}),
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir),
        reward_funcs=sums,
        args=args,
        train_dataset=data,
        processing_class=AutoTokenizer.from_pretrained(model_dir),
    )
    if with_callback:
        from harness.integrations.trl import HarnessCallback

        trainer.add_callback(HarnessCallback(trainer, experiment="mine", sweep="my_trl_study", tracking_uri=uri))
    for callback in after or []:
        trainer.add_callback(callback(trainer))
    losses = []
    from transformers import TrainerCallback

    class Losses(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if "loss" in logs:
                losses.append((logs["loss"], logs["grad_norm"], logs["reward"]))

    trainer.add_callback(Losses())
    trainer.train()
    return losses, {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


def _watch_reference(moves: list[float]):
    """A callback class, added after TRL's SyncRefModelCallback (and HarnessCallback), that appends the move of the
    reference's parameters at each optimiser step to `moves`."""
    from transformers import TrainerCallback

    class Watch(TrainerCallback):
        def __init__(self, trainer):
            self.trainer = trainer

        def on_optimizer_step(self, args, state, control, **kwargs):
            self.before = [p.detach().double().clone() for p in self.trainer.ref_model.parameters()]

        def on_step_end(self, args, state, control, **kwargs):
            after = [p.detach().double() for p in self.trainer.ref_model.parameters()]
            moves.append(sum(float((a - b).square().sum()) for a, b in zip(after, self.before)) ** 0.5)

    return Watch


def test_the_callback_does_not_change_what_trl_trains_and_its_run_is_read_like_harnesss(tmp_path, tiny):
    """With TRL's reference refresh on (sync_ref_model every optimiser step, one per rollout step here), which the
    callback logs as harness logs its own: policy/ref_refresh_step each step, policy/ref_refresh_distance the move
    TRL's mix made."""
    import torch

    from trainer.models.toy import ensure_toy_model

    cfg = load_run_config(TOY_RUN, tiny)
    model_dir = str(ensure_toy_model(cfg.model.toy, cfg.model.cache_dir))
    torch.set_num_threads(1)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    more = {"beta": 0.04, "sync_ref_model": True, "ref_model_sync_steps": 1, "ref_model_mixup_alpha": 0.5}
    moves: list[float] = []
    plain_loss, plain = _user_script(model_dir, tmp_path / "a", with_callback=False, more=more)
    loss, weights = _user_script(
        model_dir, tmp_path / "b", with_callback=True, uri=uri, more=more, after=[_watch_reference(moves)]
    )
    assert loss == plain_loss and len(loss) == 2
    assert any(grad_norm > 0 for _, grad_norm, _ in loss)  # the steps did train
    assert plain.keys() == weights.keys() and all(torch.equal(plain[k], weights[k]) for k in plain)

    client, (run,) = _runs(uri, "mine")
    assert run.info.status == "FINISHED" and run.data.tags["sweep_id"] == "my_trl_study"
    from harness.runs.layout import BASE_MODEL_SHA256_TAG, TORCH_THREADS_TAG
    from trainer.models.fingerprint import weights_sha256

    assert run.data.tags[BASE_MODEL_SHA256_TAG] == weights_sha256(model_dir) and run.data.tags[TORCH_THREADS_TAG] == "1"
    assert run.data.params["objective.aggregation"] == "token_mean"  # TRL's default loss_type, dapo
    assert run.data.params["rollout.group_size"] == "4" and run.data.params["train.engine"] == "trl"
    assert CONTRACT - {M.GRADE_TIMEOUTS} <= set(run.data.metrics) | {M.GRADE_TIMEOUTS}
    assert "rollouts.parquet" in {a.path for a in client.list_artifacts(run.info.run_id)}
    history = {
        name: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, name)]
        for name in (M.REF_REFRESH_STEP, M.REF_REFRESH_DISTANCE)
    }
    assert history[M.REF_REFRESH_STEP] == [(1, 1.0), (2, 2.0)] and len(moves) == 2 and all(m > 0 for m in moves)
    assert [s for s, _ in history[M.REF_REFRESH_DISTANCE]] == [1, 2]
    assert [d for _, d in history[M.REF_REFRESH_DISTANCE]] == pytest.approx(moves, rel=1e-5)
    out = tmp_path / "report"
    assert main(["report", "my_trl_study", "--tracking-uri", uri, "--out", str(out)]) == 0
    assert "my_trl_study" in (out / "report.md").read_text()
    at = _dashboard(uri, "length_bias")
    assert at.session_state["sweep"] == "mine/my_trl_study" and at.get("plotly_chart")


def test_the_callback_refuses_a_reward_it_does_not_know(tmp_path, tiny):
    from harness.integrations.trl import HarnessCallback

    class Fake:
        reward_func_names = ["accuracy"]
        num_generations, eos_token_ids, _logs = 2, [1], {}

        def _calculate_rewards(self, *a):
            return None

    with pytest.raises(ValueError, match=r"correct_reward: no reward function 'correctness'; .*\['accuracy'\]"):
        HarnessCallback(Fake(), correct_reward="correctness")


def test_a_crashing_script_ends_its_run_failed_with_the_reason(tmp_path, tiny):
    from trainer.models.toy import ensure_toy_model

    cfg = load_run_config(TOY_RUN, tiny)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    model_dir = str(ensure_toy_model(cfg.model.toy, cfg.model.cache_dir))
    with pytest.raises(RuntimeError, match="went away"):
        _user_script(model_dir, tmp_path, with_callback=True, uri=uri, fail_at=2)
    client, (run,) = _runs(uri, "mine")
    assert (
        run.info.status == "FAILED" and run.data.tags["failure_reason"] == "RuntimeError: the grader's server went away"
    )
    assert [m.step for m in client.get_metric_history(run.info.run_id, M.ACCURACY)] == [1]  # step 1 is kept
    assert "rollouts.parquet" in {a.path for a in client.list_artifacts(run.info.run_id)}


def test_the_engine_enters_a_job_id_only_when_it_is_trl():
    """Job ids published before `train.engine` existed stay valid: a sweep of harness's engine resumes its runs."""
    solved_toy = [  # the toy and lr toy_run.yaml had then (the sweeps' profile solved_toy)
        "train.lr=5.0e-4",
        "model.toy.task.slip_prob=null",
        "model.toy.min_clean_accuracy=0.9",
        "model.toy.max_clean_accuracy=null",
    ]
    harness_run = load_run_config(TOY_RUN, solved_toy)
    assert "engine" not in harness_run.identity()["train"]
    assert harness_run.config_hash == "f7ec719fc993"  # toy_run.yaml's job id at ac76437, before the field
    trl_run = _cfg()
    assert trl_run.identity()["train"]["engine"] == "trl"
    same_but_harness = load_run_config(TOY_RUN, EXPRESSIBLE)
    assert trl_run.arm != same_but_harness.arm and trl_run.config_hash != same_but_harness.config_hash


def test_a_custom_task_s_reward_functions_train_under_trl(tmp_path, tiny):
    """The user's functions reach TRL through the task's grade: their weighted reward, their correctness in harness's
    metrics, their numbers as task/<name>, their per-function rewards in the rollout table."""
    (tmp_path / "score.py").write_text(
        "def exact(completion, reference, prompt):\n"
        "    right = completion.partition(';')[0].endswith('>' + reference['answer'])\n"
        "    return {'reward': float(right), 'correct': right, 'answered': float('>' in completion)}\n\n"
        "def short(completion, reference, prompt):\n"
        "    return 1.0 if len(completion) < 30 else 0.0\n"
    )
    rows = [{"problem": f"{a}+{b}=", "answer": str(a + b)} for a in range(10) for b in range(10)]
    (tmp_path / "sums.jsonl").write_text("".join(__import__("json").dumps(r) + "\n" for r in rows))
    run = tmp_path / "run.yaml"
    run.write_text(
        TOY_RUN.read_text()
        + "task:\n  name: custom\n  custom:\n    data: sums.jsonl\n    reward:\n      - function: score.py:exact\n"
        "      - {function: score.py:short, weight: 0.5}\n"
    )
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sets = [
        x
        for s in [*tiny, "train.engine=trl", "tracking.experiment=trl_custom"]
        if not s.startswith("task.")
        for x in ("--set", s)
    ]
    assert main(["run", str(run), *sets, "--tracking-uri", uri, "--quiet"]) == 0
    client, (finished,) = _runs(uri, "trl_custom")
    assert finished.info.status == "FINISHED" and finished.data.params["task.name"] == "custom"
    assert {M.ACCURACY, M.REWARD_MEAN, "task/answered", "task/reward_exact", "task/reward_short"} <= set(
        finished.data.metrics
    )
    table = __import__("pandas").read_parquet(client.download_artifacts(finished.info.run_id, "rollouts.parquet"))
    assert (table["reward"] == table["reward_task_reward"]).all()  # task_correct has weight 0
    assert (table["correct"] == (table["reward_task_correct"] == 1.0)).all()
    exact = table.apply(lambda r: r["response"].partition(";")[0].endswith(f">{eval_sum(r['prompt'])}"), axis=1)
    assert (table["correct"] == (exact & ~table["truncated"])).all()  # the function's verdict, not reward > 0
    partial = table["reward_task_reward"].isin([0.5]) & ~table["correct"]
    assert partial.any()  # a response rewarded for being short but wrong is not counted correct


def eval_sum(prompt: str) -> int:
    a, b = prompt.rstrip("=").split("+")
    return int(a) + int(b)
