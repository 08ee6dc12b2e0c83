"""The toy default model: a tiny Llama trained from scratch by SFT on the toy task.

The default settings' build ships with the package (`trainer/models/shipped/`, pinned by sha256 in its
manifest), so every machine trains RL on the same base model: a build is bitwise-identical only on one CPU code
path and thread count. Any other settings are built on CPU, reproducibly from a seed, into
`cache_root/toy-<hash of the config>` as an ordinary transformers checkpoint (safetensors + tokenizer), so runs load
it like a hub model. `ensure_toy_model` returns the shipped build or builds one the first time a run needs it and
reuses it afterwards; concurrent callers wait on a file lock. With `text` set, the settings build a base model
for the run's own task, whose `TaskSource` every function here then takes (trainer/models/text_build.py).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from filelock import FileLock
from tqdm.auto import tqdm
from transformers import (
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerBase,
)

from trainer.models.char_tokenizer import build_char_tokenizer
from trainer.models.fingerprint import Machine, file_sha256
from trainer.models.text_build import (
    TaskSource,
    TextBatches,
    TextEval,
    key_payload,
    pad_rows,
    sample_one_each,
    sampled_text_accuracy,
    text_chars,
)
from trainer.models.toy_config import ToyModelConfig
from trainer.tasks.toy_addition import CHARS, ToyAdditionTask, target_trace

BUILD_VERSION = 2
"""Part of the cache key: bump it when the trace format or the build code changes what a config produces."""
COMPLETE_MARKER = "build.json"
"""Written last into a build; a directory without it is not a complete build."""
SHIPPED_DIR = Path(__file__).resolve().parent / "shipped"
"""Builds that ship with the package, one folder `toy-<hash>` each, listed in `SHIPPED_MANIFEST` there."""
SHIPPED_MANIFEST = "manifest.json"
"""`{"toy-<hash>": {"files": {name: sha256}, "built_on": {...}}}`: the shipped builds and their files' sha256."""


def config_hash(config: ToyModelConfig, source: TaskSource | None = None) -> str:
    """Short stable hash of the config, BUILD_VERSION, the vocabulary and a sample of SFT traces: the
    cache key. The traces make any change to the task's format a new key, bumped or not. A text build's key
    holds its task's settings, vocabulary and traces instead (`text_build.key_payload`)."""
    if config.text is not None:
        payload = {"version": BUILD_VERSION, "config": config.model_dump(mode="json")}
        payload |= key_payload(_source(source), config.text.slip_prob, _seed(config))
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]
    task = ToyAdditionTask(config.task)
    rng = np.random.default_rng(config.seed)
    traces = [
        p + target_trace(config.task, g, i, rng)
        for g in task.sample_groups(rng, 32, 2)
        for i, p in enumerate(g.prompts)
    ]
    payload = json.dumps(
        {"version": BUILD_VERSION, "config": config.model_dump(mode="json"), "chars": CHARS, "traces": traces},
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _source(source: TaskSource | None) -> TaskSource:
    if source is None:
        raise ValueError("model.toy.text builds on the run's task: its TaskSource is needed")
    return source


def _seed(config: ToyModelConfig) -> int:
    if not isinstance(config.seed, int):
        raise ValueError("model.toy.seed: 'run' must be replaced by the run's seed (ToyModelConfig.for_run)")
    return config.seed


def toy_model_dir(config: ToyModelConfig, cache_root: str | os.PathLike, source: TaskSource | None = None) -> Path:
    """Where the build of `config` lives (complete or not)."""
    return Path(cache_root).expanduser() / f"toy-{config_hash(config, source)}"


class ShippedModelCorrupt(RuntimeError):
    """A shipped build's file does not match the sha256 its manifest pins (a damaged install)."""


def shipped_toy_model(
    config: ToyModelConfig, root: Path = SHIPPED_DIR, source: TaskSource | None = None
) -> Path | None:
    """The shipped build of `config` with every file's sha256 checked against the manifest, or None when
    `config`'s hash is not one that ships. Raises ShippedModelCorrupt on a mismatch."""
    manifest = root / SHIPPED_MANIFEST
    if not manifest.exists():
        return None
    name = f"toy-{config_hash(config, source)}"
    entry = json.loads(manifest.read_text()).get(name)
    if entry is None:
        return None
    folder = root / name
    for file, expected in entry["files"].items():
        actual = file_sha256(folder / file) if (folder / file).exists() else "missing"
        if actual != expected:
            raise ShippedModelCorrupt(
                f"{folder / file}: sha256 {actual[:16]} is not the {expected[:16]} that {manifest} pins; "
                "reinstall harness (the shipped base model is damaged)"
            )
    return folder


def ship_toy_model(build: Path, root: Path = SHIPPED_DIR) -> Path:
    """Copy a complete build into the shipped folder and pin its files' sha256 in the manifest (a maintainer's
    step: `python -m trainer.models.toy --ship`)."""
    report = json.loads((build / COMPLETE_MARKER).read_text())
    target = root / build.name
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(build, target)
    manifest_path = root / SHIPPED_MANIFEST
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    manifest[build.name] = {
        "files": {f.name: file_sha256(f) for f in sorted(target.iterdir()) if f.is_file()},
        # a build from before builds recorded their machine is shipped from the machine that built it
        "built_on": report.get("built_on") or {**asdict(Machine.here()), "threads": report["config"]["build_threads"]},
        "eval": report.get("eval", {}),
    }
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return target


def toy_model_ready(config: ToyModelConfig, cache_root: str | os.PathLike, source: TaskSource | None = None) -> bool:
    """Whether `config` needs no build: it ships, or a complete build is in the cache."""
    if shipped_toy_model(config, source=source) is not None:
        return True
    return (toy_model_dir(config, cache_root, source) / COMPLETE_MARKER).exists()


def ensure_toy_model(config: ToyModelConfig, cache_root: str | os.PathLike, source: TaskSource | None = None) -> Path:
    """Path of the shipped build of `config` (sha256 checked), else of a complete build in `cache_root`, building
    it first if there is none.

    Safe under concurrency: the first caller builds under a file lock while the
    others wait, then find the finished directory.
    """
    shipped = shipped_toy_model(config, source=source)
    if shipped is not None:
        return shipped
    final = toy_model_dir(config, cache_root, source)
    if (final / COMPLETE_MARKER).exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final) + ".lock"):
        if (final / COMPLETE_MARKER).exists():
            return final
        return build_toy_model(config, cache_root, source)


