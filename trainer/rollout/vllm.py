"""Rollouts with vLLM: a colocated engine in the trainer's process, for GPU hosts (the `vllm` extra).

How it keeps the contract of trainer/rollout/base.py:

- prompts are tokenised here, with the same tokenizer call as the transformers backend, and sent as
  token ids (`{"prompt_token_ids": ...}`, vLLM's `TokensPrompt`); the padded tensors, masks, EOS
  handling and texts are built here exactly as trainer/rollout/hf.py builds them;
- one request per prompt given (`n=1`), each with its own seed drawn from `seed` and its row, so
  the repeats of a GRPO group are independent samples and the same seed and weights give the same
  batch; vLLM's prefix cache shares the prefill of repeated prompts, and is cleared at the start of
  every `generate` so that a call never depends on what an earlier one left in it;
- `SamplingParams` map one to one: temperature -> temperature (0 is greedy in vLLM too),
  top_p -> top_p, max_new_tokens -> max_tokens; the EOS ids go in as `stop_token_ids`, and
  `logprobs=0` asks for the sampled token's log-probability only;
- log-probabilities: the engine is built with `logprobs_mode="processed_logprobs"` (vLLM >= 0.10),
  which returns log_softmax of the logits after temperature and top-p (so renormalised over the
  nucleus) and, for greedy requests, of the untempered logits: what `RolloutBatch.logprobs`
  documents. vLLM's default, "raw_logprobs", is the temperature-1, unfiltered distribution. On a
  vLLM without that option the backend warns and `processed_logprobs` is False: its logprobs are
  then the engine's default kind and differ from the contract whenever temperature != 1 or top_p < 1;
- `sync_weights(model)` copies the trainer's `state_dict()` into the engine's model through
  `LLM.apply_model(fn)` (vLLM runs `fn` on its raw model in each worker) and the model's own
  `load_weights`, which takes Hugging Face parameter names; then it clears the prefix cache (its
  KV blocks were computed with the old weights). Passing tensors to `apply_model` needs the engine
  in this process, so the constructor sets VLLM_ENABLE_V1_MULTIPROCESSING=0 (single GPU,
  tensor_parallel_size 1) before building it;
- `enable_sleep_mode=True`: after each `generate` the engine sleeps at level 1 (weights offloaded to
  CPU memory, KV cache freed, so the optimiser step gets the GPU memory) and wakes up on the next
  `generate` or `sync_weights`.

Other things to know: the returned tensors are on the CPU (the transformers backend returns them on
the model's device; the trainer moves them either way). vLLM clamps a temperature in (0, 0.01) up
to 0.01. Building the engine seeds the process-wide random generators with `seed` (vLLM does that
in its worker, which here is this process).

What was verified where: on the CPU-only development machine, without vLLM (it ships CUDA-only
wheels), only tests/test_rollout_vllm_unit.py ran, against a fake `vllm` module: it checks this
file's mapping code, not vLLM. The vLLM API used here was read in the vLLM 0.33.0 source
(`LLM.generate/apply_model/reset_prefix_cache/sleep/wake_up`, `SamplingParams`, `CompletionOutput`,
`ModelConfig.logprobs_mode`, the V1 and V2 model runners' samplers, `check_stop`) and in TRL's
colocated GRPO generation. tests/test_rollout_contract.py runs the shared contract against this
backend only where vLLM and a CUDA device are present; it has not yet been run on such a host.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from transformers import AutoTokenizer, GenerationConfig, PreTrainedTokenizerBase

from trainer.rollout.base import RolloutBatch, SamplingParams

INSTALL_HINT = (
    "the vLLM backend needs the 'vllm' extra on a CUDA host: pip install 'harness[vllm]' "
    "(vLLM ships CUDA-only wheels; the transformers backend needs nothing more)"
)

LOGPROBS_MODE = "processed_logprobs"
"""vLLM's name for log-probabilities after temperature and top-k/top-p, the distribution sampled from."""


def import_vllm() -> Any:
    """The `vllm` module, or an ImportError that says how to get it."""
    try:
        import vllm
    except ImportError as error:
        raise ImportError(INSTALL_HINT) from error
    return vllm


