"""Each response token's log-probability and entropy under a causal LM, without its whole logits when they are large.

The update needs log π(o_t) and H_t for every response token. Taken from the logits, that means a [n, T, V] float32
tensor, the largest of an update with a large vocabulary (Qwen's 151,936: 0.6 GB per 1,024 tokens), and autograd
keeps several more of its size for the backward (the softmax, the gradient). `ResponseScorer` takes the decoder's last
hidden states instead (after the final norm) and `ChunkedHead` computes the logits a chunk of positions at a time, in
the forward and again in the backward, so that one chunk's logits at most live at once: the fused linear
cross-entropy idea, here with the entropy and its gradient too. Values are those of the logits path up to float
rounding: the chunk's logits are made the same way (the output layer in the model's dtype, then upcast, then divided
by the temperature), and the log-sum-exp and entropy are per position.

The chunked path applies to a model whose logits are its output embedding applied to its decoder's last hidden
states (`output_head` checks that once per model, on a probe input), and to a micro-batch whose logits exceed one
chunk; the others go through the model's own forward, as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F

from trainer.objective import token_entropy, token_logprobs, token_sum_pi_squared

Entropy = Literal["none", "value", "trained"]
"""What to return of the entropy: nothing, its value (no gradient), or its value with its gradient (a bonus)."""
PROBE_TOKENS = 8
"""Length of the probe input of `output_head` (the last half of its positions is compared)."""


def upcast(logits: torch.Tensor) -> torch.Tensor:
    """The logits in float32, or in their own dtype when wider (float64 stays float64)."""
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


def chunk_rows(vocab: int, dtype: torch.dtype, chunk_mb: float) -> int:
    """Positions per chunk: as many as have logits of at most `chunk_mb` MiB in their upcast dtype (at least one)."""
    size = torch.empty((), dtype=torch.promote_types(dtype, torch.float32)).element_size()
    return max(1, int(chunk_mb * 2**20) // (vocab * size))


def _chunk_logits(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, temperature: float
) -> torch.Tensor:
    """z = upcast(h Wᵀ + b) / temperature for one chunk of positions: the logits path's operations, in its order."""
    return upcast(F.linear(hidden, weight, bias)).div_(temperature)  # in place: the product is this chunk's own


def chunks(n: int, width: int, rows: int) -> list[tuple[slice, slice]]:
    """(rows, columns) of each chunk of an [n, width] grid of positions, at most `rows` positions each: whole rows,
    `rows // width` at a time, when a row fits in a chunk, else each row in blocks of `rows` positions. A row is never
    cut unless it is longer than a chunk, and then at the same places in any batch of that width, so that its values
    do not depend on where it sits among the same rows: an on-policy step's log ratio is exactly 0 where it is with
    the whole logits (the old log-probabilities from micro-batches of the same rows, in another order)."""
    if width <= rows:
        per = rows // width
        return [(slice(i, i + per), slice(None)) for i in range(0, n, per)]
    return [(slice(i, i + 1), slice(j, j + rows)) for i in range(n) for j in range(0, width, rows)]