def build_toy_model(config: ToyModelConfig, cache_root: str | os.PathLike, source: TaskSource | None = None) -> Path:
    """Train the toy model by SFT from scratch and save it to `toy_model_dir(config, cache_root)`.

    Written to a temporary directory and renamed into place, so a crash never
    leaves a directory that looks complete. Callers that may race use `ensure_toy_model`.
    """
    final = toy_model_dir(config, cache_root, source)
    final.parent.mkdir(parents=True, exist_ok=True)
    text = None if config.text is None else _source(source)
    tokenizer = build_char_tokenizer(CHARS if text is None else text_chars(text.texts))
    start = time.perf_counter()
    caller_threads = torch.get_num_threads()
    torch.set_num_threads(config.build_threads)
    try:
        model, final_loss, batches = _train(config, tokenizer, text)
    finally:
        torch.set_num_threads(caller_threads)
    train_s = time.perf_counter() - start
    report = {
        "version": BUILD_VERSION,
        "hash": final.name.removeprefix("toy-"),
        "config": config.model_dump(mode="json"),
        "parameters": sum(p.numel() for p in model.parameters()),
        "train_s": round(train_s, 2),
        "final_loss": final_loss,
        "built_on": {**asdict(Machine.here()), "threads": config.build_threads},
    }
    if isinstance(batches, TextBatches):  # the tutor's slips as drawn, beside the rate asked for
        report["sft_slipped"] = {"traces": batches.traces, "slipped": batches.slipped}
    if config.eval_samples:
        evaluation = (
            sampled_accuracy(model, tokenizer, ToyAdditionTask(config.task), config.eval_samples, seed=config.seed)
            if text is None
            else sampled_text_accuracy(model, tokenizer, text.task, config.eval_samples, seed=_seed(config))
        )
        report["eval"] = {
            k: None if isinstance(v, float) and math.isnan(v) else v  # strict JSON
            for k, v in asdict(evaluation).items()
        }
        check_quality(config, evaluation, report["hash"])
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache may be shared
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / COMPLETE_MARKER).write_text(json.dumps(report, indent=2))
        if final.exists():  # a crashed build's leftover, or a deliberate rebuild: replace it
            shutil.rmtree(final)
        os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


