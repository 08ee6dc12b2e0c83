"""The contract every rollout backend keeps (trainer/rollout/base.py), checked against the model itself.

One suite, parametrised over the installed backends: transformers always, vLLM when
`vllm` imports (skipped with the reason otherwise). The reference for log-probabilities
is a teacher-forced forward pass of the same tiny model over prompt + response.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from trainer.rollout.base import RolloutBackend, RolloutBatch, SamplingParams
from trainer.rollout.hf import TransformersBackend

CHARS = "0123456789+-=?:# abcdefg"
PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
PROMPTS = ["12+34=", "7+8=", "4321+1234=", "9=", "ab+cd=?", "555+5="]  # different lengths: left padding


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """Character-level tokenizer with BOS prepended (no files)."""
    vocab = {tok: i for i, tok in enumerate([PAD, BOS, EOS, UNK, *CHARS])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, vocab[BOS])])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK, padding_side="left"
    )


def tiny_model(
    tokenizer: PreTrainedTokenizerFast, arch: str = "llama", seed: int = 0, kv_heads: int | None = None
) -> PreTrainedModel:
    """A random tiny causal LM: Llama (rotary positions), Qwen2 (Llama's layout with q/k/v biases, here with grouped
    keys/values: 4 query heads share 2 key/value heads unless `kv_heads` says otherwise) or GPT-2 (learned absolute
    positions, where a wrong position id changes the output; rotary attention only sees position differences)."""
    torch.manual_seed(seed)
    special = dict(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    if arch == "gpt2":
        config = GPT2Config(
            vocab_size=len(tokenizer), n_embd=64, n_layer=2, n_head=4, n_positions=128, initializer_range=0.1, **special
        )  # wider init: varied, peaked outputs
        return GPT2LMHeadModel(config).eval()
    shape = dict(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=kv_heads or (2 if arch == "qwen2" else 4),
        max_position_embeddings=128,
        tie_word_embeddings=False,
        **special,
    )
    model = (
        Qwen2ForCausalLM(Qwen2Config(**shape)) if arch == "qwen2" else LlamaForCausalLM(LlamaConfig(**shape))
    ).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)  # peaked distributions: no greedy near-ties
        model.lm_head.weight[tokenizer.eos_token_id] = 0.0  # EOS logit 0: some responses end, some run out
    return model


def _transformers(model, tokenizer, tmp_path) -> RolloutBackend:
    return TransformersBackend(model, tokenizer)


_VLLM_ENGINES: dict[str, RolloutBackend] = {}
"""One vLLM engine per architecture for the whole session: starting one takes tens of seconds and holds GPU memory."""


def _vllm(model, tokenizer, tmp_path) -> RolloutBackend:
    """The first model of an architecture is saved and loaded by a new engine; every later one (the same
    seeded weights) reaches that engine through `sync_weights`, which the suite thereby exercises too."""
    pytest.importorskip("vllm", reason=VLLM_MISSING_REASON)
    from trainer.rollout.vllm import VLLMBackend

    key = type(model).__name__
    if key in _VLLM_ENGINES:
        _VLLM_ENGINES[key].sync_weights(model)
        return _VLLM_ENGINES[key]
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    # float32 as the reference model (TOL is 1e-5); eager: no CUDA-graph capture for a few tiny batches
    backend = VLLMBackend(
        str(tmp_path), tokenizer, dtype="float32", gpu_memory_utilization=0.2, enforce_eager=True, seed=0
    )
    _VLLM_ENGINES[key] = backend
    return backend


VLLM_MISSING_REASON = "vllm is not installed: the vLLM backend is not checked"
VLLM_MISSING = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason=VLLM_MISSING_REASON)
NO_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
BACKENDS = [  # (name, factory(model, tokenizer, tmp_path), device)
    pytest.param(("transformers", _transformers, "cpu"), id="transformers-cpu"),
    pytest.param(("transformers", _transformers, "cuda"), id="transformers-cuda", marks=NO_CUDA),
    pytest.param(("vllm", _vllm, "cuda"), id="vllm-cuda", marks=[VLLM_MISSING, NO_CUDA]),  # the first reason shows
]
TOL = 1e-5


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny ops on several threads crawl when the cores are shared (threads wait on each other)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(params=BACKENDS)
def setup(request, tmp_path, arch):
    """(backend, model on the backend's device, tokenizer)."""
    _, factory, device = request.param
    tokenizer = tiny_tokenizer()
    model = tiny_model(tokenizer, arch).to(device)
    return factory(model, tokenizer, tmp_path), model, tokenizer


@pytest.fixture(params=["llama", "qwen2", "gpt2"])
def arch(request) -> str:
    return request.param


def teacher_forced(model, batch: RolloutBatch, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities of the response tokens, and the argmax tokens, from one full forward pass."""
    ids = torch.cat([batch.prompt_ids, batch.response_ids], 1).to(model.device)
    mask = torch.cat([batch.prompt_mask, batch.response_mask], 1).to(model.device)
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits.float()
    width = batch.prompt_ids.shape[1]
    logits = logits[:, width - 1 : -1]
    logp = torch.log_softmax(logits / temperature, -1)
    chosen = logp.gather(-1, batch.response_ids.to(model.device)[..., None])[..., 0]
    return chosen * batch.response_mask.to(model.device), logits.argmax(-1)


def many(prompts: list[str], times: int) -> list[str]:
    return [p for p in prompts for _ in range(times)]


def test_shapes_dtypes_and_masks(setup):
    backend, _, tokenizer = setup
    prompts = PROMPTS * 4  # repeats, interleaved
    batch = backend.generate(prompts, SamplingParams(max_new_tokens=20), seed=0)
    n = len(prompts)
    assert batch.prompt_ids.shape == batch.prompt_mask.shape and batch.prompt_ids.shape[0] == n
    assert batch.response_ids.shape == batch.response_mask.shape == batch.logprobs.shape
    assert batch.response_ids.shape[0] == n and batch.response_ids.shape[1] <= 20
    assert batch.lengths.shape == batch.truncated.shape == (n,)
    assert batch.prompt_ids.dtype == batch.response_ids.dtype == batch.lengths.dtype == torch.long
    assert batch.logprobs.dtype == torch.float32 and batch.truncated.dtype == torch.bool
    assert len(batch.texts) == n and all(isinstance(t, str) for t in batch.texts)
    # response mask: a prefix of ones, as long as the length; padding is pad_id / 0 logprob
    positions = torch.arange(batch.response_ids.shape[1], device=batch.lengths.device)
    assert torch.equal(batch.response_mask.bool(), positions < batch.lengths[:, None])
    assert batch.response_ids.shape[1] == int(batch.lengths.max())
    assert (batch.response_ids[batch.response_mask == 0] == tokenizer.pad_token_id).all()
    assert (batch.logprobs[batch.response_mask == 0] == 0).all()
    assert (batch.logprobs[batch.response_mask == 1] <= 0).all()
    # prompts: left-padded, exactly the tokenizer's encoding
    for i, prompt in enumerate(prompts):
        real = batch.prompt_ids[i][batch.prompt_mask[i] == 1].tolist()
        assert real == tokenizer(prompt)["input_ids"]
        assert batch.prompt_mask[i].tolist() == sorted(batch.prompt_mask[i].tolist())  # zeros first
        assert (batch.prompt_ids[i][batch.prompt_mask[i] == 0] == tokenizer.pad_token_id).all()


def test_eos_ends_a_response_and_truncation_flag(setup):
    backend, _, tokenizer = setup
    max_new = 12
    batch = backend.generate(many(PROMPTS, 8), SamplingParams(max_new_tokens=max_new), seed=1)
    eos = tokenizer.eos_token_id
    assert batch.truncated.any() and (~batch.truncated).any(), "the fixture should give both kinds"
    for i in range(len(batch.texts)):
        response = batch.response_ids[i, : batch.lengths[i]].tolist()
        if batch.truncated[i]:
            assert len(response) == max_new and eos not in response
        else:
            assert response[-1] == eos and eos not in response[:-1]  # EOS counted in the length
        assert batch.texts[i] == tokenizer.decode(response, skip_special_tokens=True)
        assert EOS not in batch.texts[i]


def test_same_seed_same_batch_other_seed_differs(setup):
    backend, _, _ = setup
    params = SamplingParams(max_new_tokens=16)
    first, again, other = (backend.generate(many(PROMPTS, 4), params, seed=s) for s in (7, 7, 8))
    for name in ("prompt_ids", "response_ids", "response_mask", "logprobs", "lengths", "truncated"):
        assert torch.equal(getattr(first, name), getattr(again, name)), name
    assert first.texts == again.texts
    assert first.texts != other.texts


@pytest.mark.parametrize("temperature", [1.0, 0.6, 1.7])
def test_logprobs_match_teacher_forcing(setup, temperature):
    backend, model, _ = setup
    batch = backend.generate(PROMPTS * 4, SamplingParams(max_new_tokens=16, temperature=temperature), seed=2)
    expected, _ = teacher_forced(model, batch, temperature)
    torch.testing.assert_close(batch.logprobs.to(expected.device), expected, atol=TOL, rtol=0)
    if temperature != 1.0:  # and they are not the untempered ones
        untempered, _ = teacher_forced(model, batch, 1.0)
        assert (batch.logprobs.to(untempered.device) - untempered).abs().max() > 1e-2


def test_top_p_keeps_to_the_nucleus_and_renormalises(setup):
    backend, model, _ = setup
    top_p = 0.6
    batch = backend.generate(many(PROMPTS, 8), SamplingParams(max_new_tokens=16, top_p=top_p), seed=3)
    full, _ = teacher_forced(model, batch)
    ids = torch.cat([batch.prompt_ids, batch.response_ids], 1).to(model.device)
    mask = torch.cat([batch.prompt_mask, batch.response_mask], 1).to(model.device)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp(min=0)).logits
    probs = logits[:, batch.prompt_ids.shape[1] - 1 : -1].float().softmax(-1)
    for i, j in (batch.response_mask == 1).nonzero().tolist():
        p = probs[i, j]
        token = batch.response_ids[i, j]
        sorted_p, _ = p.sort(descending=True)
        nucleus_size = int(((sorted_p.cumsum(0) - sorted_p) < top_p).sum())
        nucleus_mass = sorted_p[:nucleus_size].sum()
        assert p[token] >= sorted_p[nucleus_size - 1] - 1e-6, "sampled outside the nucleus"
        assert abs(float(batch.logprobs[i, j]) - float(full[i, j] - nucleus_mass.log())) < TOL


def test_tiny_top_p_and_temperature_zero_are_greedy(setup):
    backend, model, _ = setup
    prompts = many(PROMPTS, 2)
    nucleus = backend.generate(prompts, SamplingParams(max_new_tokens=16, top_p=1e-6), seed=4)
    greedy = backend.generate(prompts, SamplingParams(max_new_tokens=16, temperature=0.0), seed=5)
    assert torch.equal(nucleus.response_ids, greedy.response_ids)
    _, argmax = teacher_forced(model, greedy)
    real = greedy.response_mask == 1
    assert torch.equal(greedy.response_ids[real], argmax[real.to(argmax.device)].to(greedy.response_ids.device))
    torch.testing.assert_close(nucleus.logprobs, torch.zeros_like(nucleus.logprobs), atol=TOL, rtol=0)
    expected, _ = teacher_forced(model, greedy)  # temperature 0 reports the model's own log-probabilities
    torch.testing.assert_close(greedy.logprobs.to(expected.device), expected, atol=TOL, rtol=0)


def test_left_padding_matches_generating_alone(setup):
    backend, _, _ = setup
    params = SamplingParams(max_new_tokens=16, temperature=0.0)
    together = backend.generate(PROMPTS, params, seed=0)
    for i, prompt in enumerate(PROMPTS):
        alone = backend.generate([prompt], params, seed=0)
        n = int(alone.lengths[0])
        assert int(together.lengths[i]) == n and bool(together.truncated[i]) == bool(alone.truncated[0])
        assert together.response_ids[i, :n].tolist() == alone.response_ids[0, :n].tolist()
        torch.testing.assert_close(together.logprobs[i, :n], alone.logprobs[0, :n], atol=TOL, rtol=0)
        assert together.texts[i] == alone.texts[0]


def test_outputs_are_ordinary_tensors(setup):
    """The trainer feeds them into autograd graphs: no inference-mode tensors may leak out."""
    backend, model, _ = setup
    batch = backend.generate(PROMPTS, SamplingParams(max_new_tokens=8), seed=0)
    for name in ("prompt_ids", "prompt_mask", "response_ids", "response_mask", "logprobs", "lengths", "truncated"):
        assert not getattr(batch, name).is_inference(), name
    ids = torch.cat([batch.prompt_ids, batch.response_ids], 1).to(model.device)
    mask = torch.cat([batch.prompt_mask, batch.response_mask], 1).to(model.device)
    loss = model(input_ids=ids, attention_mask=mask).logits.float().mean() - batch.logprobs.to(model.device).sum()
    loss.backward()


# transformers only: it shares the trainer's module


def test_transformers_restores_training_mode_and_follows_the_weights():
    tokenizer = tiny_tokenizer()
    model = tiny_model(tokenizer).train()
    seen = []
    model.register_forward_hook(lambda module, args, out: seen.append((module.training, torch.is_grad_enabled())))
    backend = TransformersBackend(model, tokenizer)
    params = SamplingParams(max_new_tokens=8, temperature=0.0)
    before = backend.generate(PROMPTS, params, seed=0)
    assert model.training, "training mode must be restored"
    assert seen and all(mode == (False, False) for mode in seen), "sampling runs in eval mode without grad"
    with torch.no_grad():
        model.lm_head.weight.add_(torch.randn_like(model.lm_head.weight))
    backend.sync_weights(model)
    after = backend.generate(PROMPTS, params, seed=0)
    assert not torch.equal(before.logprobs, after.logprobs)


def test_transformers_explicit_eos_ids_and_bad_params():
    tokenizer = tiny_tokenizer()
    model = tiny_model(tokenizer)
    stop = tokenizer.convert_tokens_to_ids("1")
    backend = TransformersBackend(model, tokenizer, eos_token_ids=[stop, tokenizer.eos_token_id])
    batch = backend.generate(many(PROMPTS, 4), SamplingParams(max_new_tokens=30), seed=0)
    for i in range(len(batch.texts)):
        response = batch.response_ids[i, : batch.lengths[i]].tolist()
        if not batch.truncated[i]:
            assert response[-1] in (stop, tokenizer.eos_token_id)
            assert stop not in response[:-1] and tokenizer.eos_token_id not in response[:-1]
    for bad in (
        SamplingParams(max_new_tokens=0),
        SamplingParams(max_new_tokens=4, temperature=-1.0),
        SamplingParams(max_new_tokens=4, top_p=0.0),
    ):
        with pytest.raises(ValueError):
            backend.generate(PROMPTS, bad, seed=0)


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 0.9), (0.0, 1.0)])
def test_llama_fast_decode_gives_the_same_samples_token_for_token(temperature, top_p):
    """`LlamaDecoder` (trainer/rollout/llama_decode.py) against the model's own forward: the same tokens and
    bitwise the same log-probabilities for the same seed, with rows finishing and compacted away on the way."""
    from trainer.rollout.llama_decode import supports

    tokenizer = tiny_tokenizer()
    model = tiny_model(tokenizer, "llama")
    assert supports(model) and not supports(tiny_model(tokenizer, "gpt2"))
    fast, slow = TransformersBackend(model, tokenizer), TransformersBackend(model, tokenizer, decoder="forward")
    params = SamplingParams(max_new_tokens=40, temperature=temperature, top_p=top_p)
    ended_early = 0
    for seed in range(4):
        a, b = fast.generate(many(PROMPTS, 8), params, seed), slow.generate(many(PROMPTS, 8), params, seed)
        assert torch.equal(a.response_ids, b.response_ids) and torch.equal(a.logprobs, b.logprobs)
        assert torch.equal(a.lengths, b.lengths) and torch.equal(a.truncated, b.truncated)
        ended_early += int((a.lengths < a.lengths.max()).sum())
    assert ended_early > 0 or temperature == 0  # rows finished at different steps: compaction was exercised