class VLLMBackend:
    """Samples with a vLLM engine colocated with the trainer; `sync_weights` pushes the trainer's weights in.

    `model_path` is a Hugging Face checkpoint directory (or hub name) the engine loads first;
    `tokenizer` defaults to the one saved there. A response ends at the tokenizer's EOS and at the
    checkpoint's generation-config EOS ids (as with the transformers backend's default; vLLM always
    stops at both) and at any `eos_token_ids` given; `add_special_tokens` is passed to the tokenizer
    (e.g. to prepend BOS).
    Other keyword arguments go to `vllm.LLM` as engine arguments (e.g. `enforce_eager=True`).
    """

    def __init__(
        self,
        model_path: str,
        tokenizer: PreTrainedTokenizerBase | None = None,
        *,
        dtype: str = "bfloat16",
        gpu_memory_utilization: float = 0.3,
        max_model_len: int | None = None,
        enable_sleep_mode: bool = False,
        enable_prefix_caching: bool = True,
        seed: int = 0,
        eos_token_ids: Sequence[int] | None = None,
        add_special_tokens: bool = True,
        **engine_kwargs: Any,
    ):
        vllm = import_vllm()
        if engine_kwargs.get("logprobs_mode", LOGPROBS_MODE) != LOGPROBS_MODE:
            raise ValueError(
                f"logprobs_mode must stay {LOGPROBS_MODE!r}: RolloutBatch.logprobs are those of the "
                f"distribution sampled from, got {engine_kwargs['logprobs_mode']!r}"
            )
        self._vllm = vllm
        self.tokenizer = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(model_path)
        self.add_special_tokens = add_special_tokens
        eos = set(eos_token_ids or ()) | _checkpoint_eos(model_path)  # vLLM always stops at the checkpoint's EOS
        if self.tokenizer.eos_token_id is not None:
            eos.add(self.tokenizer.eos_token_id)  # and at the tokenizer's
        if not eos:
            raise ValueError("no end-of-sequence token: pass eos_token_ids")
        self.eos_token_ids = sorted(eos)
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.eos_token_ids[0]
        self.enable_sleep_mode = enable_sleep_mode

        self.processed_logprobs = _has_engine_arg(vllm, "logprobs_mode")
        kwargs: dict[str, Any] = dict(
            model=model_path,
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            enable_sleep_mode=enable_sleep_mode,
            enable_prefix_caching=enable_prefix_caching,
            seed=seed,
        )
        if self.processed_logprobs:
            kwargs["logprobs_mode"] = LOGPROBS_MODE
        else:
            warnings.warn(
                f"vllm {getattr(vllm, '__version__', '?')} has no logprobs_mode (added in vLLM 0.10): "
                "its log-probabilities are not those of the tempered / nucleus distribution sampled "
                "from, as RolloutBatch.logprobs documents, whenever temperature != 1 or top_p < 1",
                stacklevel=2,
            )
        kwargs.update(engine_kwargs)
        # the engine core in this process: apply_model may then take a closure over the trainer's tensors
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        self.llm = vllm.LLM(**kwargs)
        self._asleep = False

    def generate(self, prompts: Sequence[str], params: SamplingParams, seed: int) -> RolloutBatch:
        """Sample one response per prompt (see the module docstring for how)."""
        params.check()
        if not prompts:
            raise ValueError("no prompts")
        encoded = self.tokenizer(list(prompts), add_special_tokens=self.add_special_tokens)["input_ids"]
        if min(len(e) for e in encoded) == 0:
            raise ValueError("a prompt encodes to no tokens")
        requests = [
            self._vllm.SamplingParams(**self.sampling_kwargs(params, row_seed))
            for row_seed in row_seeds(seed, len(encoded))
        ]
        self._wake()
        self.llm.reset_prefix_cache()
        outputs = self.llm.generate([{"prompt_token_ids": list(e)} for e in encoded], requests, use_tqdm=False)
        if self.enable_sleep_mode:
            self.llm.sleep(level=1)
            self._asleep = True
        return self._batch(encoded, outputs, params)

    def sampling_kwargs(self, params: SamplingParams, row_seed: int) -> dict[str, Any]:
        """The `vllm.SamplingParams` arguments for one request: our parameters mapped one to one."""
        return dict(
            n=1,
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_new_tokens,
            seed=row_seed,
            logprobs=0,
            stop_token_ids=list(self.eos_token_ids),
            detokenize=False,
        )

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Copy `model`'s current weights into the engine (its state_dict names are the checkpoint's).

        `model` is the plain transformers module (not wrapped by DDP or torch.compile); its dtype and
        device may differ from the engine's (the copy converts).
        """
        self._wake()
        weights = [(name, tensor.detach()) for name, tensor in model.state_dict().items()]
        self.llm.apply_model(functools.partial(_load_weights, weights))
        self.llm.reset_prefix_cache()  # cached KV blocks hold the old weights' keys and values

    def _wake(self) -> None:
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False

    def _batch(self, encoded: list[list[int]], outputs: Sequence[Any], params: SamplingParams) -> RolloutBatch:
        """The padded tensors of trainer/rollout/base.py from vLLM's RequestOutputs (one per prompt, in order)."""
        if len(outputs) != len(encoded):
            raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(encoded)} prompts")
        eos = set(self.eos_token_ids)
        responses, logprobs, truncated = [], [], []
        for out in outputs:
            completion = out.outputs[0]
            ids = [int(t) for t in completion.token_ids]
            if completion.finish_reason not in ("stop", "length") or not 0 < len(ids) <= params.max_new_tokens:
                raise RuntimeError(
                    f"vLLM request ended with finish_reason={completion.finish_reason!r} "
                    f"after {len(ids)} tokens (max_new_tokens={params.max_new_tokens})"
                )
            if completion.logprobs is None or len(completion.logprobs) != len(ids):
                raise RuntimeError("vLLM returned no log-probability for some sampled tokens")
            # each position maps token id -> Logprob; the sampled token is always among them
            logprobs.append([float(position[token].logprob) for position, token in zip(completion.logprobs, ids)])
            responses.append(ids)
            # by the tokens, not finish_reason: some vLLM versions report "length" for an EOS drawn as the last
            # allowed token, and a response cut by the engine's max_model_len never ended either
            truncated.append(ids[-1] not in eos)
            if completion.finish_reason == "stop" and truncated[-1]:
                raise RuntimeError(f"vLLM stopped on token {ids[-1]}, which is not an EOS id {self.eos_token_ids}")

        n, width = len(encoded), max(len(e) for e in encoded)
        prompt_ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        prompt_mask = torch.zeros((n, width), dtype=torch.long)
        for i, e in enumerate(encoded):  # left padding
            prompt_ids[i, width - len(e) :] = torch.tensor(e, dtype=torch.long)
            prompt_mask[i, width - len(e) :] = 1
        lengths = torch.tensor([len(r) for r in responses], dtype=torch.long)
        used = int(lengths.max())
        response_ids = torch.full((n, used), self.pad_id, dtype=torch.long)
        response_logprobs = torch.zeros((n, used), dtype=torch.float32)
        for i, (ids, lps) in enumerate(zip(responses, logprobs)):  # right padding
            response_ids[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            response_logprobs[i, : len(lps)] = torch.tensor(lps, dtype=torch.float32)
        response_mask = (torch.arange(used) < lengths[:, None]).long()
        texts = self.tokenizer.batch_decode(responses, skip_special_tokens=True)
        return RolloutBatch(
            prompt_ids=prompt_ids,
            prompt_mask=prompt_mask,
            response_ids=response_ids,
            response_mask=response_mask,
            logprobs=response_logprobs,
            lengths=lengths,
            truncated=torch.tensor(truncated, dtype=torch.bool),
            texts=texts,
        )


def row_seeds(seed: int, n: int) -> list[int]:
    """One seed per row, from the call's seed: distinct in practice (63-bit hashes), so the G repeats of a
    prompt are independent samples; row i's seed depends on (seed, i) only."""
    words = np.random.SeedSequence(seed % 2**64).generate_state(n, dtype=np.uint64)
    return [int(w >> np.uint64(1)) for w in words]  # < 2**63: vLLM keeps seeds as int64


def _load_weights(weights: list[tuple[str, torch.Tensor]], engine_model: torch.nn.Module) -> None:
    """Run inside vLLM's worker on its raw model: its `load_weights` maps checkpoint names onto its own layout
    (fused qkv / gate_up projections, tied embeddings, GPT-2's transposed Conv1D weights)."""
    with torch.no_grad():
        engine_model.load_weights(iter(weights))


def _has_engine_arg(vllm: Any, name: str) -> bool:
    """Whether this vLLM's EngineArgs (the LLM's keyword arguments) has `name`."""
    engine_args = getattr(vllm, "EngineArgs", None)
    return dataclasses.is_dataclass(engine_args) and name in {f.name for f in dataclasses.fields(engine_args)}


def _checkpoint_eos(model_path: str) -> set[int]:
    """EOS ids listed in the checkpoint's generation config (chat models often list several)."""
    try:
        source = GenerationConfig.from_pretrained(model_path).eos_token_id
    except OSError:  # no generation_config.json
        return set()
    if source is None:
        return set()
    return {int(source)} if isinstance(source, int) else {int(i) for i in source}
