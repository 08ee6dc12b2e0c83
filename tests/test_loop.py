"""The training loop on the tiny toy model: dynamic sampling, several optimiser steps, micro-batches."""

import math
from pathlib import Path

import pytest
import torch

from harness.config.run_config import load_run_config
from trainer import metric_names as M
from trainer.loop import Trainer, TrainerSettings
from trainer.models.load import load_policy
from trainer.models.toy import ensure_toy_model
from trainer.rollout.hf import TransformersBackend
from trainer.tasks.toy_addition import ToyAdditionTask

TOY_RUN = Path(__file__).resolve().parents[1] / "ablations" / "toy_run.yaml"


def _trainer(overrides, *extra, device: str = "cpu"):
    cfg = load_run_config(TOY_RUN, [*overrides, *extra])
    torch.set_num_threads(1)
    path = str(ensure_toy_model(cfg.model.toy, cfg.model.cache_dir))
    policy, tok = load_policy(path, torch.device(device), cfg.model.dtype)
    return Trainer(
        policy,
        ToyAdditionTask(cfg.task.toy_addition),
        TransformersBackend(policy, tok),
        tok.pad_token_id,
        TrainerSettings.of(cfg),
    )


def test_dynamic_sampling_fills_the_batch_with_mixed_groups(tiny_run_overrides):
    tr = _trainer(tiny_run_overrides, "objective.preset=dapo", "objective.overlong_cache_len=8")
    metrics = [tr.step(step) for step in (1, 2)]
    rows = tr.rollout_table()
    kept = rows[rows["kept"]]
    assert len(kept) == 2 * 4 * 4  # the batch is full: prompts_per_step groups of G every step
    per_group = kept.groupby(["step", "round", "prompt_id"])["correct"].agg(["min", "max"])
    assert (per_group["min"] != per_group["max"]).all()  # every kept group is mixed
    dropped = rows[~rows["kept"]]
    assert dropped["advantage"].isna().all() and kept["advantage"].notna().all()
    # DAPO's soft punishment (budget 48, cache 8): free up to 40 tokens, then −1/8 per token
    expected = rows["reward"] + rows["length"].map(lambda n: 0.0 if n <= 40 else -min(1.0, (n - 40) / 8))
    assert rows["shaped_reward"].tolist() == pytest.approx(expected.tolist())
    assert (rows["length"] > 40).any()  # the punishment was exercised
    # every generated group is either kept, dropped (and counted), or surplus beyond a full batch
    generated = rows.groupby("step")["round"].max().to_dict()
    assert [m[M.GEN_ROUNDS] for m in metrics] == [generated[1], generated[2]]
    assert sum(m[M.GROUPS_DROPPED] for m in metrics) * 4 <= len(dropped)


def test_several_optimiser_steps_make_gspo_clip(tiny_run_overrides):
    tr = _trainer(tiny_run_overrides, "objective.preset=gspo", "train.mini_batches=2", "train.epochs=2")
    # a step whose groups all solve or all fail has no advantage, so no update and nothing to clip; which
    # step first has a mixed group depends on the toy the session built (its float sums follow the threads)
    m = next(m for m in map(tr.step, range(1, 6)) if m[M.GROUPS_MIXED_FRAC] > 0)
    assert m[M.CLIP_FRAC] > 0  # with 3e-4/4e-4, sequence-level clipping acts once the policy has moved
    # GSPO's clip_frac counts responses; every token of a clipped response counts as clipped
    assert m[M.CLIP_FRAC_SEQS] == pytest.approx(m[M.CLIP_FRAC]) and m[M.CLIP_FRAC_TOKENS] > 0
    tr = _trainer(tiny_run_overrides, "objective.preset=gspo")
    assert tr.step(1)[M.CLIP_FRAC] == 0  # one on-policy step: ratio 1, nothing to clip


