"""The reference refreshed from the policy (train.reference_sync_steps, reference_mixup_alpha; TR-DPO, TRL's
sync_ref_model): the mixup by hand, the loop refreshing at exactly the configured steps, the update it changes, off
as the same step bit for bit, and the fields entering a job id only when set."""

import math
from pathlib import Path

import pytest
import torch
from fake_loop import FakeBackend, FakeLM, TableTask

from harness.config.run_config import LATER_FIELDS, load_run_config
from trainer import metric_names as M
from trainer.config import RolloutConfig, TrainConfig
from trainer.loop import Trainer, TrainerSettings
from trainer.objective import ObjectiveSettings
from trainer.reference import ReferenceRefresh, mixup

TOY_RUN = Path(__file__).resolve().parents[1] / "ablations" / "toy_run.yaml"


def _linear(weight: list[list[float]], bias: list[float]) -> torch.nn.Linear:
    layer = torch.nn.Linear(2, 2).double()
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(weight, dtype=torch.float64))
        layer.bias.copy_(torch.tensor(bias, dtype=torch.float64))
    return layer


REF = _linear([[1.0, 2.0], [3.0, 4.0]], [0.0, 1.0])
POLICY = _linear([[2.0, 0.0], [1.0, -1.0]], [5.0, -5.0])


def test_the_mixup_by_hand():
    """α·θ + (1 − α)·θ_ref: at α = 0.6, weight 0.4·[[1, 2], [3, 4]] + 0.6·[[2, 0], [1, −1]] = [[1.6, 0.8], [1.8, 1]]
    and bias 0.4·[0, 1] + 0.6·[5, −5] = [3, −2.6]; at α = 1, the policy's values exactly."""
    ref, policy = dict(REF.named_parameters()), dict(POLICY.named_parameters())
    before = {k: v.detach().clone() for k, v in ref.items()}
    mixed = mixup(ref, policy, 0.6)
    assert mixed["weight"].flatten().tolist() == pytest.approx([1.6, 0.8, 1.8, 1.0], abs=1e-15)
    assert mixed["bias"].tolist() == pytest.approx([3.0, -2.6], abs=1e-15)
    assert all(torch.equal(ref[k], before[k]) for k in ref)  # the inputs untouched
    copied = mixup(ref, policy, 1.0)
    assert all(torch.equal(copied[k], policy[k]) for k in policy)
    with pytest.raises(ValueError, match="different parameters"):
        mixup(ref, {"weight": policy["weight"]}, 0.6)


def test_a_refresh_moves_the_reference_in_place_and_measures_the_move():
    """The move's L2 norm is α·‖θ − θ_ref‖: ‖[[1, −2], [−2, −5], [5, −6]]‖ = √95, times 0.6."""
    ref = _linear([[1.0, 2.0], [3.0, 4.0]], [0.0, 1.0])
    refresh = ReferenceRefresh(every=3, alpha=0.6)
    assert refresh(2, ref, POLICY) == {M.REF_REFRESH_STEP: 0.0}  # not due: untouched
    assert ref.weight.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    metrics = refresh(3, ref, POLICY)
    assert metrics[M.REF_REFRESH_STEP] == 3.0
    assert metrics[M.REF_REFRESH_DISTANCE] == pytest.approx(0.6 * math.sqrt(95), abs=1e-12)
    assert ref.weight.flatten().tolist() == pytest.approx([1.6, 0.8, 1.8, 1.0], abs=1e-15)
    assert refresh(4, ref, POLICY) == {M.REF_REFRESH_STEP: 3.0}
    assert ReferenceRefresh(None, None)(3, ref, POLICY) == {}  # off: nothing, no metric


# ---- the loop -------------------------------------------------------------------------------------------------
def _trainer(every: int | None = None, alpha: float | None = None, kl_coef: float = 0.5) -> Trainer:
    settings = TrainerSettings(
        ObjectiveSettings.preset("grpo", max_len=8, kl_coef=kl_coef),
        RolloutConfig(prompts_per_step=2, group_size=4, max_new_tokens=8),
        TrainConfig(steps=6, device="cpu", lr=0.05, reference_sync_steps=every, reference_mixup_alpha=alpha),
        0,
    )
    # rewards whose gradients do not cancel between the two groups (the fake responses are the same in both)
    return Trainer(
        FakeLM(), TableTask({"p0": [1.0, 0.0, 0.0, 0.0], "p1": [1.0, 1.0, 0.0, 0.0]}), FakeBackend(), 0, settings
    )