class ToyBuildTooWeak(RuntimeError):
    """The build's sampled quality is outside the config's band (nothing was cached)."""


def check_quality(config: ToyModelConfig, evaluation: ToyEval | TextEval, hash_: str) -> None:
    """Raise ToyBuildTooWeak, with the figures, when clean accuracy is outside the band `min_clean_accuracy` to
    `max_clean_accuracy`. A clean accuracy of nan (no clean prompt drawn) cannot show it is in the band, so it fails.
    """
    accuracy, low, high = evaluation.accuracy_clean, config.min_clean_accuracy, config.max_clean_accuracy
    if accuracy >= low and (high is None or accuracy <= high):
        return
    if not accuracy >= low:
        where = f"below model.toy.min_clean_accuracy = {low}"
        fix = "train longer with model.toy.sft_steps, or lower the bar knowingly"
    else:
        where = f"above model.toy.max_clean_accuracy = {high}"
        slips = "model.toy.task.slip_prob" if config.text is None else "model.toy.text.slip_prob"
        fix = f"the build leaves RL little to learn: check {slips}, or raise the ceiling knowingly"
    raise ToyBuildTooWeak(
        f"toy build {hash_}: sampled accuracy on clean prompts is {accuracy:.3f} "
        f"(the clean ones among n={evaluation.n} sampled prompts), {where}; nothing was cached ({fix})"
    )


def _new_model(config: ToyModelConfig, tokenizer: PreTrainedTokenizerBase) -> LlamaForCausalLM:
    llama = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_heads,
        max_position_embeddings=config.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": config.rope_theta},
        tie_word_embeddings=config.tie_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(llama)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    return model


