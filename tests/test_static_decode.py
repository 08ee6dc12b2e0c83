"""The static-cache decode (trainer/rollout/static_decode.py) against the current decode, on tiny random models.

Three models, float32: Qwen2 (4 query heads on 2 key/value heads, q/k/v biases), Llama with the same grouped
keys/values, and Llama without (where `LlamaDecoder` also decodes). The prompts have different lengths (left padding),
EOS has logit 0 so some responses end early and some run out (rows finish at different steps and are compacted away).

- `StaticDecoder` as it runs uncaptured (attending over the columns written so far) gives bitwise the tokens and
  log-probabilities of the model's own forward for the same seed.
- At fixed shapes (what a CUDA graph replays, here run uncaptured) the attention sums over more, masked, columns:
  the log-probabilities agree to rounding (the contract's 1e-5), not bitwise, so sampled tokens may part where a
  uniform falls within rounding of a CDF step; greedy tokens agree here.
- The captured path itself needs a CUDA device (skipped here; docs/rollout.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_rollout_contract import NO_CUDA, PROMPTS, TOL, many, teacher_forced, tiny_model, tiny_tokenizer
from transformers import Qwen2Config, Qwen2ForCausalLM

from trainer.rollout import hf, static_decode
from trainer.rollout.base import SamplingParams
from trainer.rollout.hf import TransformersBackend, pick_decoder
from trainer.rollout.static_decode import StaticDecoder

MODELS = {  # name: (architecture, key/value heads)
    "qwen2-gqa": ("qwen2", 2),
    "llama-gqa": ("llama", 2),
    "llama": ("llama", 4),
}
SAMPLING = [(1.0, 1.0), (0.7, 0.9), (0.0, 1.0)]  # (temperature, top_p)
FIELDS = ("prompt_ids", "response_ids", "response_mask", "logprobs", "lengths", "truncated")


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def compactions(monkeypatch) -> list[int]:
    """The batch size after each compaction of a `StaticDecoder`; the decode loop compacts as soon as a row has
    finished (the reference decodes too: the same samples either way), so every batch size is exercised."""
    monkeypatch.setattr(hf, "COMPACT_FRACTION", 1e-9)
    seen: list[int] = []
    compact = StaticDecoder.compact

    def spy(self, keep):
        seen.append(int(keep.shape[0]))
        return compact(self, keep)

    monkeypatch.setattr(StaticDecoder, "compact", spy)
    return seen


def model_of(name: str):
    arch, kv_heads = MODELS[name]
    tokenizer = tiny_tokenizer()
    return tiny_model(tokenizer, arch, kv_heads=kv_heads), tokenizer


@pytest.mark.parametrize(("temperature", "top_p"), SAMPLING)
@pytest.mark.parametrize("name", list(MODELS))
def test_static_decode_is_bitwise_the_current_decode(name, temperature, top_p, compactions):
    model, tokenizer = model_of(name)
    assert static_decode.supports(model)
    current = "llama" if name == "llama" else "forward"  # what auto decoded these models with before
    references = [TransformersBackend(model, tokenizer, decoder=d) for d in dict.fromkeys([current, "forward"])]
    static = TransformersBackend(model, tokenizer, decoder="static")
    params = SamplingParams(max_new_tokens=40, temperature=temperature, top_p=top_p)
    ended_early = 0
    for seed in range(3):
        got = static.generate(many(PROMPTS, 8), params, seed)
        assert (got.prompt_mask == 0).any()  # left padding
        for reference in references:
            expected = reference.generate(many(PROMPTS, 8), params, seed)
            for field in FIELDS:
                assert torch.equal(getattr(got, field), getattr(expected, field)), (reference.decoder, field)
            assert got.texts == expected.texts
        ended_early += int((got.lengths < got.lengths.max()).sum())
    if temperature:  # rows finished at different steps and were compacted away (greedy rows of a prompt agree)
        assert ended_early > 0 and compactions


def test_without_padding_the_mask_is_left_out_as_the_model_does():
    """Prompts of one length: no column is ever masked, and transformers then calls attention without a mask (with
    grouped keys/values, SDPA's own grouping, another kernel): the static decode must follow it there too."""
    model, tokenizer = model_of("qwen2-gqa")
    prompts = many(["12+34=", "ab+cd=", "555+5="], 8)
    params = SamplingParams(max_new_tokens=24)
    got = TransformersBackend(model, tokenizer, decoder="static").generate(prompts, params, 0)
    expected = TransformersBackend(model, tokenizer, decoder="forward").generate(prompts, params, 0)
    assert (got.prompt_mask == 1).all()
    for field in FIELDS:
        assert torch.equal(getattr(got, field), getattr(expected, field)), field


@pytest.mark.parametrize("name", list(MODELS))
def test_fixed_shape_decode_agrees_to_rounding(name, compactions):
    model, tokenizer = model_of(name)
    fixed = TransformersBackend(model, tokenizer, decoder="fixed")
    forward = TransformersBackend(model, tokenizer, decoder="forward")
    greedy = SamplingParams(max_new_tokens=40, temperature=0.0)
    got, expected = fixed.generate(many(PROMPTS, 2), greedy, 0), forward.generate(many(PROMPTS, 2), greedy, 0)
    assert torch.equal(got.response_ids, expected.response_ids) and torch.equal(got.lengths, expected.lengths)
    torch.testing.assert_close(got.logprobs, expected.logprobs, atol=TOL, rtol=0)
    for seed in range(2):  # sampled: the log-probabilities of its own tokens, against a teacher-forced forward
        batch = fixed.generate(many(PROMPTS, 8), SamplingParams(max_new_tokens=40, temperature=0.8), seed)
        reference, _ = teacher_forced(model, batch, 0.8)
        torch.testing.assert_close(batch.logprobs, reference, atol=TOL, rtol=0)
    assert compactions


def test_auto_captures_only_on_cuda_and_only_models_it_supports():
    tokenizer = tiny_tokenizer()
    qwen2, llama, gpt2 = (tiny_model(tokenizer, arch) for arch in ("qwen2", "llama", "gpt2"))
    assert pick_decoder("auto", True, "cuda", qwen2) == pick_decoder("auto", True, "cuda", llama) == "graph"
    assert pick_decoder("auto", False, "cuda", qwen2) == pick_decoder("auto", True, "cpu", qwen2) == "static"
    assert pick_decoder("auto", False, "cuda", llama) == pick_decoder("auto", True, "cpu", llama) == "llama"
    assert pick_decoder("auto", True, "cuda", gpt2) == pick_decoder("auto", True, "cpu", gpt2) == "forward"
    assert pick_decoder("fixed", True, "cpu", qwen2) == "fixed"
    with pytest.raises(ValueError, match="needs a CUDA device"):
        pick_decoder("graph", True, "cpu", qwen2)
    with pytest.raises(ValueError, match="does not support"):
        TransformersBackend(gpt2, tokenizer, decoder="static")
    with pytest.raises(ValueError, match="does not support"):
        TransformersBackend(qwen2, tokenizer, decoder="llama")  # grouped keys/values: LlamaDecoder's rule
    with pytest.raises(ValueError, match="decoder must be one of"):
        TransformersBackend(qwen2, tokenizer, decoder="cuda-graph")


def test_supports_only_what_it_computes_exactly():
    tokenizer = tiny_tokenizer()
    assert not static_decode.supports(tiny_model(tokenizer, "gpt2"))
    shape = dict(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2)
    shape |= dict(num_attention_heads=4, num_key_value_heads=2)
    assert static_decode.supports(Qwen2ForCausalLM(Qwen2Config(**shape)))
    sliding = Qwen2Config(**shape, use_sliding_window=True, sliding_window=8, max_window_layers=1)
    assert not static_decode.supports(Qwen2ForCausalLM(sliding))  # its second layer attends within a window
    scaled = Qwen2Config(**shape, rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0})
    assert not static_decode.supports(Qwen2ForCausalLM(scaled))
    eager = Qwen2ForCausalLM(Qwen2Config(**shape))
    eager.config._attn_implementation = "eager"
    assert not static_decode.supports(eager)


