"""The vLLM backend's own code, on any machine: a FAKE `vllm` module stands in for the real one.

The fakes implement only the API surface trainer/rollout/vllm.py uses (`LLM(**engine_args)`,
`LLM.generate/apply_model/reset_prefix_cache/sleep/wake_up`, `SamplingParams(**kwargs)`,
`EngineArgs` fields, RequestOutput / CompletionOutput / Logprob attributes) and answer with canned
token ids, log-probabilities and finish reasons. So these tests check our mapping code (parameters
in, padded tensors out, weights handed over), not vLLM: whether vLLM itself keeps the contract is
tests/test_rollout_contract.py's job, on a host with vLLM and a GPU. The last test here also needs both.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import types
import warnings
from types import SimpleNamespace

import pytest
import torch

from trainer.models.char_tokenizer import build_char_tokenizer
from trainer.rollout.base import SamplingParams

CHARS = "0123456789+="
PROMPTS = ["12+34=", "7+8=", "4321+1234=", "9="]


@pytest.fixture
def tokenizer():
    return build_char_tokenizer(CHARS)


def tok(tokenizer, text: str) -> list[int]:
    """Token ids of characters, no BOS."""
    return tokenizer.convert_tokens_to_ids(list(text))


class FakeEngineModel:
    """vLLM's model inside the worker, as far as `load_weights` goes."""

    def __init__(self):
        self.loaded: list[tuple[str, torch.Tensor]] = []

    def load_weights(self, weights):
        self.loaded.extend(weights)
        return {name for name, _ in self.loaded}


def make_fake_vllm(respond, *, with_logprobs_mode: bool = True) -> types.ModuleType:
    """A module named `vllm`; `respond(prompt_token_ids, sampling_kwargs) -> (token_ids, logprobs, finish_reason)`."""
    calls: list[tuple] = []  # every engine call, in order

    class SamplingParams:
        def __init__(self, **kwargs):
            self.kwargs = kwargs

    class LLM:
        instances: list[LLM] = []

        def __init__(self, **kwargs):
            self.kwargs = kwargs
            self.engine_model = FakeEngineModel()
            self.generated: list[tuple[list, list]] = []
            LLM.instances.append(self)
            calls.append(("init",))

        def generate(self, prompts, sampling_params, *, use_tqdm=True):
            assert use_tqdm is False
            calls.append(("generate", len(prompts)))
            self.generated.append((prompts, sampling_params))
            outputs = []
            for prompt, params in zip(prompts, sampling_params, strict=True):
                token_ids, logprobs, finish = respond(prompt["prompt_token_ids"], params.kwargs)
                # a real position holds the sampled token and (here) a more likely one listed first
                positions = [
                    {(t + 1) % 5: SimpleNamespace(logprob=-0.01), t: SimpleNamespace(logprob=lp)}
                    for t, lp in zip(token_ids, logprobs)
                ]
                completion = SimpleNamespace(
                    index=0,
                    text="(vLLM's text: not used)",
                    token_ids=tuple(token_ids),
                    logprobs=positions,
                    finish_reason=finish,
                    stop_reason=None,
                )
                outputs.append(SimpleNamespace(prompt_token_ids=prompt["prompt_token_ids"], outputs=[completion]))
            return outputs

        def apply_model(self, func):
            calls.append(("apply_model",))
            return [func(self.engine_model)]

        def reset_prefix_cache(self):
            calls.append(("reset_prefix_cache",))
            return True

        def sleep(self, level=1):
            calls.append(("sleep", level))

        def wake_up(self, tags=None):
            calls.append(("wake_up",))
            return True

    fields = {"model": str, "seed": int}
    if with_logprobs_mode:
        fields["logprobs_mode"] = str
    engine_args = dataclasses.make_dataclass(
        "EngineArgs", [(name, kind, dataclasses.field(default=None)) for name, kind in fields.items()]
    )

    module = types.ModuleType("vllm")
    module.__version__ = "0.0.fake"
    module.LLM, module.SamplingParams, module.EngineArgs = LLM, SamplingParams, engine_args
    module.calls = calls
    return module


@pytest.fixture
def fake(monkeypatch, tokenizer):
    """Installs a fake vllm answering from `fake.script` (prompt text -> (response text, logprobs, finish))."""
    script: dict[str, tuple[list[int], list[float], str]] = {}

    def respond(prompt_ids, kwargs):
        text = tokenizer.decode(prompt_ids, skip_special_tokens=True)
        return script[text]

    module = make_fake_vllm(respond)
    module.script = script
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")  # restored after the test: the backend sets it
    return module


def backend_of(fake, tokenizer, tmp_path, **kwargs):
    from trainer.rollout.vllm import VLLMBackend

    return VLLMBackend(str(tmp_path), tokenizer, **kwargs), fake.LLM.instances[-1]


