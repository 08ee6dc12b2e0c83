"""GDPO (arXiv 2601.05242): each reward component normalised within its group, weighted, summed, then whitened over the
batch (gdpo: per response, TRL's normalize_then_sum; gdpo_tokens: per token, verl's gdpo). By hand, where GRPO
collapses two combinations, split into micro-batches, against GRPO's update, its settings' errors, and in the loop (the
toy's format component, the overlong punishment as a component, a truncated response's components at 0)."""

from __future__ import annotations

import math
import re

import pytest
import torch
from fake_loop import UPDATE_LENGTHS, FakeBackend, FakeLM, assert_splits_agree, record_updates, split_update

from harness.config.errors import ConfigError
from harness.config.run_config import LATER_FIELDS, load_run_config
from harness.config.trl_args import grpo_args, settings_of, trl_problems
from tests.test_trl_engine import EXPRESSIBLE, TOY_RUN
from trainer.config import RolloutConfig, TrainConfig
from trainer.loop import Trainer, TrainerSettings
from trainer.objective import ADVANTAGES, ObjectiveSettings, compute_advantages
from trainer.rewards.grade import Grade, RewardComponent
from trainer.tasks.base import Group
from trainer.tasks.toy_addition import ToyAdditionTask
from trainer.tasks.toy_addition_config import ToyAdditionConfig

BOTH = ("reward", "format")