def test_capture_is_not_part_of_a_jobs_identity_and_reaches_the_backend():
    from harness.config.run_config import defines_arm, load_run_config
    from harness.engine.training import build_backend

    toy_run = Path(__file__).resolve().parents[1] / "ablations" / "toy_run.yaml"
    auto, off = load_run_config(toy_run), load_run_config(toy_run, ["rollout.capture=off"])  # YAML's off: false
    assert auto.rollout.capture is True and off.rollout.capture is False
    assert auto.config_hash == off.config_hash and auto.arm == off.arm and not defines_arm("rollout.capture")
    tokenizer = tiny_tokenizer()
    model = tiny_model(tokenizer, "qwen2")
    assert build_backend(auto, "unused", model, tokenizer).capture
    assert not build_backend(off, "unused", model, tokenizer).capture


@NO_CUDA
@pytest.mark.parametrize("name", list(MODELS))
def test_captured_decode_on_cuda(name):
    """The CUDA graphs: greedy tokens as the model's forward, log-probabilities to rounding, a graph per batch size
    as rows are compacted away, and the same batch again for the same seed."""
    model, tokenizer = model_of(name)
    model = model.cuda()
    captured = TransformersBackend(model, tokenizer, decoder="auto")
    assert captured.decoder == "auto" and pick_decoder("auto", True, "cuda", model) == "graph"
    forward = TransformersBackend(model, tokenizer, decoder="forward")
    greedy = SamplingParams(max_new_tokens=40, temperature=0.0)
    got, expected = captured.generate(many(PROMPTS, 2), greedy, 0), forward.generate(many(PROMPTS, 2), greedy, 0)
    assert torch.equal(got.response_ids, expected.response_ids)
    torch.testing.assert_close(got.logprobs, expected.logprobs, atol=TOL, rtol=0)
    params = SamplingParams(max_new_tokens=40, temperature=0.8)
    batch = captured.generate(many(PROMPTS, 8), params, 1)
    reference, _ = teacher_forced(model, batch, 0.8)
    torch.testing.assert_close(batch.logprobs, reference, atol=TOL, rtol=0)
    again = captured.generate(many(PROMPTS, 8), params, 1)
    for field in FIELDS:
        assert torch.equal(getattr(batch, field), getattr(again, field)), field
    assert (batch.lengths < batch.lengths.max()).any()  # rows were compacted away: more than one graph