# ---- import ------------------------------------------------------------------------------


def test_missing_vllm_is_a_clear_import_error(monkeypatch, tokenizer, tmp_path):
    monkeypatch.setitem(sys.modules, "vllm", None)  # what `import vllm` sees where it is not installed
    from trainer.rollout.vllm import (
        VLLMBackend,  # the module itself imports without vllm
    )

    with pytest.raises(ImportError, match=r"needs the 'vllm' extra on a CUDA host: pip install 'harness\[vllm\]'"):
        VLLMBackend(str(tmp_path), tokenizer)


# ---- the engine --------------------------------------------------------------------------


def test_engine_arguments(fake, tokenizer, tmp_path):
    import os

    _, llm = backend_of(
        fake,
        tokenizer,
        tmp_path,
        dtype="float32",
        gpu_memory_utilization=0.25,
        max_model_len=64,
        seed=3,
        enforce_eager=True,
    )
    assert llm.kwargs == dict(
        model=str(tmp_path),
        dtype="float32",
        gpu_memory_utilization=0.25,
        max_model_len=64,
        enable_sleep_mode=False,
        enable_prefix_caching=True,
        seed=3,
        logprobs_mode="processed_logprobs",
        enforce_eager=True,
    )
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0", "the engine must live in this process"


def test_logprobs_mode_cannot_be_changed(fake, tokenizer, tmp_path):
    with pytest.raises(ValueError, match="logprobs_mode"):
        backend_of(fake, tokenizer, tmp_path, logprobs_mode="raw_logprobs")


def test_a_vllm_without_logprobs_mode_warns(monkeypatch, tokenizer, tmp_path):
    module = make_fake_vllm(lambda ids, kw: ([tokenizer.eos_token_id], [-0.5], "stop"), with_logprobs_mode=False)
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    with pytest.warns(UserWarning, match="no logprobs_mode"):
        backend, llm = backend_of(module, tokenizer, tmp_path)
    assert "logprobs_mode" not in llm.kwargs and backend.processed_logprobs is False


# ---- sampling parameters ---------------------------------------------------------------------


def test_sampling_parameters_map_one_to_one(fake, tokenizer, tmp_path):
    backend, llm = backend_of(fake, tokenizer, tmp_path)
    for p in PROMPTS:
        fake.script[p] = (tok(tokenizer, "1") + [tokenizer.eos_token_id], [-0.1, -0.2], "stop")
    prompts = [p for p in PROMPTS for _ in range(3)]  # a group of 3 per prompt

    backend.generate(prompts, SamplingParams(max_new_tokens=7, temperature=0.6, top_p=0.9), seed=5)
    sent, params = llm.generated[-1]
    assert [s["prompt_token_ids"] for s in sent] == [tokenizer(p)["input_ids"] for p in prompts]  # BOS included
    assert len(params) == len(prompts)  # one request per prompt given, n=1
    seeds = [sp.kwargs.pop("seed") for sp in params]
    for sp in params:
        assert sp.kwargs == dict(
            n=1,
            temperature=0.6,
            top_p=0.9,
            max_tokens=7,
            logprobs=0,
            stop_token_ids=[tokenizer.eos_token_id],
            detokenize=False,
        )
    assert len(set(seeds)) == len(seeds), "every row, repeats included, draws with its own seed"
    assert all(isinstance(s, int) and 0 <= s < 2**63 for s in seeds)

    backend.generate(prompts, SamplingParams(max_new_tokens=7, temperature=0.6, top_p=0.9), seed=5)
    assert [sp.kwargs["seed"] for sp in llm.generated[-1][1]] == seeds, "same seed, same request seeds"
    backend.generate(prompts, SamplingParams(max_new_tokens=7, temperature=0.6, top_p=0.9), seed=6)
    assert not set(sp.kwargs["seed"] for sp in llm.generated[-1][1]) & set(seeds)
    backend.generate(prompts[:2], SamplingParams(max_new_tokens=7, temperature=0.6, top_p=0.9), seed=5)
    assert [sp.kwargs["seed"] for sp in llm.generated[-1][1]] == seeds[:2], "a row's seed depends on (seed, row)"

    backend.generate(PROMPTS, SamplingParams(max_new_tokens=3, temperature=0.0), seed=5)  # greedy: vLLM's 0 too
    assert {(sp.kwargs["temperature"], sp.kwargs["top_p"], sp.kwargs["max_tokens"]) for sp in llm.generated[-1][1]} == {
        (0.0, 1.0, 3)
    }