NEWER = (  # every 2025-26 switch at once: the clipping form, both masks, the rollout weight, adaptive entropy
    "objective.top_entropy_quantile=0.5",
    "objective.entropy_coef=0.01",
    "objective.entropy_target=5.0",
    "objective.entropy_coef_step=0.01",
    "objective.entropy_coef_max=0.05",
    "objective.off_policy_threshold=0.01",
    "objective.rollout_correction=token_truncate",
    "objective.rollout_correction_max=2.0",
    "objective.clip_cov_ratio=0.05",
    "objective.clip_cov_bounds=[0.0,5.0]",
)
KL_COV = ("objective.surrogate=kl_cov", "objective.kl_cov_ratio=0.05", "objective.kl_cov_coef=1.0")


@pytest.mark.parametrize(
    "preset, extra",
    [
        ("grpo", ()),
        ("dr_grpo", ()),
        ("gspo", ()),
        ("cispo", NEWER),
        ("sapo", ()),
        ("vespo", ()),
        ("grpo", KL_COV),
        ("nsr", ()),
        ("ngrpo", ()),
        ("reinforce_pp", ()),
    ],  # fmt: skip
)
def test_micro_batches_and_length_buckets_do_not_change_the_update(tiny_run_overrides, preset, extra):
    """One forward/backward over the whole padded batch, against length-sorted buckets cut to their own longest
    response (4 buckets, and micro-batches of 3 within 1 bucket): same loss, metrics and weights after 2 steps."""
    runs = []
    for micro, buckets in (("null", 1), ("null", 4), ("3", 1)):
        tr = _trainer(
            tiny_run_overrides,
            f"objective.preset={preset}",
            f"train.micro_batch_size={micro}",
            f"train.length_buckets={buckets}",
            "train.mini_batches=2",
            *extra,
        )
        metrics = [tr.step(s) for s in (1, 2)]
        runs.append((metrics, [p.detach().clone() for p in tr.policy.parameters()]))
    (m1, p1), *others = runs
    if extra == NEWER:  # the adaptive coefficient starts off (no entropy measured yet) and rises below the target
        assert m1[0][M.ENTROPY_COEF] < m1[1][M.ENTROPY_COEF]
    for m2, p2 in others:
        for a, b in zip(m1, m2):
            for key in (M.LOSS, M.ENTROPY, M.KL, M.ACCURACY, M.ADV_MEAN, M.CLIP_FRAC, M.RATIO_MAX, M.GRAD_NORM):
                assert a[key] == pytest.approx(b[key], abs=1e-5), key
            newer = (M.ENTROPY_TRAINED, M.ENTROPY_COEF, M.OFF_POLICY_MASKED_FRAC, M.ROLLOUT_WEIGHT_MEAN)
            assert all(key in a for key in newer) == (extra == NEWER)
            assert (M.COV_SELECTED_FRAC in a) == bool(extra)
            for key in (*newer, M.COV_SELECTED_FRAC) if extra == NEWER else ():
                assert a[key] == pytest.approx(b[key], abs=1e-5), key
        assert max((x - y).abs().max().item() for x, y in zip(p1, p2)) < 1e-4


def test_length_buckets_are_sorted_and_cut_to_their_longest_response(tiny_run_overrides):
    tr = _trainer(tiny_run_overrides, "train.length_buckets=3")
    lengths = [5, 1, 9, 3, 7, 2, 8]
    t = {"resp_mask": (torch.arange(10)[None, :] < torch.tensor(lengths)[:, None]).long()}
    got = [(rows.tolist(), width) for rows, width in tr._micro(torch.arange(7), t)]
    assert got == [([2, 6, 4], 9), ([0, 3, 5], 5), ([1], 1)]
    tr.micro_size = 2  # a smaller micro-batch (e.g. after an out-of-memory error) wins
    assert [w for _, w in tr._micro(torch.arange(7), t)] == [9, 7, 3, 1]


