"""Chunked log-probabilities and entropies (trainer/logprobs.py): `ChunkedHead` against autograd through the whole
logits, the probe that decides where it applies, and the update's loss, gradients and metrics through it equal to the
whole-logits path's, in float64, on the toy's model class and a tiny Qwen2 with a larger vocabulary."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from fake_loop import FakeLM
from transformers import Qwen2Config, Qwen2ForCausalLM

from trainer.config import RolloutConfig, TrainConfig
from trainer.logprobs import ChunkedHead, OutputHead, chunk_rows, chunks, output_head
from trainer.loop import Trainer, TrainerSettings
from trainer.models.char_tokenizer import build_char_tokenizer
from trainer.models.toy import _new_model
from trainer.models.toy_config import ToyModelConfig
from trainer.objective import ObjectiveSettings, loss_mask, token_entropy, token_logprobs
from trainer.tasks.toy_addition import CHARS

F64 = torch.float64


def _head_case(n=3, width=4, hidden=5, vocab=11, bias=True, dtype=F64, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, width, hidden, generator=g, dtype=F64).to(dtype).requires_grad_()
    w = torch.randn(vocab, hidden, generator=g, dtype=F64).to(dtype).requires_grad_()
    b = torch.randn(vocab, generator=g, dtype=F64).to(dtype).requires_grad_() if bias else None
    tokens = torch.randint(vocab, (n, width), generator=g)
    return h, w, b, tokens, g


# ---- the autograd function --------------------------------------------------------------------------------------
def test_chunks_are_whole_rows_when_a_row_fits_else_blocks_of_one_row():
    assert chunks(5, 4, 9) == [(slice(0, 2), slice(None)), (slice(2, 4), slice(None)), (slice(4, 6), slice(None))]
    assert chunks(2, 5, 2) == [(slice(i, i + 1), slice(j, j + 2)) for i in range(2) for j in (0, 2, 4)]


@pytest.mark.parametrize("rows", [3, 8])  # blocks of 3, 3 and 1 positions of each row; 2 rows and 1 row
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("trained_entropy", [True, False])
def test_the_chunked_head_gives_the_values_and_gradients_of_the_whole_logits(rows, bias, trained_entropy):
    """At temperature 0.7, against token_logprobs / token_entropy on the whole logits: the same values, and the same
    gradients of Σ g·log π (+ Σ g'·H when the entropy is trained)."""
    h, w, b, tokens, g = _head_case(width=7, bias=bias)
    g_logp, g_entropy = torch.randn(3, 7, generator=g, dtype=F64), torch.randn(3, 7, generator=g, dtype=F64)
    inputs = [x for x in (h, w, b) if x is not None]

    logits = F.linear(h, w, b) / 0.7
    want_logp, want_entropy = token_logprobs(logits, tokens), token_entropy(logits)
    loss = (g_logp * want_logp).sum() + ((g_entropy * want_entropy).sum() if trained_entropy else 0)
    want_grads = torch.autograd.grad(loss, inputs)

    logp, entropy = ChunkedHead.apply(h, w, b, tokens, 0.7, rows, True)
    torch.testing.assert_close(logp, want_logp, rtol=0, atol=1e-12)
    torch.testing.assert_close(entropy, want_entropy, rtol=0, atol=1e-12)
    loss = (g_logp * logp).sum() + ((g_entropy * entropy).sum() if trained_entropy else 0)
    for got, want in zip(torch.autograd.grad(loss, inputs), want_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_the_chunked_head_passes_gradcheck():
    h, w, b, tokens, _ = _head_case(n=2, width=3, hidden=3, vocab=6)
    assert torch.autograd.gradcheck(lambda h, w, b: ChunkedHead.apply(h, w, b, tokens, 1.3, 2, True), (h, w, b))
    assert torch.autograd.gradcheck(lambda h, w: ChunkedHead.apply(h, w, None, tokens, 0.5, 6, False)[0], (h, w))


def test_a_rows_values_do_not_depend_on_the_other_rows_nor_their_order():
    """Cut into blocks, a row gives the same bits alone or among other rows; in chunks of whole rows, the same bits
    among the same rows in another order (what keeps an on-policy log ratio at exactly 0 when the old log-probabilities
    came from micro-batches of the same rows in another order, as with the whole logits)."""
    h, w, _, tokens, _ = _head_case(n=4, width=5, hidden=16, vocab=40, bias=False, dtype=torch.float32)
    blocks = ChunkedHead.apply(h, w, None, tokens, 1.0, 2, True)  # 2 positions a chunk: each row in 3 blocks
    alone = ChunkedHead.apply(h[2:3], w, None, tokens[2:3], 1.0, 2, True)
    assert all(torch.equal(a[2], b[0]) for a, b in zip(blocks, alone))
    rows = ChunkedHead.apply(h, w, None, tokens, 1.0, 11, True)  # 2 whole rows a chunk
    order = [3, 2, 0, 1]  # row 2 moves from the second chunk's first place to the first chunk's second
    moved = ChunkedHead.apply(h[order], w, None, tokens[order], 1.0, 11, True)
    assert all(torch.equal(a[2], b[1]) for a, b in zip(rows, moved))


def test_without_the_entropy_it_returns_none_of_it_and_the_log_probs_unchanged():
    h, w, b, tokens, _ = _head_case()
    logp, entropy = ChunkedHead.apply(h, w, b, tokens, 1.0, 2, False)
    assert entropy.numel() == 0
    assert torch.equal(logp, ChunkedHead.apply(h, w, b, tokens, 1.0, 2, True)[0])


def test_bf16_logits_are_made_in_the_model_dtype_then_upcast_to_float32():
    """A bf16 output layer: the logits are rounded to bf16 (as the model's own would be), then the log-softmax and
    entropy run in float32, not in bf16 (whose error would be ~1e-2 here); the gradients come back in bf16."""
    h, w, _, tokens, g = _head_case(n=2, width=3, hidden=16, vocab=50, bias=False, dtype=torch.bfloat16)
    logp, entropy = ChunkedHead.apply(h, w, None, tokens, 0.7, 4, True)
    assert logp.dtype == entropy.dtype == torch.float32
    reference = F.linear(h.detach(), w.detach()).double() / 0.7  # the bf16 logits, then exact arithmetic
    torch.testing.assert_close(logp.double(), token_logprobs(reference, tokens), rtol=0, atol=2e-5)
    torch.testing.assert_close(entropy.double(), token_entropy(reference), rtol=0, atol=2e-5)
    (logp.sum() + entropy.sum()).backward()
    assert h.grad.dtype == w.grad.dtype == torch.bfloat16 and h.grad.abs().sum() > 0 and w.grad.abs().sum() > 0


def test_chunk_rows_follow_the_memory_target():
    assert chunk_rows(151_936, torch.bfloat16, 64) == 110  # float32 logits: 64 MiB / (151,936 × 4 B)
    assert chunk_rows(151_936, F64, 64) == 55  # float64 stays float64: 8 B each
    assert chunk_rows(151_936, torch.float32, 0.1) == 1  # never fewer than one position


# ---- where it applies ---------------------------------------------------------------------------------------------
def _toy(dtype=F64):
    torch.manual_seed(0)
    return _new_model(ToyModelConfig(), build_char_tokenizer(CHARS)).to(dtype)


def _qwen(dtype=F64, vocab=3000, cls=Qwen2ForCausalLM):
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
        pad_token_id=0,
    )
    return cls(config).to(dtype)


class _ScaledQwen(Qwen2ForCausalLM):
    """Logits scaled after the output layer (as some models' configs do): not the output layer on the hidden states."""

    def forward(self, *args, **kwargs):
        out = super().forward(*args, **kwargs)
        out.logits = out.logits * 0.5
        return out


def test_the_probe_takes_plain_causal_lms_and_leaves_the_others_whole():
    for model in (_toy(), _qwen()):
        head = output_head(model)
        assert isinstance(head, OutputHead) and head.linear is model.lm_head and head.decoder is model.model
        assert model.training  # the probe runs in eval mode and gives the mode back
    assert output_head(_qwen(cls=_ScaledQwen)) is None
    assert output_head(FakeLM()) is None  # no decoder or output layer to reach


# ---- the update -----------------------------------------------------------------------------------------------
def _batch(vocab: int, prompts: list[int], responses: list[int], seed: int = 0) -> dict[str, torch.Tensor]:
    """Left-padded prompts and right-padded responses of these lengths, random tokens (3 .. vocab - 1; 0 pads)."""
    g = torch.Generator().manual_seed(seed)
    P, L, n = max(prompts), max(responses), len(prompts)
    ids, attn = torch.zeros(n, P + L, dtype=torch.long), torch.zeros(n, P + L, dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        ids[i, P - p : P + r] = torch.randint(3, vocab, (p + r,), generator=g)
        attn[i, P - p : P + r] = 1
    rollout_logp = -torch.rand(n, L, generator=g) * attn[:, P:]
    return {
        "ids": ids,
        "attn": attn,
        "resp_mask": attn[:, P:].clone(),
        "rollout_logp": rollout_logp,
        "prompt_len": torch.tensor(P),
    }


CASES = {  # (objective, rollout temperature, train settings)
    "grpo": (ObjectiveSettings.preset("grpo"), 1.0, {"reference_kl": False}),
    "entropy bonus, KL, temperature 0.7": (
        ObjectiveSettings.preset("grpo", entropy_coef=0.05, kl_coef=0.1),
        0.7,
        {"reference_kl": True},
    ),
    "dapo, 2 mini-batches, top-entropy tokens, temperature 1.3": (
        ObjectiveSettings.preset("dapo", top_entropy_quantile=0.5, max_len=12, overlong_cache_len=4),
        1.3,
        {"mini_batches": 2, "reference_kl": True, "micro_batch_size": 2},
    ),
    "kl-cov, 2 epochs": (
        ObjectiveSettings.preset("grpo", surrogate="kl_cov", kl_cov_ratio=0.2, kl_cov_coef=1.0),
        1.0,
        {"epochs": 2, "reference_kl": False},
    ),
}


def _update(model, objective, temperature, train, chunk_mb, t):
    """One `Trainer.update` on `t`: its metrics, and every parameter's gradient before each optimiser step."""
    torch.set_num_threads(1)  # as tests/test_loop.py: 2 threads beside a loaded machine's other work crawl
    settings = TrainerSettings(
        objective,
        RolloutConfig(temperature=temperature, group_size=3, max_new_tokens=12),
        TrainConfig(steps=1, logits_chunk_mb=chunk_mb, **train),
        seed=5,
    )
    tr = Trainer(copy.deepcopy(model), None, None, 0, settings)
    grads, step = [], tr._optimiser_step

    def recording(k):
        grads.append([p.grad.clone() for p in tr.policy.parameters()])
        step(k)

    tr._optimiser_step = recording
    advantages = torch.tensor([1.0, -0.5, -0.5, 0.8, 0.2, -1.0])
    mask = loss_mask(t["resp_mask"], torch.tensor([False, False, True, False, False, False]), objective)
    return tr, tr.update(1, t, advantages, mask), grads


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("arch", ["toy", "qwen2"])
def test_the_chunked_update_equals_the_whole_logits_update_in_float64(arch, case):
    """Six responses of unequal lengths (1 to 12 tokens) after prompts of 2 to 5: the loss, every metric and every
    parameter's gradient at every optimiser step equal the whole-logits path's within 1e-6 (float64 on CPU), with
    chunks of a few positions (the toy: 47 tokens, 0.004 MiB = 11 positions; the Qwen2: 3,000 tokens, 0.1 MiB = 4)."""
    model, chunk_mb = (_toy(), 0.004) if arch == "toy" else (_qwen(), 0.1)
    vocab = model.lm_head.weight.shape[0]
    t = _batch(vocab, prompts=[3, 5, 2, 4, 5, 3], responses=[12, 1, 7, 9, 4, 12])
    objective, temperature, train = CASES[case]
    whole, metrics_whole, grads_whole = _update(model, objective, temperature, train, None, t)
    chunked, metrics, grads = _update(model, objective, temperature, train, chunk_mb, t)
    assert whole.scorer.heads == {}  # the whole logits, as before
    assert isinstance(chunked.scorer.heads[id(chunked.policy)], OutputHead)  # the chunked path ran
    assert chunk_rows(vocab, F64, chunk_mb) < 12  # several chunks per micro-batch
    assert (chunked.ref is None) == (id(chunked.ref) not in chunked.scorer.heads)  # the reference's too
    assert metrics.keys() == metrics_whole.keys()
    for key, value in metrics_whole.items():
        assert metrics[key] == pytest.approx(value, rel=0, abs=1e-6), key
    assert len(grads) == len(grads_whole) >= 1
    for step, step_whole in zip(grads, grads_whole):
        for got, want in zip(step, step_whole, strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    assert max(g.abs().max().item() for g in grads[0]) > 1e-3  # the gradients compared are not all ~0


def test_the_reference_forward_changes_no_gradient_and_no_metric_but_its_own():
    """`train.reference_kl` off drops the initial policy's forward (`policy/kl`) and nothing else: the same metrics
    and every gradient to the bit (which is why it is not part of a job's identity)."""
    model, objective = _toy(), ObjectiveSettings.preset("grpo")
    t = _batch(model.lm_head.weight.shape[0], prompts=[3, 5, 2, 4, 5, 3], responses=[12, 1, 7, 9, 4, 12])
    _, with_kl, grads_kl = _update(model, objective, 1.0, {"reference_kl": True}, None, t)
    _, without, grads = _update(model, objective, 1.0, {"reference_kl": False}, None, t)
    assert set(with_kl) - set(without) == {"policy/kl"}
    assert all(without[k] == with_kl[k] for k in without)
    assert all(torch.equal(a, b) for step_a, step_b in zip(grads, grads_kl) for a, b in zip(step_a, step_b))
