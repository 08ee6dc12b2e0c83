"""CPU time of one decode step (one token for every row of the batch, sampling included) for each decode path.

Two tiny random models of the toy's shape (vocab 28, hidden 64, 3 layers, 4 heads, MLP 192, tied embeddings): a
Qwen2 with 2 key/value heads (grouped-query attention, q/k/v biases) and the toy's Llama (4 key/value heads). Each
decodes 8 prompts × 8 samples with end-of-sequence disabled, so every step runs the whole batch of 64. A step's time
is (time of a batch of `--new-tokens` tokens − time of a batch of 1 token) / (`--new-tokens` − 1): the prefill and
the first sample cancel out. The decoders (trainer/rollout/hf.py `Decoder`): forward (the model's own forward and
`DynamicCache`), llama (`LlamaDecoder`, Llama without grouped keys/values only), static (`StaticDecoder`, the
columns written so far) and fixed (`StaticDecoder` at fixed shapes, uncaptured, as a CUDA graph would run it).

Minimum over repeats, the decoders of a model taking turns (this is a shared machine), as wall and as CPU seconds of
the calling thread. Prints a table and writes results/benchmarks/decode_step.json.

    python benchmarks/decode_step.py [--repeats 5] [--threads 1] [--new-tokens 96]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import Qwen2Config, Qwen2ForCausalLM  # noqa: E402

from benchmarks._report import write_json  # noqa: E402
from benchmarks.rollout_speed import PROMPTS, SAMPLES_PER_PROMPT, toy_model_and_tokenizer  # noqa: E402
from trainer.rollout.base import SamplingParams  # noqa: E402
from trainer.rollout.hf import TransformersBackend  # noqa: E402


def qwen2_like(llama: transformers.LlamaForCausalLM) -> Qwen2ForCausalLM:
    """A random Qwen2 of the toy Llama's shape with half its key/value heads."""
    c = llama.config
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=c.vocab_size,
        hidden_size=c.hidden_size,
        intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_hidden_layers,
        num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_attention_heads // 2,
        max_position_embeddings=c.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=c.bos_token_id,
        eos_token_id=c.eos_token_id,
        pad_token_id=c.pad_token_id,
    )
    return Qwen2ForCausalLM(config).eval()


def step_seconds(
    backends: list[TransformersBackend], prompts: list[str], new_tokens: int, repeats: int
) -> list[tuple[float, float]]:
    """(wall, CPU) seconds per decode step of each backend: from the minima over repeats of its batch times at
    `new_tokens` and at 1 token, the backends taking turns within each repeat (so a change of the machine's load hits
    them all), after a warm-up round. CPU time is the calling thread's: what a busy machine stretches less."""
    best = {(i, n, clock): float("inf") for i in range(len(backends)) for n in (1, new_tokens) for clock in (0, 1)}
    for rep in range(repeats + 1):
        for i, backend in enumerate(backends):
            for n in (1, new_tokens):
                wall, cpu = time.perf_counter(), time.thread_time()
                backend.generate(prompts, SamplingParams(max_new_tokens=n), seed=rep)
                if rep:  # the first round warms up
                    best[i, n, 1] = min(best[i, n, 1], time.thread_time() - cpu)
                    best[i, n, 0] = min(best[i, n, 0], time.perf_counter() - wall)
    return [
        tuple((best[i, new_tokens, clock] - best[i, 1, clock]) / (new_tokens - 1) for clock in (0, 1))
        for i in range(len(backends))
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--new-tokens", type=int, default=96)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    llama, tokenizer = toy_model_and_tokenizer()
    prompts = [p for p in PROMPTS for _ in range(SAMPLES_PER_PROMPT)]
    cases = [
        ("qwen2 (GQA 4/2)", qwen2_like(llama), ("forward", "static", "fixed")),
        ("llama (MHA 4/4)", llama, ("forward", "llama", "static", "fixed")),
    ]
    rows = []
    for name, model, decoders in cases:
        backends = [TransformersBackend(model, tokenizer, eos_token_ids=[], decoder=d) for d in decoders]
        for decoder, (wall, cpu) in zip(decoders, step_seconds(backends, prompts, args.new_tokens, args.repeats)):
            rows.append(
                {
                    "model": name,
                    "decoder": decoder,
                    "ms_per_step": round(wall * 1e3, 3),
                    "cpu_ms_per_step": round(cpu * 1e3, 3),
                }
            )
            print(f"{name:16} {decoder:8} {wall * 1e3:7.3f} ms per step, {cpu * 1e3:7.3f} ms CPU, batch {len(prompts)}")
    write_json(
        "decode_step",
        {
            "meta": {
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                "machine": platform.machine(),
                "threads": args.threads,
                "batch": len(prompts),
                "new_tokens": args.new_tokens,
                "repeats": args.repeats,
                "timing": "minimum over repeats",
                "load_average": os.getloadavg()[0],
            },
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