def test_cuda_out_of_memory_halves_the_micro_batch_and_keeps_the_update(tiny_run_overrides, monkeypatch):
    """A forward over more than 4 responses 'runs out of memory' (simulated on CPU): the trainer halves the
    micro-batch until it fits (16 → 8 → 4), redoes the mini-batch, and ends where a run with 4 from the
    start ends."""
    reference = _trainer(tiny_run_overrides, "train.micro_batch_size=4")
    expected = [reference.step(s) for s in (1, 2)]
    tr = _trainer(tiny_run_overrides, "train.length_buckets=1")  # a whole mini-batch (16 responses) per forward
    stats = tr._stats

    def small_only(model, t, rows, width, entropy="none"):
        if rows.numel() > 4:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return stats(model, t, rows, width, entropy)

    monkeypatch.setattr(tr, "_stats", small_only)
    got = [tr.step(s) for s in (1, 2)]
    assert tr.micro_size == 4 and [m[M.MICRO_BATCH] for m in got] == [4.0, 4.0]
    for a, b in zip(expected, got):
        for key in (M.LOSS, M.ENTROPY, M.KL, M.GRAD_NORM):
            assert a[key] == pytest.approx(b[key], abs=1e-5), key
    assert max((x - y).abs().max().item() for x, y in zip(reference.policy.parameters(), tr.policy.parameters())) < 1e-5


def test_out_of_memory_at_one_response_is_raised(tiny_run_overrides, monkeypatch):
    tr = _trainer(tiny_run_overrides, "train.micro_batch_size=1")

    def never(model, t, rows, width, entropy="none"):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setattr(tr, "_stats", never)
    with pytest.raises(torch.cuda.OutOfMemoryError):
        tr.step(1)


def test_non_finite_parameters_fail_as_divergence_not_at_the_next_generation(tiny_run_overrides):
    """lr = inf (which validation refuses; a divergence looks the same) turns the weights to inf/NaN
    with a finite loss and gradient. The step that did it fails naming the lr, instead of the next
    step's sampling failing with "index 47 is out of bounds" from NaN probabilities."""
    from trainer.loop import TrainingDiverged

    tr = _trainer(tiny_run_overrides)
    for group in tr.optimiser.param_groups:
        group["lr"] = float("inf")
    tr.schedule.base_lrs = [float("inf")] * len(tr.schedule.base_lrs)
    with pytest.raises(
        TrainingDiverged,
        match=r"diverged at step 1: parameters are non-finite after the "
        r"optimiser step \(lr inf\)",
    ):
        tr.step(1)


def test_grade_timeouts_are_counted_per_step():
    """train/grade_timeouts counts the step's answers whose grading ran out of time (graded wrong)."""
    from trainer.loop import Samples, rollout_metrics
    from trainer.rewards.grade import Grade
    from trainer.tasks.base import Group

    grades = [Grade(1.0, True), Grade(0.0, False, timed_out=True), Grade(0.0, False), Grade(0.0, False, timed_out=True)]
    s = Samples(
        [Group("p", "5", ("",) * 4)],
        [[1]] * 4,
        [[2]] * 4,
        torch.zeros(4, dtype=torch.bool),
        torch.tensor([3, 4, 5, 6]),
        grades,
        [""] * 4,
        [1] * 4,
        [[-0.5]] * 4,
    )
    metrics = rollout_metrics(s, torch.tensor([1.0, 0.0, 0.0, 0.0]))
    assert metrics[M.GRADE_TIMEOUTS] == 2.0 and metrics[M.ACCURACY] == 0.25


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("preset", ["grpo", "dr_grpo", "dapo", "gspo"])
def test_the_loop_trains_on_cuda_in_bf16(tiny_run_overrides, preset):
    """On a GPU the `auto` dtype is bf16: every step's metrics are finite and the policy moves."""
    tr = _trainer(tiny_run_overrides, f"objective.preset={preset}", device="cuda")
    assert tr.policy.dtype == torch.bfloat16 and tr.policy.device.type == "cuda"
    before = [p.detach().clone() for p in tr.policy.parameters()]
    metrics = [tr.step(step) for step in range(1, 6)]
    assert all(math.isfinite(v) for m in metrics for v in m.values()), metrics
    assert any(not torch.equal(a, p) for a, p in zip(before, tr.policy.parameters()))