def _params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def test_the_loop_refreshes_at_exactly_the_configured_steps():
    """Every 2 steps at α = 0.6: after steps 2, 4 and 6 the reference is the mixup of itself and the policy the step
    left; after 1, 3 and 5 it has not moved."""
    tr = _trainer(every=2, alpha=0.6)
    logged = []
    for step in range(1, 7):
        before = _params(tr.ref)
        metrics = tr.step(step)
        after = _params(tr.ref)
        if step % 2:
            assert all(torch.equal(after[k], before[k]) for k in before), step
            assert M.REF_REFRESH_DISTANCE not in metrics
        else:
            expected = mixup(before, _params(tr.policy), 0.6)
            assert all(torch.equal(after[k], expected[k]) for k in before), step
            assert metrics[M.REF_REFRESH_DISTANCE] > 0
        logged.append(metrics[M.REF_REFRESH_STEP])
    assert logged == [0.0, 2.0, 2.0, 4.0, 4.0, 6.0]
    assert {M.REF_REFRESH_STEP, M.REF_REFRESH_DISTANCE} <= M.ALL


def test_a_refresh_changes_the_next_update_with_a_kl_term():
    """With a KL in the loss, a reference refreshed after step 1 gives step 2 another KL and another update; step 1,
    before any refresh, is the same."""
    fixed, synced = _trainer(), _trainer(every=1, alpha=1.0)
    first = fixed.step(1), synced.step(1)
    assert first[0][M.LOSS] == first[1][M.LOSS]
    assert all(torch.equal(a, b) for a, b in zip(fixed.policy.parameters(), synced.policy.parameters()))
    second = fixed.step(2), synced.step(2)
    assert second[0][M.KL] != second[1][M.KL]
    assert any(not torch.equal(a, b) for a, b in zip(fixed.policy.parameters(), synced.policy.parameters()))


def test_off_is_the_same_step_bit_for_bit():
    """With the refresh off the loop's call does nothing: the steps of a trainer whose refresh is removed from the
    loop altogether give the same parameters and metrics, and the reference never moves."""
    off, without = _trainer(), _trainer()
    without.refresh = lambda step, reference, policy: {}
    start = _params(off.ref)
    for step in (1, 2, 3):
        a, b = off.step(step), without.step(step)
        timing = {M.GENERATE_S, M.UPDATE_S, M.STEP_S, M.TOKENS_PER_S, M.DECODE_STEP_S}  # wall clock
        assert {k: v for k, v in a.items() if k not in timing} == {k: v for k, v in b.items() if k not in timing}
    assert all(torch.equal(a, b) for a, b in zip(off.policy.parameters(), without.policy.parameters()))
    assert all(torch.equal(v, start[k]) for k, v in _params(off.ref).items())
    assert not {M.REF_REFRESH_STEP, M.REF_REFRESH_DISTANCE} & set(a)


def test_the_trainer_refuses_a_refresh_with_no_reference():
    with pytest.raises(ValueError, match=r"^train.reference_sync_steps: 2 refreshes the reference policy, but"):
        settings = TrainerSettings(
            ObjectiveSettings.preset("grpo", max_len=8),
            RolloutConfig(prompts_per_step=2, group_size=4, max_new_tokens=8),
            TrainConfig(steps=2, device="cpu", reference_kl=False, reference_sync_steps=2, reference_mixup_alpha=1.0),
            0,
        )
        Trainer(FakeLM(), TableTask({"p0": [1.0, 0.0] * 2}), FakeBackend(), 0, settings)


# ---- the config -----------------------------------------------------------------------------------------------
def test_the_fields_enter_a_job_id_only_when_set():
    assert LATER_FIELDS["train.reference_sync_steps"] is None and LATER_FIELDS["train.reference_mixup_alpha"] is None
    plain = load_run_config(TOY_RUN, [])
    assert not {"reference_sync_steps", "reference_mixup_alpha"} & set(plain.identity()["train"])
    synced = load_run_config(TOY_RUN, ["train.reference_sync_steps=4", "train.reference_mixup_alpha=0.6"])
    assert (
        synced.identity()["train"]["reference_sync_steps"],
        synced.identity()["train"]["reference_mixup_alpha"],
    ) == (
        4,
        0.6,
    )
    assert synced.config_hash != plain.config_hash
