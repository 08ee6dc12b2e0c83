"""The settings object: the presets (grpo, dr_grpo, dapo, gspo, cispo, sapo, luspo, vespo, lite_ppo, ngrpo) as their
papers define them, and errors that name the field."""

import inspect
import re

import pytest
from pydantic import ValidationError

import trainer.objective as objective
from trainer.objective import (
    ADVANTAGES,
    AGGREGATIONS,
    KL_ESTIMATORS,
    KL_GRADIENTS,
    LENGTH_REWARDS,
    PF_PPO_WEIGHTS,
    PRESETS,
    RATIOS,
    ROLLOUT_CORRECTIONS,
    ROLLOUT_REJECTIONS,
    SURROGATES,
    TOKEN_WEIGHTS,
    ObjectiveSettings,
)


def test_presets_match_the_guide_table():
    rows = {
        name: (
            p["advantage"],
            p["aggregation"],
            p["surrogate"],
            p["clip_low"],
            p["clip_high"],
            p["ratio"],
            p["dynamic_sampling"],
            p["overlong_filter"],
            p["overlong_penalty"],
        )
        for name, p in PRESETS.items()
    }
    assert rows == {
        "grpo": ("group_std", "seq_mean_token_mean", "clip", 0.2, 0.2, "token", False, False, False),
        "dr_grpo": ("group_mean", "constant", "clip", 0.2, 0.2, "token", False, False, False),
        "dapo": ("group_std", "token_mean", "clip", 0.2, 0.28, "token", True, True, True),
        "gspo": ("group_std", "seq_mean_token_mean", "clip", 3e-4, 4e-4, "sequence", False, False, False),
        "cispo": ("group_std", "token_mean", "cispo", 0.2, 4.0, "token", False, False, False),  # cap 1 + 4 = 5
        "sapo": ("group_std", "seq_mean_token_mean", "sapo", 0.2, 0.2, "token", False, False, False),
        "luspo": ("group_std", "seq_mean_token_sum", "clip", 3e-4, 4e-4, "sequence", False, False, False),
        "vespo": ("group_std", "token_mean", "vespo", 0.2, 0.2, "token", False, False, False),
        "lite_ppo": ("batch_std", "token_mean", "clip", 0.2, 0.2, "token", False, False, False),
        "ngrpo": ("ngrpo", "token_mean", "clip", 0.16, 0.24, "token", True, False, False),  # all-correct filter
        "mc_grpo": ("group_median_mad", "seq_mean_token_mean", "clip", 0.2, 0.2, "token", False, False, False),
        "bnpo": ("bnpo", "seq_mean_token_sum", "clip", 0.2, 0.28, "token", False, False, False),
        "reinforce_pp": ("batch_norm_tokens", "token_mean", "clip", 0.2, 0.2, "token", False, False, False),
        "reinforce_pp_baseline": (
            "group_mean_batch_norm_tokens",
            "token_mean",
            "clip",
            0.2,
            0.2,
            "token",
            False,
            False,
            False,
        ),  # fmt: skip
        "nsr": ("baseline_free", "token_mean", "clip", 0.2, 0.2, "token", False, False, False),
        "w_reinforce": ("baseline_free", "token_mean", "clip", 0.2, 0.2, "token", False, False, False),
        "gmpo": ("group_std", "seq_mean_token_mean", "gmpo", 0.4, 0.4, "token", False, False, False),  # log space
        "dppo_tv": ("group_std", "constant", "dppo_tv", 0.2, 0.2, "token", False, False, False),  # clip unused
        "dppo_kl": ("group_std", "constant", "dppo_kl", 0.2, 0.2, "token", False, False, False),
        "gpg": ("gpg", "token_mean", "gpg", 0.2, 0.2, "token", False, False, False),  # no clip
        "remax": ("remax", "seq_mean_token_sum", "clip", 0.2, 0.2, "token", False, False, False),  # clip inert
        "poise": ("poise", "token_mean", "clip", 0.2, 0.28, "token", False, False, False),  # + dual clip 10
        "spo": ("spo", "token_mean", "clip", 0.2, 0.28, "token", False, False, False),  # + dual clip 10
        "otb": ("optimal_token_baseline", "token_mean", "clip", 0.2, 0.2, "token", False, False, False),  # + dual 3
    }
    assert (PRESETS["dppo_tv"]["dppo_bounds"], PRESETS["dppo_kl"]["dppo_bounds"]) == ((0.15, 0.15), (0.05, 0.05))
    assert PRESETS["dppo_tv"]["dppo_ratio_cap"] == PRESETS["dppo_kl"]["dppo_ratio_cap"] == 10000.0
    assert PRESETS["ngrpo"]["reward_range"] == (0.0, 1.0)
    assert PRESETS["sapo"]["sapo_temperature"] == (1.0, 1.05)
    assert (PRESETS["vespo"]["vespo_k"], PRESETS["vespo"]["vespo_lambda"]) == ((2.0, 3.0), (3.0, 2.0))
    assert all(p["kl_coef"] == 0 for p in PRESETS.values())


def test_preset_fields_are_complete_and_overridable():
    assert set(PRESETS["grpo"]) == set(ObjectiveSettings.model_fields)
    s = ObjectiveSettings.preset("dr_grpo", max_len=3000, clip_high=0.28)
    assert (s.aggregation, s.max_len, s.clip_high) == ("constant", 3000, 0.28)
    with pytest.raises(ValueError, match="unknown preset 'ppo'"):
        ObjectiveSettings.preset("ppo")


