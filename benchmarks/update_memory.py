"""Peak memory of one update step: the whole logits against chunked log-probabilities, at Qwen's vocabulary, on CPU.

    python benchmarks/update_memory.py [--responses 8] [--tokens 128] [--prompt 32] [--chunks 64 16 256] [--rounds 2]

The model is a tiny Qwen2 with Qwen2.5's vocabulary (151,936 tokens) and tied embeddings on a hidden size of 64
(2 layers, 4 heads, 2 key-value heads: 9.8M parameters, 9.7M of them the embedding), in float32. One step is one
`Trainer.update` under GRPO's objective (forward, backward, AdamW step) over `--responses` responses of `--tokens`
tokens each after `--prompt` prompt tokens, in a single forward/backward (`train.length_buckets=1`, no micro-batches,
no reference model): 8 × 128 = 1,024 response tokens by default. Variants: `train.logits_chunk_mb=null` (the whole
[8, 128, 151,936] float32 logits, 0.62 GB) and each `--chunks` value in MiB (64 is the default setting).

Each variant runs `--rounds` times, each in a fresh process, alternating: a warm-up step (the optimiser's state is
created), then the measured step. Its peak is the high-water resident set size during that step (Linux's VmHWM,
reset through /proc/self/clear_refs just before) minus the resident size just before it: torch's CPU allocations are
invisible to tracemalloc, and the process's other memory (Python, torch, the model, its gradients and the
optimiser's state) is in the baseline. One thread (`--threads`); the step's wall-clock and CPU seconds are shown too
(CPU time moves less with the machine's load). Prints the machine, the load before and after, and a table; writes
results/benchmarks/update_memory.json.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from _report import write_json

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 151_936
"""Qwen2.5's vocabulary (the embedding of every size, 0.5B to 72B)."""
MIB = 2**20


def _status_kib(field: str) -> int:
    """A `kB` field of /proc/self/status (VmRSS, VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def child(chunk_mb: float | None, responses: int, tokens: int, prompt: int, threads: int) -> dict:
    """One variant, in this process: a warm-up update, then the measured one (see the module's docstring)."""
    sys.path.insert(0, str(ROOT))
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from trainer.config import RolloutConfig, TrainConfig
    from trainer.loop import Trainer, TrainerSettings
    from trainer.objective import ObjectiveSettings

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        pad_token_id=0,
    )
    model = Qwen2ForCausalLM(config).float()
    settings = TrainerSettings(
        ObjectiveSettings.preset("grpo"),
        RolloutConfig(prompts_per_step=1, group_size=responses, max_new_tokens=tokens),
        TrainConfig(steps=2, reference_kl=False, length_buckets=1, logits_chunk_mb=chunk_mb),
        seed=0,
    )
    trainer = Trainer(model, None, None, 0, settings)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, VOCAB, (responses, prompt + tokens), generator=g)
    attn = torch.ones_like(ids)
    t = {
        "ids": ids,
        "attn": attn,
        "resp_mask": attn[:, prompt:].clone(),
        "rollout_logp": torch.zeros(responses, tokens),
        "prompt_len": torch.tensor(prompt),
    }
    advantages = torch.randn(responses, generator=g)
    trainer.update(1, t, advantages, t["resp_mask"])  # warm-up: AdamW's state, the probe, lazy buffers
    gc.collect()
    baseline = _status_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    start, cpu = time.perf_counter(), time.process_time()
    metrics = trainer.update(2, t, advantages, t["resp_mask"])
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    peak = _status_kib("VmHWM")
    chunked = any(head is not None for head in trainer.scorer.heads.values())
    return {
        "chunk_mb": chunk_mb,
        "chunked": chunked,
        "baseline_mb": baseline * 1024 / MIB,
        "peak_over_baseline_mb": (peak - baseline) * 1024 / MIB,
        "step_s": seconds,
        "cpu_s": cpu,
        "loss": metrics["policy/loss"],
        "grad_norm": metrics["policy/grad_norm"],
        "entropy": metrics["policy/entropy"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--responses", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=128, help="response tokens per response")
    ap.add_argument("--prompt", type=int, default=32, help="prompt tokens per response")
    ap.add_argument("--chunks", type=float, nargs="+", default=[64.0], help="chunk sizes in MiB to measure")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--child", help=argparse.SUPPRESS)  # a chunk size ("none": whole logits): run one variant here
    args = ap.parse_args()
    shape = (args.responses, args.tokens, args.prompt, args.threads)
    if args.child is not None:
        print(json.dumps(child(None if args.child == "none" else float(args.child), *shape)))
        return

    sys.path.insert(0, str(ROOT))
    from trainer.models.fingerprint import Machine

    here = Machine.here()
    machine = f"{here.cpu_model}, torch {here.torch_version} {here.cpu_capability}, {os.cpu_count()} cores"
    started, load_before = datetime.datetime.now().astimezone(), os.getloadavg()
    variants = ["none", *(f"{c:g}" for c in args.chunks)]
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    for _ in range(args.rounds):
        for v in variants:
            command = [sys.executable, __file__, "--child", v, "--responses", str(args.responses)]
            command += ["--tokens", str(args.tokens), "--prompt", str(args.prompt), "--threads", str(args.threads)]
            out = subprocess.run(command, capture_output=True, text=True, check=True)
            runs[v].append(json.loads(out.stdout.strip().splitlines()[-1]))
    load_after = os.getloadavg()
    load = f"load {' '.join(f'{x:.2f}' for x in load_before)} -> {' '.join(f'{x:.2f}' for x in load_after)}"
    n = args.responses * args.tokens
    print(f"{started:%Y-%m-%d %H:%M %Z}: {machine}; {load} (1, 5, 15 min); {args.threads} thread(s)")
    print(
        f"{args.responses} responses x {args.tokens} tokens (+{args.prompt} prompt) = {n} response tokens, "
        f"vocabulary {VOCAB:,}; {args.rounds} fresh processes per variant"
    )
    whole = min(r["peak_over_baseline_mb"] for r in runs["none"])
    rows = []
    print(
        "| logits | peak over baseline, MiB | whole / this (least) | step s (wall) | step s (CPU) | loss | grad norm |"
    )
    print("|---|---|---|---|---|---|---|")
    for v in variants:
        peaks = [r["peak_over_baseline_mb"] for r in runs[v]]
        label = "whole" if v == "none" else f"chunks of {v} MiB"
        ratio = whole / max(peaks)
        rows.append({"variant": label, "runs": runs[v], "ratio": ratio})
        first = runs[v][0]
        wall, cpu = (", ".join(f"{r[key]:.2f}" for r in runs[v]) for key in ("step_s", "cpu_s"))
        print(
            f"| {label} | {', '.join(f'{p:,.0f}' for p in peaks)} | {'' if v == 'none' else f'{ratio:.1f}x'} "
            f"| {wall} | {cpu} | {first['loss']:.6f} | {first['grad_norm']:.6f} |"
        )
    print(f"resident size before the step (the baseline): {runs['none'][0]['baseline_mb']:,.0f} MiB")
    write_json(
        "update_memory",
        {
            "started": started.isoformat(),
            "machine": machine,
            "load_before": load_before,
            "load_after": load_after,
            "responses": args.responses,
            "tokens": args.tokens,
            "prompt": args.prompt,
            "vocab": VOCAB,
            "threads": args.threads,
            "variants": rows,
        },
    )


if __name__ == "__main__":
    main()