def T(*rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def _settings(advantage: str = "gdpo", **over) -> ObjectiveSettings:
    over.setdefault("reward_components", BOTH)
    return ObjectiveSettings.preset("grpo", advantage=advantage, **over)


# ---- the estimator by hand ---------------------------------------------------------------------------------------
def test_by_hand_one_group_two_components():
    """r = [1, 0, 0, 1] (mean ½, Bessel std 1/√3: ±√3/2), f = [1, 1, 0, 1] (mean ¾, std ½: ½, ½, −3/2, ½); S = their
    sum, mean 0, Bessel std √(Σ S²/3), A = S / std."""
    components = torch.stack([T([1, 0, 0, 1]), T([1, 1, 0, 1])], dim=-1)
    h = math.sqrt(3) / 2
    s = [h + 0.5, -h + 0.5, -h - 1.5, h + 0.5]
    sd = math.sqrt(sum(v * v for v in s) / 3)
    adv = ADVANTAGES["gdpo"](T([0, 0, 0, 0]), 0.0, components)
    assert adv.tolist()[0] == pytest.approx([v / sd for v in s], abs=1e-12)
    weighted = ADVANTAGES["gdpo"](T([0, 0, 0, 0]), 0.0, components, (2.0, 0.0))  # only r, doubled: then whitened
    assert weighted.tolist()[0] == pytest.approx([h, -h, -h, h], abs=1e-12)  # ±√3, Bessel std 2 over B = 4: ±√3/2


def test_keeps_apart_the_combinations_grpo_collapses():
    """The paper's case: group 1's responses score (1, 0) and (0, 0), group 2's (1, 1) and (0, 0). GRPO on the sums
    gives both groups ±1/√2; GDPO gives group 2, better on both components, twice group 1's advantage."""
    components = torch.stack([T([1, 0], [1, 0]), T([0, 0], [1, 0])], dim=-1)
    grpo = ADVANTAGES["group_std"](components.sum(-1), 0.0)
    assert torch.equal(grpo[0], grpo[1])
    adv = ADVANTAGES["gdpo"](components.sum(-1), 0.0, components)
    assert adv[1, 0].item() == pytest.approx(2 * adv[0, 0].item()) and adv[0, 0] > 0
    assert adv.sum().item() == pytest.approx(0.0, abs=1e-12)


def test_a_flat_group_keeps_the_batch_steps_signal_and_a_flat_batch_gets_zero():
    components = torch.stack([T([1, 0, 1], [1, 1, 1]), T([1, 1, 0], [0, 0, 0])], dim=-1)
    adv = ADVANTAGES["gdpo"](components[..., 0], 1e-6, components)
    assert adv[1].unique().numel() == 1 and adv[1, 0] != 0  # flat in both components: −mean_B / std_B
    flat = torch.stack([T([1, 1], [0, 0]), T([1, 1], [1, 1])], dim=-1)
    assert torch.equal(ADVANTAGES["gdpo"](flat[..., 0], 1e-6, flat), torch.zeros(2, 2, dtype=torch.float64))
    assert not ADVANTAGES.meta("gdpo").get("zeroes_flat_groups", True)


def test_gdpo_tokens_whitens_over_tokens_by_hand():
    """Each response weighs by its length: m = Σ T_i S_i / N, v = Σ T_i (S_i − m)² / (N − 1), N = Σ T_i (Bessel over
    the tokens, not the responses)."""
    components = torch.stack([T([1, 0, 0, 1]), T([1, 1, 0, 1])], dim=-1)
    rewards = T([0, 0, 0, 0])
    lengths = [1, 2, 3, 4]
    h = math.sqrt(3) / 2
    s = [h + 0.5, -h + 0.5, -h - 1.5, h + 0.5]
    n = sum(lengths)
    m = sum(t * v for t, v in zip(lengths, s)) / n
    var = sum(t * (v - m) ** 2 for t, v in zip(lengths, s)) / (n - 1)
    adv = ADVANTAGES["gdpo_tokens"](rewards, 0.0, components, torch.tensor([lengths]))
    assert adv.tolist()[0] == pytest.approx([(v - m) / math.sqrt(var) for v in s], abs=1e-7)


def test_compute_advantages_hands_the_components_to_gdpo_only():
    s = _settings()
    components = torch.stack([T([1, 0]), T([0, 1])], dim=-1)
    assert compute_advantages(T([1, 0]), s, components=components).tolist() == [[0.0, 0.0]]  # ±1 each: sums 0
    with pytest.raises(ValueError, match="needs each response's reward components"):
        compute_advantages(T([1, 0]), s)
    with pytest.raises(ValueError, match="reward_weights has 1 weights for 2 reward components"):
        ADVANTAGES["gdpo"](T([1, 0]), 0.0, components, (1.0,))


# ---- the settings ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "over, message",
    [
        ({"advantage": "gdpo", "reward_components": None}, "reward_components is set exactly when advantage is gdpo"),
        ({"advantage": "group_std"}, "reward_components is set exactly when advantage is gdpo"),
        ({"reward_weights": (1.0,)}, "reward_weights has 1 weights for 2 reward_components"),
        ({"reward_weights": (1.0, math.nan)}, "reward_weights"),
        ({"reward_components": ("reward", "reward")}, "reward_components must be distinct"),
        ({"reward_components": ("reward", "overlong")}, "reward_components names overlong: it needs overlong_penalty"),
        (
            {"overlong_penalty": True, "max_len": 8, "overlong_cache_len": 2},
            "overlong_penalty under advantage gdpo is one of its reward components",
        ),
        ({"kl_reward_coef": 0.1}, "kl_reward_coef (0.1): advantage gdpo normalises the reward's components"),
    ],
)
def test_bad_settings_are_one_line_errors(over, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        _settings(**over)


def test_reward_weights_need_reward_components():
    with pytest.raises(ValueError, match="reward_weights needs reward_components"):
        ObjectiveSettings.preset("grpo", reward_weights=(1.0,))


def test_the_new_fields_enter_a_job_id_only_when_set_and_the_toy_names_its_components():
    assert LATER_FIELDS["objective.reward_components"] is None and LATER_FIELDS["objective.reward_weights"] is None
    objective = load_run_config(TOY_RUN, []).identity()["objective"]
    assert not {"reward_components", "reward_weights"} & set(objective)
    cfg = load_run_config(TOY_RUN, ["objective.advantage=gdpo", "objective.reward_components=[reward,format]"])
    assert cfg.identity()["objective"]["reward_components"] == ["reward", "format"]
    with pytest.raises(ConfigError, match=r"objective.reward_components: 'answered' is not a reward component"):
        load_run_config(TOY_RUN, ["objective.advantage=gdpo", "objective.reward_components=[reward,answered]"])


def test_trl_maps_gdpo_to_normalize_then_sum_and_reads_it_back():
    import trl

    sets = ["objective.advantage=gdpo", "objective.reward_components=[reward,format]"]
    sets.append("objective.reward_weights=[1,0.5]")
    cfg = load_run_config(TOY_RUN, ["train.engine=trl", *EXPRESSIBLE, *sets])
    args = grpo_args(cfg.objective, cfg.rollout, cfg.train)
    assert args["multi_objective_aggregation"] == "normalize_then_sum"
    assert (
        grpo_args(_settings(advantage="group_std", reward_components=None), cfg.rollout, cfg.train)[
            "multi_objective_aggregation"
        ]
        == "sum_then_normalize"
    )

    def accuracy(**_):
        return []

    def fmt(**_):
        return []

    built = trl.GRPOConfig(output_dir="unused", report_to="none", bf16=False, reward_weights=[1.0, 0.5], **args)
    back = settings_of(built, built.max_steps, [accuracy, fmt])["objective"]
    assert (back["advantage"], back["reward_components"], back["reward_weights"]) == (
        "gdpo",
        ["accuracy", "fmt"],
        [1.0, 0.5],
    )


def test_trl_refuses_gdpo_tokens_and_gdpos_epsilon_in_one_line():
    sets = ["objective.advantage=gdpo_tokens", "objective.reward_components=[reward,format]"]
    with pytest.raises(ConfigError) as err:
        load_run_config(TOY_RUN, ["train.engine=trl", *EXPRESSIBLE, *sets])
    assert "\n" not in str(err.value) and "objective.advantage: gdpo_tokens (TRL's normalize_then_sum" in str(err.value)
    cfg = load_run_config(TOY_RUN, ["objective.advantage=gdpo", "objective.reward_components=[reward,format]"])
    assert trl_problems(cfg.objective, cfg.rollout, cfg.train)[0].startswith("objective.adv_eps: 1e-06")


# ---- the update: split into micro-batches, and unlike GRPO's -------------------------------------------------------
COMPONENTS = torch.stack([T([1, 0, 0, 1], [0, 0, 0, 1]), T([1, 1, 0, 1], [1, 0, 1, 1])], dim=-1)
LENGTHS = UPDATE_LENGTHS


def _update(s: ObjectiveSettings, splits: int) -> tuple[float, dict[str, float], torch.Tensor]:
    rewards = COMPONENTS[..., 0]
    adv = compute_advantages(rewards, s, lengths=LENGTHS.view(2, 4), components=COMPONENTS).flatten()
    return split_update(s, adv, splits)


@pytest.mark.parametrize("advantage", ["gdpo", "gdpo_tokens"])
def test_micro_batch_invariance(advantage):
    s = _settings(advantage)
    assert assert_splits_agree(lambda splits: _update(s, splits))["policy/clip_frac"] > 0


@pytest.mark.parametrize("advantage", ["gdpo", "gdpo_tokens"])
def test_changes_the_update_from_grpos(advantage):
    _, _, mine = _update(_settings(advantage), 1)
    _, _, grpo = _update(ObjectiveSettings.preset("grpo"), 1)
    assert (mine - grpo).abs().max().item() > 1e-3


# ---- the loop ----------------------------------------------------------------------------------------------------
class FormatTask:
    """Problems p0, p1; sample j's reward is `rewards[p][j]` and its format component `formats[p][j]`."""

    name = "fake"

    def __init__(self, rewards, formats):
        self.rewards, self.formats = rewards, formats

    def sample_groups(self, rng, num_groups, group_size):
        return [Group(f"p{k}", "", tuple(f"{k}:{j}" for j in range(group_size))) for k in range(num_groups)]

    def grade(self, group, index, completion):
        reward = self.rewards[group.problem_id][index]
        fmt = (RewardComponent("format", self.formats[group.problem_id][index]),)
        return Grade(reward, reward == 1.0, components=fmt)

    def step_metrics(self, groups, grades, lengths):
        return {}


def _loop(task, objective: ObjectiveSettings, backend=None):
    settings = TrainerSettings(
        objective,
        RolloutConfig(prompts_per_step=2, group_size=4, max_new_tokens=8, temperature=0.7),
        TrainConfig(steps=1, device="cpu", reference_kl=False),
        0,
    )
    tr = Trainer(FakeLM(), task, backend or FakeBackend(), 0, settings)
    return tr, record_updates(tr)


REWARDS = {"p0": [1, 0, 0, 1], "p1": [0, 0, 0, 1]}
FORMATS = {"p0": [1, 1, 0, 1], "p1": [1, 0, 1, 1]}


def test_the_loop_hands_the_tasks_components_to_gdpo():
    tr, seen = _loop(FormatTask(REWARDS, FORMATS), _settings(max_len=8))
    tr.step(1)
    want = ADVANTAGES["gdpo"](COMPONENTS[..., 0], 1e-6, COMPONENTS).flatten().float()
    assert seen[0] == pytest.approx(want.tolist(), abs=1e-6)


def test_the_overlong_punishment_enters_as_a_component():
    """FakeBackend's sample j has j + 1 tokens; L_max 4, cache 2: lengths 1, 2 → 0, 3 → −½, 4 → −1."""
    s = _settings(reward_components=("reward", "overlong"), max_len=4, overlong_penalty=True, overlong_cache_len=2)
    tr, seen = _loop(FormatTask(REWARDS, FORMATS), s)
    tr.step(1)
    over = T([0, 0, -0.5, -1], [0, 0, -0.5, -1])
    want = ADVANTAGES["gdpo"](COMPONENTS[..., 0], 1e-6, torch.stack([COMPONENTS[..., 0], over], dim=-1))
    assert seen[0] == pytest.approx(want.flatten().tolist(), abs=1e-6)


def test_a_component_the_task_does_not_grade_is_a_one_line_error():
    tr, _ = _loop(FormatTask(REWARDS, FORMATS), _settings(reward_components=("reward", "length"), max_len=8))
    with pytest.raises(ValueError, match=r"^objective.reward_components: task fake grades no 'length' component"):
        tr.step(1)


def test_a_truncated_response_has_every_component_at_zero_and_the_toy_grades_its_format():
    grade = Grade(1.0, True, components=(RewardComponent("format", 1.0),))
    assert grade.unanswered() == Grade(0.0, False, components=(RewardComponent("format", 0.0),))
    toy = ToyAdditionTask(ToyAdditionConfig())
    group = Group("12+34", "46", ("12+34=",))
    assert toy.grade(group, 0, "2+4=06;1+3=04;>46;ab").component("format") == 1.0
    assert toy.grade(group, 0, "2+4=06;1+3=04;>47;ab").component("format") == 1.0  # wrong, but well formed
    assert toy.grade(group, 0, "2+4=06;1+3").component("format") == 0.0
    assert ToyAdditionConfig().reward_components == ("format",)


# ---- a real job under each engine ----------------------------------------------------------------------------------
@pytest.mark.parametrize("engine", ["harness", "trl"])
def test_a_gdpo_job_trains_under_each_engine_and_trls_advantages_are_harnesss(tmp_path, tiny_run_overrides, engine):
    """A 3-step job on the tiny toy: under TRL, one reward function per component (task_reward, task_format, the
    correctness at weight 0), and TRL's advantages equal harness's `gdpo` of the logged components, step by step (TRL
    computes in float32); the logged reward is the task's, not the weighted sum."""
    from mlflow.tracking import MlflowClient

    from harness.cli import main
    from trainer.models.toy import ensure_toy_model

    cfg = load_run_config(TOY_RUN, tiny_run_overrides)
    ensure_toy_model(cfg.model.toy, cfg.model.cache_dir)
    sets = [*tiny_run_overrides, *EXPRESSIBLE, f"train.engine={engine}", f"tracking.experiment=gdpo_{engine}"]
    sets += [
        "objective.advantage=gdpo",
        "objective.reward_components=[reward,format]",
        "objective.reward_weights=[1,0.5]",
    ]
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["run", str(TOY_RUN), *[x for s in sets for x in ("--set", s)], "--tracking-uri", uri, "--quiet"]) == 0
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name(f"gdpo_{engine}").experiment_id])
    assert run.info.status == "FINISHED" and run.data.params["objective.advantage"] == "gdpo"
    table = __import__("pandas").read_parquet(client.download_artifacts(run.info.run_id, "rollouts.parquet"))
    assert len(table) == 3 * 4 * 4 and table["advantage"].notna().all() and (table["advantage"] != 0).any()
    if engine == "harness":
        return
    assert (table["reward"] == table["reward_task_reward"]).all()  # the task's reward, not 1·r + 0.5·format
    for _, step in table.groupby("step"):
        comps = torch.tensor(step[["reward_task_reward", "reward_task_format"]].to_numpy()).view(4, 4, 2)
        want = ADVANTAGES["gdpo"](comps[..., 0], 1e-4, comps, (1.0, 0.5)).flatten()
        assert step["advantage"].tolist() == pytest.approx(want.tolist(), abs=1e-5)
