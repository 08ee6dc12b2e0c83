"""Speed of one rollout batch on CPU: TransformersBackend against plain `model.generate`.

The shape of the toy default: a randomly initialised Llama (vocab 28, hidden 64, 3 layers,
4 heads, MLP 192, tied embeddings), 8 prompts x 8 samples = 64 responses, up to 96 new
tokens, one thread. Two workloads:

- `full`: end-of-sequence disabled, so every response runs all 96 tokens (the worst case);
- `natural`: the random model ends a response with probability ~1/28 per token, so lengths
  are spread out as in early RL, and a batch lasts as long as its longest response (the
  same samples with and without dropping finished rows from the batch).

Times are the minimum over repeats (this is a shared machine), as wall seconds and as
CPU seconds of the calling thread. Prints a table and writes results/benchmarks/rollout_speed.json.

    python benchmarks/rollout_speed.py [--repeats 7] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402

from trainer.rollout import hf  # noqa: E402
from trainer.rollout.base import SamplingParams  # noqa: E402
from trainer.rollout.hf import TransformersBackend  # noqa: E402

CHARS = "0123456789+-=?:# abcdefg"  # 24 characters, like the toy task's alphabet
PROMPTS = ["12+34=?", "507+88=?", "6+9=?", "4321+1234=?", "70+7=?", "99+1=?", "315+602=?", "8+80=?"]
SAMPLES_PER_PROMPT = 8
MAX_NEW_TOKENS = 96


def toy_model_and_tokenizer(seed: int = 0) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    """The benchmark shape, random weights (no hub, no files)."""
    vocab = {tok: i for i, tok in enumerate(["<pad>", "<s>", "</s>", "<unk>", *CHARS])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        padding_side="left",
    )
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=64,
        intermediate_size=192,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    return LlamaForCausalLM(config).eval(), tokenizer


def timed(fn, repeats: int) -> tuple[float, float, float]:
    """Minimum wall and thread-CPU seconds over `repeats` calls (after one warm-up), and mean new tokens."""
    fn(0)
    walls, cpus, tokens = [], [], []
    for rep in range(repeats):
        wall, cpu = time.perf_counter(), time.thread_time()
        tokens.append(fn(rep + 1))
        cpus.append(time.thread_time() - cpu)
        walls.append(time.perf_counter() - wall)
    return min(walls), min(cpus), sum(tokens) / len(tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    model, tokenizer = toy_model_and_tokenizer()
    prompts = [p for p in PROMPTS for _ in range(SAMPLES_PER_PROMPT)]
    params = SamplingParams(max_new_tokens=MAX_NEW_TOKENS)
    encoded = tokenizer(prompts, return_tensors="pt", padding=True)

    def ours(eos: list[int] | None, compact: float = hf.COMPACT_FRACTION):
        backend = TransformersBackend(model, tokenizer, eos_token_ids=eos)

        def run(seed: int) -> int:
            default, hf.COMPACT_FRACTION = hf.COMPACT_FRACTION, compact
            try:
                return int(backend.generate(prompts, params, seed=seed).lengths.sum())
            finally:
                hf.COMPACT_FRACTION = default

        return run

    def hf_generate(full: bool):
        def run(seed: int) -> int:
            torch.manual_seed(seed)
            with torch.inference_mode():
                out = model.generate(
                    **encoded,
                    do_sample=True,
                    temperature=1.0,
                    top_p=1.0,
                    top_k=0,
                    max_new_tokens=MAX_NEW_TOKENS,
                    min_new_tokens=MAX_NEW_TOKENS if full else 0,
                    eos_token_id=tokenizer.eos_token_id,
                    pad_token_id=tokenizer.pad_token_id,
                )
            new = out[:, encoded["input_ids"].shape[1] :]
            ended = (new == tokenizer.eos_token_id).int()
            # tokens up to and including the first EOS (everything when none)
            return int(torch.where(ended.any(1), ended.argmax(1) + 1, new.shape[1]).sum())

        return run

    cases = [
        ("full", "TransformersBackend", ours([])),
        ("full", "model.generate", hf_generate(True)),
        ("natural", "TransformersBackend", ours(None)),
        ("natural", "  without compaction", ours(None, 2.0)),
        ("natural", "model.generate", hf_generate(False)),
    ]
    rows = []
    for workload, name, fn in cases:
        wall, cpu, tokens = timed(fn, args.repeats)
        rows.append(
            {
                "workload": workload,
                "backend": name.strip(),
                "batch": len(prompts),
                "max_new_tokens": MAX_NEW_TOKENS,
                "threads": args.threads,
                "seconds_per_batch": round(wall, 4),
                "cpu_seconds_per_batch": round(cpu, 4),
                "mean_new_tokens": round(tokens, 1),
                "tokens_per_s": round(tokens / wall, 1),
            }
        )

    print(
        f"{'workload':8} {'backend':20} {'batch':>5} {'new tok':>7} {'threads':>7} {'s/batch':>8} {'cpu s':>7} "
        f"{'tokens':>7} {'tokens/s':>9}"
    )
    for r in rows:
        print(
            f"{r['workload']:8} {r['backend']:20} {r['batch']:5d} {r['max_new_tokens']:7d} {r['threads']:7d} "
            f"{r['seconds_per_batch']:8.4f} {r['cpu_seconds_per_batch']:7.4f} {r['mean_new_tokens']:7.0f} "
            f"{r['tokens_per_s']:9.0f}"
        )
    out = REPO / "results" / "benchmarks" / "rollout_speed.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "repeats": args.repeats,
        "timing": "minimum over repeats",
        "load_average": os.getloadavg()[0],
    }
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"wrote {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
