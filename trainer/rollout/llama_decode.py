"""A decode step for Llama-architecture models without transformers' per-call machinery.

At the toy's size (163k parameters) a decode step through `LlamaForCausalLM.forward` spends much of its time in
Python: module calls, mask building, cache bookkeeping, output objects. `LlamaDecoder` runs the same operations
on the model's own weights, in the same order and dtypes (RMSNorm in float32, the model's rotary embedding,
`scaled_dot_product_attention` under the same boolean padding mask), with the q/k/v and gate/up maps each as one
matmul, and keeps the keys and values itself. On the toy's rollout (16 prompts x 8 samples) it takes about 0.8x
the time of the model's forward, and gives bitwise the same log-probabilities, so the same samples
(`tests/test_rollout_contract.py`). Used where `supports` says so (Llama, no grouped keys/values, SDPA attention,
default RoPE) and no CUDA graph is captured; `pick_decoder` (trainer/rollout/hf.py) says what decodes the others.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import DynamicCache, PreTrainedModel


def supports(model: PreTrainedModel) -> bool:
    """Whether `LlamaDecoder` computes exactly what this model's forward computes."""
    config = model.config
    rope = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    return (
        config.model_type == "llama"
        and config.num_key_value_heads == config.num_attention_heads
        and getattr(config, "pretraining_tp", 1) == 1
        and config._attn_implementation == "sdpa"
        and config.hidden_act == "silu"
        and rope == "default"
    )


class LlamaDecoder:
    """Keys and values of the rows being decoded, and one-token steps over them."""

    def __init__(self, model: PreTrainedModel, prefill: DynamicCache):
        """`prefill`: the cache after the prompts' forward, one row per sample."""
        self.model, self.inner = model, model.model
        self.layers = list(self.inner.layers)
        self.heads = model.config.num_attention_heads
        self.head_dim = getattr(model.config, "head_dim", None) or model.config.hidden_size // self.heads
        self.qkv = [fused(x.self_attn.q_proj, x.self_attn.k_proj, x.self_attn.v_proj) for x in self.layers]
        self.gate_up = [fused(x.mlp.gate_proj, x.mlp.up_proj) for x in self.layers]
        self.keys = [prefill.layers[i].keys for i in range(len(self.layers))]
        self.values = [prefill.layers[i].values for i in range(len(self.layers))]

    def compact(self, keep: torch.Tensor) -> None:
        """Keep only the rows `keep` (indices into the current rows)."""
        self.keys = [k.index_select(0, keep) for k in self.keys]
        self.values = [v.index_select(0, keep) for v in self.values]

    def step(self, token: torch.Tensor, position: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Logits [R, V] after one token per row; `position` [R] its position id, `mask` [R, positions] the rows'
        attention mask over every position so far, this token's included."""
        x = self.inner.embed_tokens(token[:, None])
        cos, sin = self.inner.rotary_emb(x, position[:, None])
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        visible = mask[:, None, None, :].bool()
        rows = token.shape[0]
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            qkv = F.linear(h, *self.qkv[i]).view(rows, 1, 3 * self.heads, self.head_dim).transpose(1, 2)
            qk, v = qkv[:, : 2 * self.heads], qkv[:, 2 * self.heads :]
            qk = qk * cos + rotate_half(qk) * sin  # queries and keys rotated together: the same numbers, fewer ops
            q, k = qk[:, : self.heads], qk[:, self.heads :]
            # contiguous keys and values, as the attention kernel is fastest on (a view of a larger buffer took
            # ~3x longer per call here); the copy costs less than the kernel saves
            self.keys[i] = torch.cat((self.keys[i], k), dim=2)
            self.values[i] = torch.cat((self.values[i], v), dim=2)
            out = F.scaled_dot_product_attention(q, self.keys[i], self.values[i], attn_mask=visible, scale=attn.scaling)
            x = x + F.linear(out.transpose(1, 2).reshape(rows, 1, -1), attn.o_proj.weight, attn.o_proj.bias)
            h = layer.post_attention_layernorm(x)
            gate, up = F.linear(h, *self.gate_up[i]).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, layer.mlp.down_proj.weight, layer.mlp.down_proj.bias)
        x = self.inner.norm(x)
        return self.model.lm_head(x)[:, -1, :]


def fused(*linears: torch.nn.Linear) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One weight (and bias) for several linear maps of the same input: one matmul instead of several."""
    weight = torch.cat([m.weight for m in linears])
    bias = None if linears[0].bias is None else torch.cat([m.bias for m in linears])
    return weight, bias


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """The rotary embedding's half rotation, as transformers' `rotate_half`: (x1, x2) → (−x2, x1)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