class ChunkedHead(torch.autograd.Function):
    """(log π(o_t), H_t), each [n, T], from hidden states [n, T, H], the output layer (W [V, H], b [V] or None), the
    tokens [n, T] and the temperature, in `chunks` of at most `rows` positions; the entropy only if asked for (else
    an empty tensor).

    Forward, per chunk: z = upcast(h Wᵀ + b)/τ, log π(o) = z_o − logsumexp(z), H = logsumexp(z) − Σ_v p_v z_v with
    p = exp(z − logsumexp(z)).
    Backward, per chunk, with the logits recomputed: ∂log π(o)/∂z_j = δ_jo − p_j and ∂H/∂z_j = −p_j (log p_j + H), so
    ∂L/∂z_j = g_o δ_jo − p_j (g_o + g_H (log p_j + H)); then ∂L/∂(h Wᵀ + b) = (∂L/∂z)/τ cast to the model's dtype (the
    upcast's gradient), ∂L/∂h = that W, and ∂L/∂W, ∂L/∂b summed over the chunks in float32 (or wider).
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        tokens: torch.Tensor,
        temperature: float,
        rows: int,
        with_entropy: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        wide = torch.promote_types(hidden.dtype, torch.float32)
        logp, lse = (hidden.new_empty(tokens.shape, dtype=wide) for _ in range(2))
        entropy = hidden.new_empty(tokens.shape if with_entropy else (0,), dtype=wide)
        for r, c in chunks(*tokens.shape, rows):
            z = _chunk_logits(hidden[r, c].flatten(0, 1), weight, bias, temperature)
            shape = tokens[r, c].shape
            lse_z = torch.logsumexp(z, dim=-1, keepdim=True)
            lse[r, c] = lse_z.view(shape)
            logp[r, c] = (z.gather(1, tokens[r, c].reshape(-1, 1)) - lse_z).view(shape)
            if with_entropy:  # Σ_v p_v z_v with p = exp(z − logsumexp z): one pass of exp, in one buffer
                entropy[r, c] = (lse_z - z.sub(lse_z).exp_().mul_(z).sum(-1, keepdim=True)).view(shape)
        ctx.save_for_backward(hidden, weight, bias, tokens, lse, entropy)
        ctx.temperature, ctx.rows = temperature, rows
        ctx.set_materialize_grads(False)
        ctx.mark_non_differentiable(*(() if with_entropy else (entropy,)))
        return logp, entropy

    @staticmethod
    def backward(ctx: Any, g_logp: torch.Tensor | None, g_entropy: torch.Tensor | None) -> tuple[Any, ...]:
        if g_logp is None and g_entropy is None:
            return None, None, None, None, None, None, None
        hidden, weight, bias, tokens, lse, entropy = ctx.saved_tensors
        want_h, want_w, want_b = ctx.needs_input_grad[:3]
        wide = torch.promote_types(weight.dtype, torch.float32)  # the weight's gradient is summed over chunks in it
        d_hidden = torch.empty_like(hidden) if want_h else None
        d_weight = torch.zeros(weight.shape, dtype=wide, device=weight.device) if want_w else None
        d_bias = torch.zeros(weight.shape[0], dtype=wide, device=weight.device) if want_b else None
        for r, c in chunks(*tokens.shape, ctx.rows):
            h = hidden[r, c].flatten(0, 1)
            log_p = _chunk_logits(h, weight, bias, ctx.temperature).sub_(lse[r, c].reshape(-1, 1))
            p = log_p.exp()
            g_o = g_logp[r, c].reshape(-1, 1) if g_logp is not None else torch.zeros_like(p[:, :1])
            if g_entropy is not None:  # g_o + g_H (log p + H), in place of log p
                coef = log_p.add_(entropy[r, c].reshape(-1, 1)).mul_(g_entropy[r, c].reshape(-1, 1)).add_(g_o)
                d_z = p.mul_(coef).neg_()
            else:
                d_z = p.mul_(g_o).neg_()
            d_z.scatter_add_(1, tokens[r, c].reshape(-1, 1), g_o)
            d_out = d_z.div_(ctx.temperature).to(hidden.dtype)
            if d_hidden is not None:
                d_hidden[r, c] = (d_out @ weight).view(hidden[r, c].shape)
            if d_weight is not None:
                d_weight += (d_out.T @ h).to(wide)
            if d_bias is not None:
                d_bias += d_out.sum(0).to(wide)
        d_weight = None if d_weight is None else d_weight.to(weight.dtype)
        d_bias = None if d_bias is None else d_bias.to(bias.dtype)
        return d_hidden, d_weight, d_bias, None, None, None, None


@dataclass(frozen=True)
class OutputHead:
    """A causal LM split where its logits are made: `decoder` (input ids → last hidden states, after the final norm)
    and `linear` (hidden states → logits)."""

    decoder: torch.nn.Module
    linear: torch.nn.Linear


def output_head(model: torch.nn.Module) -> OutputHead | None:
    """The model's decoder and output layer, when its own logits are exactly that layer on the decoder's last hidden
    states; None when it has no such parts or its logits are made otherwise (a soft cap, a scale), which a probe
    shows: both ways on a probe input, in eval mode and without gradients, must give the same bits."""
    linear = getattr(model, "get_output_embeddings", lambda: None)()
    decoder = getattr(model, "get_decoder", lambda: None)()
    if not isinstance(linear, torch.nn.Linear) or decoder is None or decoder is model:
        return None
    pos = torch.arange(PROBE_TOKENS, device=linear.weight.device)[None]
    kwargs = {"input_ids": pos % linear.weight.shape[0], "attention_mask": torch.ones_like(pos), "position_ids": pos}
    keep = PROBE_TOKENS // 2
    training = model.training
    try:
        model.eval()
        with torch.no_grad():
            logits = model(**kwargs, logits_to_keep=keep).logits
            hidden = getattr(decoder(**kwargs, use_cache=False), "last_hidden_state", None)
            same = hidden is not None and torch.equal(linear(hidden[:, -keep:]), logits)
    finally:
        model.train(training)
    return OutputHead(decoder, linear) if same else None


class ResponseScorer:
    """Log-probabilities and entropies of response tokens: the model's logits whole, or `ChunkedHead` on its
    decoder's hidden states in chunks of at most `chunk_mb` MiB of logits (None: always whole)."""

    def __init__(self, temperature: float, chunk_mb: float | None):
        self.temperature, self.chunk_mb = temperature, chunk_mb
        self.heads: dict[int, OutputHead | None] = {}  # by id(model): `output_head`, probed once per model

    def __call__(
        self,
        model: torch.nn.Module,
        ids: torch.Tensor,
        attn: torch.Tensor,
        pos: torch.Tensor,
        width: int,
        entropy: Entropy = "none",
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """([n, width] log π(o_t), [n, width] H_t or None) of the last `width` tokens of `ids` [n, P + width] (the
        response, cut to `width`; P ≥ 1), each predicted from the positions before it, at the temperature."""
        tokens = ids[:, -width:]
        head = self._head(model, tokens.numel())
        if head is None:
            out = model(input_ids=ids, attention_mask=attn, position_ids=pos, logits_to_keep=width + 1)
            logits = upcast(out.logits[:, :-1, :]) / self.temperature
            if entropy == "none":
                return token_logprobs(logits, tokens), None
            return token_logprobs(logits, tokens), token_entropy(logits if entropy == "trained" else logits.detach())
        out = head.decoder(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=False)
        weight, bias = head.linear.weight, head.linear.bias
        logp, h = ChunkedHead.apply(
            out.last_hidden_state[:, -(width + 1) : -1, :].contiguous(),
            weight,
            bias,
            tokens,
            self.temperature,
            chunk_rows(weight.shape[0], weight.dtype, self.chunk_mb),
            entropy != "none",
        )
        if entropy == "none":
            return logp, None
        return logp, h if entropy == "trained" else h.detach()

    def probabilities(
        self, model: torch.nn.Module, ids: torch.Tensor, attn: torch.Tensor, pos: torch.Tensor, width: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """([n, width] log π(o_t), [n, width] Σ_v π_t(v)²) of the last `width` tokens of `ids`, as `__call__`'s
        log-probabilities, without gradients (the optimal token baseline's inputs). Through `ChunkedHead`'s chunks of
        logits when `__call__` would be, so the whole [n, width, V] logits never exist at once there either."""
        tokens = ids[:, -width:]
        with torch.no_grad():
            head = self._head(model, tokens.numel())
            if head is None:
                out = model(input_ids=ids, attention_mask=attn, position_ids=pos, logits_to_keep=width + 1)
                logits = upcast(out.logits[:, :-1, :]) / self.temperature
                return token_logprobs(logits, tokens), token_sum_pi_squared(logits)
            hidden = head.decoder(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=False)
            hidden = hidden.last_hidden_state[:, -(width + 1) : -1, :]
            weight, bias = head.linear.weight, head.linear.bias
            wide = torch.promote_types(hidden.dtype, torch.float32)
            logp, squares = (hidden.new_empty(tokens.shape, dtype=wide) for _ in range(2))
            for r, c in chunks(*tokens.shape, chunk_rows(weight.shape[0], weight.dtype, self.chunk_mb)):
                z = _chunk_logits(hidden[r, c].flatten(0, 1), weight, bias, self.temperature)
                shape = tokens[r, c].shape
                logp[r, c] = token_logprobs(z, tokens[r, c].reshape(-1)).view(shape)
                squares[r, c] = token_sum_pi_squared(z).view(shape)
            return logp, squares

    def _head(self, model: torch.nn.Module, positions: int) -> OutputHead | None:
        """The model's `output_head` when `positions` logits exceed one chunk, else None (computed whole)."""
        if self.chunk_mb is None:
            return None
        linear = getattr(model, "get_output_embeddings", lambda: None)()
        if not isinstance(linear, torch.nn.Linear):
            return None
        if positions <= chunk_rows(linear.weight.shape[0], linear.weight.dtype, self.chunk_mb):
            return None
        if id(model) not in self.heads:
            self.heads[id(model)] = output_head(model)
        return self.heads[id(model)]