def test_no_field_has_a_hidden_default():
    assert all(f.is_required() for f in ObjectiveSettings.model_fields.values())
    assert all(f.description for f in ObjectiveSettings.model_fields.values())


@pytest.mark.parametrize(
    "override, field, problem",
    [
        ({"clip_low": -0.1}, "clip_low", "greater than or equal to 0"),
        ({"clip_high": -0.2}, "clip_high", "greater than or equal to 0"),
        ({"adv_eps": -1e-6}, "adv_eps", "greater than or equal to 0"),
        ({"clip_low": 1.0}, "clip_low", "less than 1"),
        ({"dual_clip": 0.5}, "dual_clip", "greater than 1"),
        ({"kl_coef": -0.1}, "kl_coef", "greater than or equal to 0"),
        ({"max_len": 0}, "max_len", "greater than 0"),
        ({"advantage": "group_stdev"}, "advantage", "unknown advantage estimator 'group_stdev'"),
        ({"aggregation": "mean"}, "aggregation", "unknown loss aggregation 'mean'"),
        ({"ratio": "seq"}, "ratio", "unknown importance ratio level 'seq'"),
        ({"kl_estimator": "k4"}, "kl_estimator", "unknown KL estimator 'k4'"),
        ({"dynamic_sampling_key": "acc"}, "dynamic_sampling_key", "'reward' or 'correct'"),
        ({"clip_hi": 0.28}, "clip_hi", "Extra inputs are not permitted"),
        ({"clip_low": "a lot"}, "clip_low", "valid number"),
    ],
)
def test_bad_values_name_the_field(override, field, problem):
    with pytest.raises(ValidationError) as err:
        ObjectiveSettings.preset("grpo", **override)
    (e,) = err.value.errors()
    assert e["loc"] == (field,) and problem in e["msg"]


@pytest.mark.parametrize(
    "preset, override, problem",
    [
        ("dr_grpo", {}, "max_len is required when aggregation is 'constant'"),
        ("grpo", {"aggregation": "constant"}, "max_len is required"),
        ("dapo", {}, "overlong_penalty needs both max_len and overlong_cache_len"),  # nothing to derive it from
        ("grpo", {"overlong_penalty": True, "max_len": 128}, "overlong_penalty needs both"),  # dapo's default only
        ("dapo", {"max_len": 128, "overlong_cache_len": 200}, "overlong_cache_len (200) must not exceed max_len (128)"),
    ],
)
def test_impossible_combinations(preset, override, problem):
    with pytest.raises(ValidationError, match=re.escape(problem)):
        ObjectiveSettings.preset(preset, **override)


@pytest.mark.parametrize("max_len, cache", [(20480, 4096), (128, 25), (48, 9), (5, 1), (4, 1), (1, 1)])
def test_dapo_overlong_cache_defaults_to_a_fifth_of_the_budget(max_len, cache):
    """DAPO's 4096 of 20480 (arXiv 2503.14476, §3.4): max_len // 5, at least 1 token."""
    s = ObjectiveSettings.preset("dapo", max_len=max_len)
    assert (s.max_len, s.overlong_cache_len) == (max_len, cache)
    assert ObjectiveSettings.preset("dapo", max_len=max_len, overlong_cache_len=1).overlong_cache_len == 1


def test_dapo_overlong_cache_default_in_a_run_config():
    """The run-config path fills max_len from rollout.max_new_tokens, then the same default applies."""
    from harness.config.run_config import RunConfig

    cfg = RunConfig.model_validate({"objective": {"preset": "dapo"}, "rollout": {"max_new_tokens": 40}})
    assert (cfg.objective.max_len, cfg.objective.overlong_cache_len) == (40, 8)
    cfg = RunConfig.model_validate({"objective": {"preset": "dapo", "max_len": 30, "overlong_cache_len": 3}})
    assert (cfg.objective.max_len, cfg.objective.overlong_cache_len) == (30, 3)


def test_settings_are_frozen():
    s = ObjectiveSettings.preset("grpo")
    with pytest.raises(ValidationError):
        s.clip_high = 0.28


def test_every_switch_documents_its_equation_and_paper():
    """Every registered switch and every public function states its equation and where it is from."""
    registries = (
        ADVANTAGES,
        AGGREGATIONS,
        RATIOS,
        KL_ESTIMATORS,
        KL_GRADIENTS,
        SURROGATES,
        ROLLOUT_CORRECTIONS,
        LENGTH_REWARDS,
        PF_PPO_WEIGHTS,
        ROLLOUT_REJECTIONS,
    )
    fns = [fn for reg in registries for fn in map(reg.__getitem__, reg.names())]
    fns += [getattr(objective, n) for n in objective.__all__ if inspect.isfunction(getattr(objective, n))]
    fns += list(TOKEN_WEIGHTS)
    for fn in fns:
        doc = inspect.getdoc(fn) or ""
        assert any(c in doc for c in "=←∈→"), f"{fn.__name__}: no equation"
        if fn.__name__ not in {
            "merge_metrics",
            "token_logprobs",
            "token_entropy",
            "advantage_metrics",
            "group_outcome_metrics",
            "compute_advantages",
            "shape_rewards",
            "loss_mask",
        }:
            assert re.search(r"arXiv \d{4}\.\d{4,5}|Schulman 2020|Yao et al\. 2025|Liu, Li et al\. 2025", doc), (
                f"{fn.__name__}: no paper"
            )
