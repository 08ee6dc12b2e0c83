"""Rollout and training throughput (tokens/s) of the transformers path for a ~0.5B-parameter model.

The model is Qwen2.5-0.5B's architecture with random weights and a word-level tokenizer over its
vocabulary (benchmarks/_qwen_shape.py). Two measurements, each the median over repeats after a warm-up:

- rollout: `TransformersBackend.generate` on prompts × G responses of exactly `--new-tokens` tokens
  (end-of-sequence disabled), in generated tokens per second;
- training: one optimiser step of the GRPO loss (forward, backward, AdamW) on the same shape, with
  micro-batches of `--micro-batch`, in trained tokens (prompt + response) per second.

On a GPU: bf16 weights, and the decode step captured as CUDA graphs (`rollout.capture`) unless `--no-capture`, to
compare the two. `--size tiny` runs a 2-layer model instead, to check the script on a CPU.
Prints a table and writes results/benchmarks/gpu_throughput.json with the hardware named.

    python benchmarks/gpu_throughput.py [--size 0.5b|tiny] [--prompts 8] [--group 8] [--new-tokens 256] [--no-capture]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from benchmarks._qwen_shape import SIZES, build  # noqa: E402
from benchmarks._report import write_json  # noqa: E402
from trainer.objective import PRESETS, Normaliser, ObjectiveSettings  # noqa: E402
from trainer.objective.kl import token_logprobs  # noqa: E402
from trainer.objective.loss import policy_loss  # noqa: E402
from trainer.rollout.base import SamplingParams  # noqa: E402
from trainer.rollout.hf import TransformersBackend, pick_decoder  # noqa: E402


def median_time(fn, repeats: int) -> float:
    fn()  # warm-up (kernels, allocator)
    times = []
    for _ in range(repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", choices=list(SIZES), default="0.5b")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-capture", action="store_true", help="decode uncaptured on a GPU (rollout.capture: false)")
    args = ap.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model, tokenizer = build(args.size, device, dtype)
    params = sum(p.numel() for p in model.parameters())
    # every response runs the full budget
    backend = TransformersBackend(model, tokenizer, eos_token_ids=set(), capture=not args.no_capture)
    n = args.prompts * args.group
    prompts = [
        "".join(str((17 * i + 31 * j) % 10) for j in range(args.prompt_tokens))  # a digit is a token
        for i in range(args.prompts)
        for _ in range(args.group)
    ]
    sampling = SamplingParams(args.new_tokens, 1.0, 1.0)
    batch = backend.generate(prompts, sampling, seed=0)
    gen_s = median_time(lambda: backend.generate(prompts, sampling, seed=0), args.repeats)
    decoder = pick_decoder(backend.decoder, backend.capture, device.type, model)
    gen_tokens = int(batch.lengths.sum())

    obj = ObjectiveSettings(**{**PRESETS["grpo"], "max_len": args.new_tokens})
    ids = torch.cat([batch.prompt_ids, batch.response_ids], 1).to(device)
    attn = torch.cat([batch.prompt_mask, batch.response_mask], 1).to(device)
    mask = batch.response_mask.to(device).float()
    P = batch.prompt_ids.shape[1]
    adv = torch.randn(n, device=device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    norm = Normaliser.from_mask(mask, obj.max_len)  # the whole batch's counts, as in the trainer

    def train_step() -> None:
        model.train()
        for rows in torch.arange(n, device=device).split(args.micro_batch):
            logits = model(input_ids=ids[rows], attention_mask=attn[rows]).logits[:, P - 1 : -1].float()
            logp = token_logprobs(logits, ids[rows, P:])
            out = policy_loss(logp, logp.detach(), adv[rows], mask[rows], obj, norm=norm)
            out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    train_s = median_time(train_step, args.repeats)
    train_tokens = int(attn.sum())
    hardware = torch.cuda.get_device_name(0) if device.type == "cuda" else f"CPU ({platform.processor() or 'unknown'})"
    rows = [
        ("model", f"Qwen2 {args.size} ({params / 1e6:.1f}M parameters, random weights, {str(dtype)[6:]})"),
        ("hardware", hardware),
        (
            "batch",
            f"{args.prompts} prompts x {args.group} = {n} responses, "
            f"{args.prompt_tokens} prompt + {args.new_tokens} new tokens",
        ),
        ("rollout", f"{gen_s:.3f} s, {gen_tokens / gen_s:,.0f} generated tokens/s (decoder {decoder})"),
        (
            "training step",
            f"{train_s:.3f} s, {train_tokens / train_s:,.0f} trained tokens/s (micro-batch {args.micro_batch})",
        ),
    ]
    if device.type == "cuda":
        rows.append(("peak GPU memory", f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB"))
    for k, v in rows:
        print(f"{k:15s} {v}")
    write_json(
        f"gpu_throughput_{args.size}" + ("_uncaptured" if args.no_capture else ""),
        {
            "size": args.size,
            "parameters": params,
            "dtype": str(dtype),
            "device": device.type,
            "hardware": hardware,
            "torch": torch.__version__,
            "prompts": args.prompts,
            "group": args.group,
            "prompt_tokens": args.prompt_tokens,
            "new_tokens": args.new_tokens,
            "micro_batch": args.micro_batch,
            "repeats": args.repeats,
            "decoder": decoder,
            "rollout_s": gen_s,
            "rollout_tokens_per_s": gen_tokens / gen_s,
            "train_step_s": train_s,
            "train_tokens_per_s": train_tokens / train_s,
            "peak_gpu_gib": torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None,
        },
    )


if __name__ == "__main__":
    main()