def test_eos_ids_include_the_checkpoints_and_extra_ones(fake, tokenizer, tmp_path):
    from transformers import GenerationConfig

    plus = tokenizer.convert_tokens_to_ids("+")
    GenerationConfig(eos_token_id=[tokenizer.eos_token_id, plus]).save_pretrained(tmp_path)
    backend, _ = backend_of(fake, tokenizer, tmp_path)
    assert backend.eos_token_ids == sorted({tokenizer.eos_token_id, plus})
    equals = tokenizer.convert_tokens_to_ids("=")
    backend, _ = backend_of(fake, tokenizer, tmp_path, eos_token_ids=[equals])
    assert backend.eos_token_ids == sorted({tokenizer.eos_token_id, plus, equals})
    assert backend.sampling_kwargs(SamplingParams(4), 0)["stop_token_ids"] == backend.eos_token_ids


def test_bad_parameters_are_refused_before_the_engine(fake, tokenizer, tmp_path):
    backend, llm = backend_of(fake, tokenizer, tmp_path)
    for bad in (
        SamplingParams(max_new_tokens=0),
        SamplingParams(max_new_tokens=4, temperature=-1.0),
        SamplingParams(max_new_tokens=4, top_p=0.0),
        SamplingParams(max_new_tokens=4, top_p=1.5),
    ):
        with pytest.raises(ValueError):
            backend.generate(PROMPTS, bad, seed=0)
    with pytest.raises(ValueError, match="no prompts"):
        backend.generate([], SamplingParams(4), seed=0)
    assert not llm.generated


# ---- the batch ---------------------------------------------------------------------------------


def test_batch_tensors_padding_masks_truncation_and_texts(fake, tokenizer, tmp_path):
    backend, _ = backend_of(fake, tokenizer, tmp_path)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    fake.script.update(
        {
            "12+34=": (tok(tokenizer, "46") + [eos], [-0.5, -0.25, -0.125], "stop"),  # ended: EOS counted
            "7+8=": (tok(tokenizer, "1555"), [-1.0, -2.0, -3.0, -4.0], "length"),  # ran out: truncated
            "4321+1234=": (tok(tokenizer, "555") + [eos], [-0.375, -0.625, -1.5, -2.5], "length"),  # EOS as the last
            "9=": (
                tok(tokenizer, "9"),
                [-0.75],
                "length",
            ),  # allowed token (older vLLM: "length"); cut by max_model_len
        }
    )
    batch = backend.generate(PROMPTS, SamplingParams(max_new_tokens=4), seed=0)

    for name in ("prompt_ids", "prompt_mask", "response_ids", "response_mask", "lengths"):
        assert getattr(batch, name).dtype == torch.long, name
    assert batch.logprobs.dtype == torch.float32 and batch.truncated.dtype == torch.bool
    # prompts: left-padded with pad_id, exactly the tokenizer's encoding
    width = max(len(tokenizer(p)["input_ids"]) for p in PROMPTS)
    assert batch.prompt_ids.shape == batch.prompt_mask.shape == (4, width)
    for i, p in enumerate(PROMPTS):
        ids = tokenizer(p)["input_ids"]
        assert batch.prompt_ids[i].tolist() == [pad] * (width - len(ids)) + ids
        assert batch.prompt_mask[i].tolist() == [0] * (width - len(ids)) + [1] * len(ids)
    # responses: right-padded to the longest, EOS inside the mask, logprobs of the sampled tokens, 0 on padding
    assert batch.response_ids.tolist() == [
        tok(tokenizer, "46") + [eos, pad],
        tok(tokenizer, "1555"),
        tok(tokenizer, "555") + [eos],
        tok(tokenizer, "9") + [pad] * 3,
    ]
    assert batch.response_mask.tolist() == [[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1], [1, 0, 0, 0]]
    assert batch.logprobs.tolist() == [
        [-0.5, -0.25, -0.125, 0.0],
        [-1.0, -2.0, -3.0, -4.0],
        [-0.375, -0.625, -1.5, -2.5],
        [-0.75, 0.0, 0.0, 0.0],
    ]
    assert batch.lengths.tolist() == [3, 4, 4, 1]
    assert batch.truncated.tolist() == [False, True, False, True]
    assert batch.texts == ["46", "1555", "555", "9"]  # decoded here, special tokens removed


def test_the_batch_is_as_wide_as_its_longest_response(fake, tokenizer, tmp_path):
    backend, _ = backend_of(fake, tokenizer, tmp_path)
    for p in PROMPTS:
        fake.script[p] = (tok(tokenizer, "12") + [tokenizer.eos_token_id], [-0.1, -0.1, -0.1], "stop")
    batch = backend.generate(PROMPTS, SamplingParams(max_new_tokens=30), seed=0)
    assert batch.response_ids.shape == batch.response_mask.shape == batch.logprobs.shape == (4, 3)
    assert not batch.truncated.any()