def _sft_batch(
    task: ToyAdditionTask, tokenizer: PreTrainedTokenizerBase, rng: np.random.Generator, batch_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded (input_ids, attention_mask, labels); labels are -100 except on response tokens and EOS."""
    rows = []
    for group in task.sample_groups(rng, batch_size, 1):
        prompt = [tokenizer.bos_token_id, *tokenizer.convert_tokens_to_ids(list(group.prompts[0]))]
        response = [
            *tokenizer.convert_tokens_to_ids(list(target_trace(task.config, group, 0, rng))),
            tokenizer.eos_token_id,
        ]
        rows.append((prompt + response, [-100] * len(prompt) + response))
    return pad_rows(rows, tokenizer.pad_token_id)


def _train(
    config: ToyModelConfig, tokenizer: PreTrainedTokenizerBase, text: TaskSource | None = None
) -> tuple[LlamaForCausalLM, float, Callable[[np.random.Generator], tuple[torch.Tensor, ...]]]:
    """SFT from scratch: (model, last loss, the batches it trained on)."""
    torch.manual_seed(config.seed)
    model = _new_model(config, tokenizer)
    if text is None:
        task = ToyAdditionTask(config.task)
        batches = lambda rng: _sft_batch(task, tokenizer, rng, config.batch_size)  # noqa: E731
    else:
        batches = TextBatches(text, tokenizer, config.text.slip_prob, config.batch_size)
    rng = np.random.default_rng(config.seed)
    optimiser = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)

    def lr_factor(step: int) -> float:  # linear warm-up, then cosine to zero
        if step < config.warmup_steps:
            return (step + 1) / config.warmup_steps
        progress = (step - config.warmup_steps) / max(1, config.sft_steps - config.warmup_steps)
        return 0.5 * (1 + math.cos(math.pi * progress))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, lr_factor)
    model.train()
    loss_value = float("nan")
    name = config_hash(config, text)
    bar = tqdm(range(config.sft_steps), desc=f"building toy model {name}", unit="step", mininterval=1.0)
    for _ in bar:
        ids, mask, labels = batches(rng)
        optimiser.zero_grad(set_to_none=True)
        loss = _backward_in_buckets(model, ids, mask, labels, config.length_buckets)
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimiser.step()
        schedule.step()
        loss_value = loss.item()
        bar.set_postfix(loss=f"{loss_value:.3f}", refresh=False)
    model.eval()
    return model, loss_value, batches


def _backward_in_buckets(
    model: LlamaForCausalLM, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor, buckets: int
) -> torch.Tensor:
    """Backward of the batch's mean loss over response tokens, in `buckets` forward/backward passes over its rows
    sorted by length, each cut to its longest row (right padding only costs compute). Returns the mean loss."""
    order = torch.sort(mask.sum(-1), descending=True, stable=True).indices
    tokens = int((labels[:, 1:] != -100).sum())  # the positions the shifted loss scores
    total = torch.zeros(())
    for rows in order.tensor_split(min(buckets, len(order))):
        width = int(mask[rows].sum(-1).max())
        out = model(
            input_ids=ids[rows, :width],
            attention_mask=mask[rows, :width],
            labels=labels[rows, :width],
            num_items_in_batch=tokens,  # the loss is this bucket's token sum / the batch's tokens
        )
        out.loss.backward()
        total += out.loss.detach()
    return total


@dataclass(frozen=True)
class ToyEval:
    """Sampled quality of a toy model (temperature 1, no top-k/top-p)."""

    accuracy_clean: float
    """Accuracy on prompts with no hidden digit (nan when none was drawn)."""
    accuracy_hidden: float
    """Accuracy on prompts with a hidden digit (~0.1 expected: the guess is right one time in ten)."""
    accuracy: float
    """Accuracy over all prompts; a response without EOS in the budget counts wrong."""
    length_mean: float
    """Mean response length in tokens, EOS included."""
    truncated_frac: float
    """Share of responses with no EOS within max_new_tokens."""
    filler_blocks: dict[str, int]
    """Count of responses by filler tokens / block length ("0", "1", ...; "partial" when not a whole number)."""
    n: int
    """Responses sampled (one per prompt)."""


@torch.no_grad()
def sampled_accuracy(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerBase,
    task: ToyAdditionTask,
    n: int,
    seed: int,
    max_new_tokens: int = 128,
    batch_size: int = 256,
) -> ToyEval:
    """Sample one response to each of `n` fresh prompts drawn with `seed`, and grade them."""
    groups, grades, lengths, truncated = [], [], [], []
    for group, text, length, ended in sample_one_each(model, tokenizer, task, n, seed, max_new_tokens, batch_size):
        groups.append(group)
        grades.append(task.grade(group, 0, text) if ended else None)
        lengths.append(length)
        truncated.append(not ended)
    hidden = [bool(g.meta[0]["hidden_digit"]) for g in groups]
    correct = [g is not None and g.correct for g in grades]

    def accuracy(keep: list[bool]) -> float:
        picked = [c for c, k in zip(correct, keep) if k]
        return float(np.mean(picked)) if picked else float("nan")

    block = task.config.filler_block_len
    histogram: dict[str, int] = {}
    for g in grades:
        if g is not None:
            key = str(g.info["filler_tokens"] // block) if g.info["filler_tokens"] % block == 0 else "partial"
            histogram[key] = histogram.get(key, 0) + 1
    return ToyEval(
        accuracy_clean=accuracy([not h for h in hidden]),
        accuracy_hidden=accuracy(hidden),
        accuracy=accuracy([True] * n),
        length_mean=float(np.mean(lengths)),
        truncated_frac=float(np.mean(truncated)),
        filler_blocks=dict(sorted(histogram.items())),
        n=n,
    )


if __name__ == "__main__":  # python -m trainer.models.toy [BUILD] [--ship]: build the default settings, ship a build
    import argparse

    parser = argparse.ArgumentParser(description="Ship a build of the default toy settings with the package.")
    parser.add_argument("build", nargs="?", help="a complete build to ship (default: build one now)")
    parser.add_argument("--ship", action="store_true", help="copy the build into trainer/models/shipped/")
    parser.add_argument("--into", help="the cache folder to build in (default: a new temporary one)")
    args = parser.parse_args()
    into = args.into or tempfile.mkdtemp(prefix="toy-")
    built = Path(args.build) if args.build else build_toy_model(ToyModelConfig(), into)
    if built.name != f"toy-{config_hash(ToyModelConfig())}":
        parser.error(f"{built} is not a build of the default settings (toy-{config_hash(ToyModelConfig())})")
    print(built, file_sha256(built / "model.safetensors"))
    if args.ship:
        print(ship_toy_model(built))
