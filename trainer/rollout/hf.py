"""Rollouts with plain transformers: a hand-written batched decode loop over the trainer's own model.

Why not `model.generate`: it keeps decoding every row of the batch until the last
one ends, and it does not return the log-probabilities of the distribution it
sampled from. The loop below prefills with the model's forward and a `DynamicCache`,
steps with a decoder that `pick_decoder` chooses (the model's forward, `LlamaDecoder`,
or `StaticDecoder` over a preallocated cache, captured as CUDA graphs on a CUDA device),
and does the rest in a handful of tensor operations per token:

- prompts are deduplicated (a GRPO group repeats its prompt G times), left-padded,
  prefilled once per distinct prompt, and the cache is fanned out to the samples;
- position ids count real tokens only, so a padded prompt sees exactly the
  positions it would see alone;
- finished rows are dropped from the batch (the cache is compacted) as they
  accumulate, so the long tail of a few long responses runs at a small batch;
  the loop stops when all have ended;
- sampling is by inverse CDF from one seeded `torch.Generator`, drawing one uniform
  per response and step whether or not the row is still in the batch: the same seed
  and weights give the same batch, with or without compaction.

benchmarks/rollout_speed.py measures it against `model.generate` on the toy shape:
about 2x faster when lengths spread out, ~1.15x when every response runs to the limit
(the model's own forward is then nearly all the time).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Sequence
from typing import Literal, get_args

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from trainer.rollout import llama_decode, static_decode
from trainer.rollout.base import RolloutBatch, SamplingParams
from trainer.rollout.llama_decode import LlamaDecoder
from trainer.rollout.static_decode import StaticDecoder

COMPACT_FRACTION = 0.125
"""Drop finished rows from the decode batch once at least this share of it has finished: each compaction
copies the whole cache, so doing it at every single finish costs more than it saves (measured in
benchmarks/rollout_speed.py; 0.1 to 0.25 were equally fast there, never compacting ~1.8x slower)."""

Decoder = Literal["auto", "forward", "llama", "static", "fixed", "graph"]
"""The decode step: forward = the model's own forward with a `DynamicCache`; llama = `LlamaDecoder`; static =
`StaticDecoder` attending over the columns written so far (bitwise the model's forward); fixed = `StaticDecoder` at
fixed shapes, uncaptured (what a graph replays, for tests and benchmarks); graph = fixed, captured as CUDA graphs
(CUDA only). auto: see `pick_decoder`."""
DECODERS: tuple[str, ...] = get_args(Decoder)


class TransformersBackend:
    """Samples from a transformers causal LM in-process, sharing the trainer's weights.

    `logprobs` are log-probabilities under the distribution each token was drawn
    from: log_softmax(logits / temperature), restricted to the top-p nucleus and
    renormalised over it when top_p < 1. So they equal what a trainer recomputes
    from the same weights only at temperature 1 without top-p; otherwise the
    trainer must apply the same temperature (and nucleus) to compare them.
    Temperature 0 is greedy decoding (argmax; top_p is then ignored); there is no
    sampling distribution to speak of, so its logprobs are the model's own
    (temperature 1) log-probabilities of the greedy tokens.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        device: torch.device | str | None = None,
        eos_token_ids: Sequence[int] | None = None,
        add_special_tokens: bool = True,
        decoder: Decoder = "auto",
        capture: bool = True,
    ):
        """`eos_token_ids` defaults to the tokenizer's EOS plus the model's generation-config EOS ids;
        `add_special_tokens` is passed to the tokenizer (e.g. to prepend BOS); `decoder` picks the decode step
        (`DECODERS`; auto picks by model and device); `capture` lets auto capture the step as CUDA graphs on a CUDA
        device (`rollout.capture`)."""
        self.model = model
        self.tokenizer = tokenizer
        self._device = torch.device(device) if device is not None else None
        pick_decoder(decoder, capture, self.device.type, model)  # a bad name or an unsupported model: fail here
        self.decoder, self.capture = decoder, capture
        self.add_special_tokens = add_special_tokens
        self.eos_token_ids = sorted(set(eos_token_ids) if eos_token_ids is not None else _default_eos(model, tokenizer))
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (self.eos_token_ids[0] if self.eos_token_ids else 0)
        self._keep_kw = _logits_to_keep_kwarg(model)
        self._cache_kw = _cache_kwarg(model)

    @property
    def device(self) -> torch.device:
        """Where inputs go: the device given, else the model's."""
        return self._device if self._device is not None else next(self.model.parameters()).device

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Nothing to copy: the backend samples from the trainer's model object itself (or this one from now on).

        `generate` switches the model to eval mode without autograd and restores its mode afterwards.
        """
        self.model = model

    def generate(self, prompts: Sequence[str], params: SamplingParams, seed: int) -> RolloutBatch:
        """Sample one response per prompt (see the module docstring for how)."""
        params.check()
        unique_ids, unique_mask, inverse = self._encode(prompts)
        with _eval_mode(self.model), torch.inference_mode():
            response_ids, logprobs, ends = self._decode(unique_ids, unique_mask, inverse, params, seed)
        # clones leave inference mode, so the trainer may use these tensors in autograd graphs
        response_ids, logprobs = response_ids.clone(), logprobs.clone()
        truncated = ends > params.max_new_tokens  # the decode loop's mark for "never ended"
        lengths = ends.clamp(max=params.max_new_tokens)
        response_mask = (torch.arange(response_ids.shape[1], device=self.device) < lengths[:, None]).long()
        texts = self.tokenizer.batch_decode(
            [row[:n] for row, n in zip(response_ids.tolist(), lengths.tolist())], skip_special_tokens=True
        )
        return RolloutBatch(
            prompt_ids=unique_ids[inverse],
            prompt_mask=unique_mask[inverse],
            response_ids=response_ids,
            response_mask=response_mask,
            logprobs=logprobs,
            lengths=lengths,
            truncated=truncated,
            texts=texts,
        )

    def _encode(self, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Left-padded ids and mask of the distinct prompts, and for each prompt its distinct row."""
        if not prompts:
            raise ValueError("no prompts")
        index: dict[str, int] = {}
        inverse = [index.setdefault(p, len(index)) for p in prompts]
        encoded = self.tokenizer(list(index), add_special_tokens=self.add_special_tokens)["input_ids"]
        if min(len(e) for e in encoded) == 0:
            raise ValueError("a prompt encodes to no tokens")
        width = max(len(e) for e in encoded)
        ids = torch.full((len(encoded), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(encoded), width), dtype=torch.long)
        for i, e in enumerate(encoded):
            ids[i, width - len(e) :] = torch.tensor(e, dtype=torch.long)
            mask[i, width - len(e) :] = 1
        return ids.to(self.device), mask.to(self.device), torch.tensor(inverse, device=self.device)

    def _step_decoder(self, prefill: DynamicCache, columns: int) -> LlamaDecoder | StaticDecoder | None:
        """The decoder for this model and device over the prompts' cache `prefill` (None: the model's forward);
        `columns` is the most keys a row will hold."""
        choice = pick_decoder(self.decoder, self.capture, self.device.type, self.model)
        if choice == "forward":
            return None
        if choice == "llama":
            return LlamaDecoder(self.model, prefill)
        return StaticDecoder(self.model, prefill, columns, fixed_shape=choice != "static", graph=choice == "graph")

    def _decode(
        self,
        unique_ids: torch.Tensor,
        unique_mask: torch.Tensor,
        inverse: torch.Tensor,
        params: SamplingParams,
        seed: int,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The decode loop: [N, L] tokens and logprobs (pad / 0 after the end), and [N] end positions
        (the length, or max_new_tokens + 1 for a response that never ended)."""
        dev, n, max_new, width = self.device, inverse.shape[0], params.max_new_tokens, unique_ids.shape[1]
        generator = torch.Generator(device=dev).manual_seed(seed)
        positions = (unique_mask.cumsum(1) - 1).clamp(min=0)  # real tokens only: padding does not shift them
        eos = torch.tensor(self.eos_token_ids, dtype=torch.long, device=dev)

        cache = DynamicCache(config=self.model.config)
        out = self.model(
            input_ids=unique_ids,
            attention_mask=unique_mask,
            position_ids=positions,
            **{self._cache_kw: cache},
            use_cache=True,
            **self._keep_kw,
        )
        logits = out.logits[:, -1, :][inverse]
        if unique_ids.shape[0] != n or not torch.equal(inverse, torch.arange(n, device=dev)):
            cache.reorder_cache(inverse)  # fan each prefilled prompt out to its samples
        fast = self._step_decoder(cache, width + max_new - 1)

        # the rows still decoding, as indices into the output, with their mask and next position
        rows = torch.arange(n, device=dev)
        attn = torch.cat([unique_mask[inverse], unique_mask.new_ones((n, max_new))], dim=1)
        next_pos = positions[inverse, -1] + 1
        tokens = torch.full((n, max_new), self.pad_id, dtype=torch.long, device=dev)
        logprobs = torch.zeros((n, max_new), dtype=torch.float32, device=dev)
        ends = torch.full((n,), max_new + 1, dtype=torch.long, device=dev)
        check_every = 1 if dev.type == "cpu" else 8  # reading a count syncs a GPU: look less often there
        for t in range(max_new):
            # one uniform per output row and step, drawn for every row: compaction does not change the samples
            uniform = torch.rand((n, 1), generator=generator, device=dev, dtype=torch.float64)[rows]
            token, logprob = _sample(logits, params, uniform)
            tokens[rows, t] = token
            logprobs[rows, t] = logprob
            row_ends = ends[rows]
            row_ends = torch.where(torch.isin(token, eos) & (row_ends > max_new), t + 1, row_ends)
            ends[rows] = row_ends
            if t + 1 == max_new:
                break
            if t % check_every == 0:
                done = row_ends <= max_new
                n_done = int(done.sum())
                if n_done == rows.shape[0]:
                    break
                if n_done >= COMPACT_FRACTION * rows.shape[0]:
                    keep = (~done).nonzero()[:, 0]
                    rows, token, next_pos, attn = rows[keep], token[keep], next_pos[keep], attn[keep]
                    if fast is not None:
                        fast.compact(keep)
                    else:
                        cache.reorder_cache(keep)
            # finished rows not yet compacted away keep decoding; what they produce is blanked below
            if fast is not None:
                logits = fast.step(token, next_pos, attn[:, : width + t + 1])
            else:
                out = self.model(
                    input_ids=token[:, None],
                    attention_mask=attn[:, : width + t + 1],
                    position_ids=next_pos[:, None],
                    **{self._cache_kw: cache},
                    use_cache=True,
                )
                logits = out.logits[:, -1, :]
            next_pos = next_pos + 1
        used = int(ends.clamp(max=max_new).max())
        after_end = torch.arange(used, device=dev) >= ends[:, None]
        return (
            tokens[:, :used].masked_fill(after_end, self.pad_id),
            logprobs[:, :used].masked_fill(after_end, 0.0),
            ends,
        )


def pick_decoder(decoder: Decoder, capture: bool, device_type: str, model: PreTrainedModel) -> Decoder:
    """The decode step `decoder` resolves to (never auto): auto is graph on a CUDA device when `capture` is on and
    `static_decode.supports` the model, else llama where `llama_decode.supports` it, else static where
    `static_decode.supports` it, else forward. A step named for a model it does not support is a ValueError."""
    if decoder not in DECODERS:
        raise ValueError(f"decoder must be one of {', '.join(DECODERS)}, got {decoder!r}")
    static = static_decode.supports(model)
    if decoder == "auto":
        if capture and device_type == "cuda" and static:
            return "graph"
        return "llama" if llama_decode.supports(model) else "static" if static else "forward"
    if not (llama_decode.supports(model) if decoder == "llama" else static or decoder == "forward"):
        raise ValueError(f"decoder {decoder!r} does not support this model ({model.config.model_type})")
    if decoder == "graph" and device_type != "cuda":
        raise ValueError(f"decoder 'graph' captures CUDA graphs: it needs a CUDA device, not {device_type}")
    return decoder


def _sample(logits: torch.Tensor, params: SamplingParams, uniform: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row and its log-probability under the (tempered, nucleus-renormalised) sampling distribution;
    `uniform` ([R, 1] in [0, 1), float64) is the row's randomness."""
    logits = logits.float()
    if params.temperature == 0:
        token = logits.argmax(-1, keepdim=True)
        return token[:, 0], torch.log_softmax(logits, dim=-1).gather(-1, token)[:, 0]
    if params.temperature != 1.0:
        logits = logits / params.temperature
    logp = torch.log_softmax(logits, dim=-1)
    if params.top_p == 1.0:
        token = _inverse_cdf(logp.double().exp().cumsum(-1), uniform)
        return token[:, 0], logp.gather(-1, token)[:, 0]
    # nucleus: the smallest set of most likely tokens whose mass reaches top_p (the most likely one always)
    sorted_logp, order = logp.sort(dim=-1, descending=True)
    sorted_p = sorted_logp.double().exp()
    outside = (sorted_p.cumsum(-1) - sorted_p) >= params.top_p
    cdf = sorted_p.masked_fill(outside, 0.0).cumsum(-1)
    rank = _inverse_cdf(cdf, uniform)
    logprob = sorted_logp.gather(-1, rank)[:, 0] - cdf[:, -1].log().float()  # renormalised over the nucleus
    return order.gather(-1, rank)[:, 0], logprob


def _inverse_cdf(cdf: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """[R, 1] indices drawn from the unnormalised cumulative distributions `cdf` ([R, V], float64).

    Several times cheaper than `torch.multinomial` at small vocabularies. The scaled uniform is kept
    strictly below the total, so a zero-probability index can never be drawn.
    """
    total = cdf[:, -1:]
    u = uniform * total
    u = torch.minimum(u, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, u, right=True)


@contextlib.contextmanager
def _eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """Eval mode (no dropout) while sampling; the caller's train/eval mode is restored afterwards."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def _default_eos(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """EOS ids from the tokenizer and the generation config (chat models often list several)."""
    ids: set[int] = set()
    gen = getattr(model, "generation_config", None)
    for source in (tokenizer.eos_token_id, getattr(gen, "eos_token_id", None)):
        if isinstance(source, int):
            ids.add(source)
        elif source is not None:
            ids.update(int(i) for i in source)
    if not ids:
        raise ValueError("no end-of-sequence token: pass eos_token_ids")
    return ids


def _cache_kwarg(model: torch.nn.Module) -> str:
    """The forward's name for the KV cache: `cache` from transformers 5.x (`past_key_values` is deprecated there
    and warns), `past_key_values` before."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _logits_to_keep_kwarg(model: torch.nn.Module) -> dict[str, int]:
    """Ask the prefill for last-position logits only ([N, P, vocab] logits of a real vocabulary are gigabytes)."""
    names = inspect.signature(model.forward).parameters
    for name in ("logits_to_keep", "num_logits_to_keep"):
        if name in names:
            return {name: 1}
    return {}