@pytest.mark.parametrize(
    "reply",
    [
        (["1"], [-0.1], "abort"),  # an aborted request
        (["1", "2"], [-0.1], "length"),  # a logprob missing
        (["1", "2", "3", "4", "5"], [-0.1] * 5, "length"),  # more than max_new_tokens
        (["1"], [-0.1], "stop"),  # stopped on a token that is no EOS
    ],
)
def test_outputs_that_break_the_contract_raise(fake, tokenizer, tmp_path, reply):
    backend, _ = backend_of(fake, tokenizer, tmp_path)
    chars, logprobs, finish = reply
    fake.script["9="] = (tokenizer.convert_tokens_to_ids(chars), logprobs, finish)
    with pytest.raises(RuntimeError):
        backend.generate(["9="], SamplingParams(max_new_tokens=4), seed=0)


# ---- weights, caches, sleep -------------------------------------------------------------------


def test_sync_weights_hands_the_state_dict_to_the_engines_load_weights(fake, tokenizer, tmp_path):
    backend, llm = backend_of(fake, tokenizer, tmp_path)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
    model.register_buffer("step", torch.tensor(7))
    fake.calls.clear()

    backend.sync_weights(model)
    state = model.state_dict()
    assert [name for name, _ in llm.engine_model.loaded] == list(state)  # checkpoint names, all of them, in order
    for name, tensor in llm.engine_model.loaded:
        assert tensor is not state[name] and torch.equal(tensor, state[name]) and not tensor.requires_grad
        assert tensor.data_ptr() == state[name].data_ptr(), "handed over, not copied on the way"
    assert fake.calls == [("apply_model",), ("reset_prefix_cache",)], "stale KV blocks are dropped after the load"


def test_each_generate_starts_from_an_empty_prefix_cache(fake, tokenizer, tmp_path):
    backend, _ = backend_of(fake, tokenizer, tmp_path)
    fake.script["9="] = ([tokenizer.eos_token_id], [-0.5], "stop")
    fake.calls.clear()
    backend.generate(["9="], SamplingParams(max_new_tokens=4), seed=0)
    backend.generate(["9="], SamplingParams(max_new_tokens=4), seed=0)
    assert fake.calls == [("reset_prefix_cache",), ("generate", 1)] * 2


def test_sleep_mode_sleeps_after_generate_and_wakes_for_the_next_call(fake, tokenizer, tmp_path):
    backend, llm = backend_of(fake, tokenizer, tmp_path, enable_sleep_mode=True)
    assert llm.kwargs["enable_sleep_mode"] is True
    fake.script["9="] = ([tokenizer.eos_token_id], [-0.5], "stop")
    fake.calls.clear()
    backend.generate(["9="], SamplingParams(max_new_tokens=4), seed=0)
    backend.sync_weights(torch.nn.Linear(2, 2))
    backend.generate(["9="], SamplingParams(max_new_tokens=4), seed=0)
    assert fake.calls == [
        ("reset_prefix_cache",),
        ("generate", 1),
        ("sleep", 1),
        ("wake_up",),
        ("apply_model",),
        ("reset_prefix_cache",),
        ("reset_prefix_cache",),
        ("generate", 1),
        ("sleep", 1),
    ]


# ---- the real engine (GPU hosts with vLLM only) -------------------------------------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="vllm is not installed: the vLLM backend is not checked"
)  # the reason shown first
def test_real_engine_follows_the_synced_weights(tmp_path):
    """sync_weights changes what the real engine samples, and syncing the old weights back restores it."""
    from test_rollout_contract import PROMPTS as CONTRACT_PROMPTS
    from test_rollout_contract import tiny_model, tiny_tokenizer

    from trainer.rollout.vllm import VLLMBackend

    tokenizer = tiny_tokenizer()
    model = tiny_model(tokenizer).cuda()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a vLLM without logprobs_mode fails here
        backend = VLLMBackend(str(tmp_path), tokenizer, dtype="float32", gpu_memory_utilization=0.2, enforce_eager=True)
    params = SamplingParams(max_new_tokens=8, temperature=0.0)
    before = backend.generate(CONTRACT_PROMPTS, params, seed=0)
    original = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        model.lm_head.weight.add_(torch.randn_like(model.lm_head.weight))
    backend.sync_weights(model)
    after = backend.generate(CONTRACT_PROMPTS, params, seed=0)
    assert not torch.equal(before.logprobs, after.logprobs)
    model.load_state_dict(original)
    backend.sync_weights(model)
    again = backend.generate(CONTRACT_PROMPTS, params, seed=0)
    assert torch.equal(before.response_ids, again.response_ids)
    torch.testing.assert_close(before.logprobs, again.logprobs, atol=1e-5, rtol=0)
