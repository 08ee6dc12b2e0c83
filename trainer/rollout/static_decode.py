"""A decode step for Llama- and Qwen2-architecture models over a preallocated KV cache, capturable as a CUDA graph.

The GPU run measured the decode launch-bound: a step of a small model is hundreds of small kernel launches, and the
GPU sat idle between them. `StaticDecoder` keeps each layer's keys and values in one buffer allocated for the whole
decode ([rows, key/value heads, prompt width + max_new_tokens - 1, head dim]), writes each new token's keys and values
into its column, and runs the model's own operations on its own weights (as `LlamaDecoder` does: RMSNorm modules,
the rotary embedding module, transformers' `sdpa_attention_forward`, q/k/v and gate/up each as one matmul). Two ways
to attend:

- grown (the default): attention reads the buffer's columns written so far (a view), the same keys and values the
  model's forward would read from its `DynamicCache`, under the same mask (none when every column is visible, as
  transformers leaves it out). The log-probabilities are bitwise the model's own in float32 on CPU
  (`tests/test_static_decode.py`), so the samples are the same.
- fixed shape (`fixed_shape=True`): every step attends over all the buffer's columns, the ones not yet written masked
  out, so every tensor of a step has the same shape at every step, and the step can be captured (`graph=True`: one
  CUDA graph per batch size, replayed with the step's inputs copied into static buffers). The softmax and the
  attention's weighted sum then run over more (masked, zero) columns: a different blocking of the same float sums,
  so log-probabilities differ from the model's in the last bits (on CPU in float32, up to ~2e-6 after 40 tokens):
  the same distribution up to rounding, not bitwise the same samples.

Capture is CUDA only (`TransformersBackend` asks for it on a CUDA device unless `rollout.capture` is false); the
captured path awaits a run on a GPU (docs/rollout.md). Rows that finish are compacted in place, at the front of the
buffers, so a graph captured for a batch size keeps pointing at valid memory.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import DynamicCache, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from trainer.rollout.llama_decode import fused, rotate_half

GRAPH_WARMUP = 2
"""Eager runs of the step on a side stream before capturing it (lazy library initialisation must not be captured:
PyTorch's CUDA-graph recipe); each writes the same keys and values the replay writes."""


def supports(model: PreTrainedModel) -> bool:
    """Whether `StaticDecoder` computes what this model's forward computes (exactly when grown, to rounding at fixed
    shapes): Llama or Qwen2, grouped keys/values or not, SDPA attention, default RoPE, no sliding window."""
    config = model.config
    rope = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    layers = getattr(config, "layer_types", None) or ["full_attention"]
    return (
        config.model_type in ("llama", "qwen2")
        and getattr(config, "pretraining_tp", 1) == 1
        and config._attn_implementation == "sdpa"
        and config.hidden_act == "silu"
        and rope == "default"
        and all(kind == "full_attention" for kind in layers)  # no sliding-window layers
    )


class StaticDecoder:
    """Preallocated keys and values of the rows being decoded, and one-token steps over them."""

    def __init__(
        self,
        model: PreTrainedModel,
        prefill: DynamicCache,
        columns: int,
        *,
        fixed_shape: bool = False,
        graph: bool = False,
    ):
        """`prefill`: the cache after the prompts' forward, one row per sample; `columns`: the most keys a row will
        hold (prompt width + max_new_tokens - 1: the last sampled token is never fed back)."""
        if graph and not (fixed_shape and prefill.layers[0].keys.device.type == "cuda"):
            raise ValueError("a CUDA graph needs fixed_shape=True and a CUDA device")
        self.model, self.inner = model, model.model
        self.layers = list(self.inner.layers)
        config = model.config
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.qkv = [fused(x.self_attn.q_proj, x.self_attn.k_proj, x.self_attn.v_proj) for x in self.layers]
        self.gate_up = [fused(x.mlp.gate_proj, x.mlp.up_proj) for x in self.layers]
        first = prefill.layers[0].keys
        rows, width, device = first.shape[0], first.shape[2], first.device
        # zeros, not empty: a masked column still enters the fixed-shape sums (weight 0 × value), and 0 × NaN is NaN
        shape = (rows, self.kv_heads, max(columns, width), self.head_dim)
        self.keys, self.values = [], []
        for layer in prefill.layers[: len(self.layers)]:
            self.keys.append(first.new_zeros(shape))
            self.values.append(first.new_zeros(shape))
            self.keys[-1][:, :, :width] = layer.keys
            self.values[-1][:, :, :width] = layer.values
        self.rows, self.filled = rows, width
        self.fixed_shape, self.graph = fixed_shape, graph
        if fixed_shape:  # the step's inputs, copied into tensors that keep their address
            self.token = torch.zeros(rows, dtype=torch.long, device=device)
            self.position = torch.zeros(rows, dtype=torch.long, device=device)
            self.mask = torch.zeros(rows, shape[2], dtype=torch.bool, device=device)
            self.column = torch.zeros(1, dtype=torch.long, device=device)
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}

    def compact(self, keep: torch.Tensor) -> None:
        """Keep only the rows `keep` (indices into the current rows), moved to the front of the buffers."""
        for buffers in (self.keys, self.values):
            for b in buffers:
                b[: keep.shape[0], :, : self.filled] = b[: self.rows, :, : self.filled].index_select(0, keep)
        self.rows = keep.shape[0]

    def step(self, token: torch.Tensor, position: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Logits [R, V] after one token per row; `position` [R] its position id, `mask` [R, positions] the rows'
        attention mask over every position so far, this token's included (its last column is this token's)."""
        rows, seen = mask.shape
        self.filled = seen
        if not self.fixed_shape:
            return self._forward(token, position, mask, seen - 1)
        self.token[:rows].copy_(token)
        self.position[:rows].copy_(position)
        self.mask[:rows, :seen].copy_(mask)  # columns past `seen` were never written: still False
        self.column.fill_(seen - 1)
        inputs = (self.token[:rows], self.position[:rows], self.mask[:rows], self.column)
        if not self.graph:
            return self._forward(*inputs)
        if rows not in self.graphs:
            self.graphs[rows] = self._capture(inputs)
        graph, logits = self.graphs[rows]
        graph.replay()
        return logits

    def _capture(self, inputs: tuple[torch.Tensor, ...]) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        """A CUDA graph of the fixed-shape step on `inputs` (views of the static input tensors), and its output."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(GRAPH_WARMUP):
                self._forward(*inputs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            logits = self._forward(*inputs)
        return graph, logits

    def _forward(
        self, token: torch.Tensor, position: torch.Tensor, mask: torch.Tensor, column: int | torch.Tensor
    ) -> torch.Tensor:
        """The step: `column` is where this token's keys go, an int (grown: attend over columns up to it) or a
        one-element tensor (fixed shape: attend over every column, `mask` [R, columns] hiding the unwritten ones)."""
        rows = token.shape[0]
        x = self.inner.embed_tokens(token[:, None])
        cos, sin = self.inner.rotary_emb(x, position[:, None])
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        if isinstance(column, int):  # as the model's mask: none when every column is visible
            visible = None if bool(mask.all()) else mask[:, None, None, :].bool()
        else:
            visible = mask[:, None, None, :]
        q_heads, qk_heads = self.heads, self.heads + self.kv_heads
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            qkv = F.linear(h, *self.qkv[i]).view(rows, 1, qk_heads + self.kv_heads, self.head_dim).transpose(1, 2)
            qk, v = qkv[:, :qk_heads], qkv[:, qk_heads:]
            qk = qk * cos + rotate_half(qk) * sin  # queries and keys rotated together: the same numbers, fewer ops
            q, k = qk[:, :q_heads], qk[:, q_heads:]
            keys, values = self.keys[i][:rows], self.values[i][:rows]
            if isinstance(column, int):
                keys[:, :, column : column + 1] = k
                values[:, :, column : column + 1] = v
                keys, values = keys[:, :, : column + 1], values[:, :, : column + 1]
            else:
                keys.index_copy_(2, column, k)
                values.index_copy_(2, column, v)
            # transformers' own attention function: the same grouped-query handling as the model's forward
            out, _ = sdpa_attention_forward(attn, q, keys, values, visible, scaling=attn.scaling)
            x = x + F.linear(out.reshape(rows, 1, -1), attn.o_proj.weight, attn.o_proj.bias)
            h = layer.post_attention_layernorm(x)
            gate, up = F.linear(h, *self.gate_up[i]).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, layer.mlp.down_proj.weight, layer.mlp.down_proj.bias)
        x = self.inner.norm(x)
        return self.model.lm_head(x)[:, -1, :]
