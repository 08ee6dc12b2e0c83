"""What a toy base model built for a text task of the user's needs (`model.toy.text`): the task's pairs, the
vocabulary, the slipping tutor's demonstrations and the sampled quality. The build itself is `trainer.models.toy`'s.

The demonstrations are the task's own (prompt, answer) pairs: each SFT trace is a group's prompt, then its
answer and end-of-sequence, the loss on the answer only. A share `slip_prob` of them are wrong in one character, a
digit or letter changed to another of its kind: the addition toy's slipped column, for any task.
"""

from __future__ import annotations

import json
import math
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerBase

from trainer.tasks.base import Group, Task

PRINTABLE = "\n" + "".join(chr(c) for c in range(32, 127))
"""Every text build reads these (newline, space and printable ASCII), whichever characters its task's pool uses:
a vocabulary that does not depend on which problems were drawn, for 96 rows of embedding (6,144 weights at width
64, 4 % of the toy)."""
KINDS = (string.digits, string.ascii_lowercase, string.ascii_uppercase)
"""A slip changes a character to another of its kind; other characters (signs, spaces, punctuation) never slip."""
HASH_TRACES = 64
"""SFT traces drawn into a text build's key: a change to the task's prompts or answers is a new key."""


@dataclass(frozen=True)
class TaskSource:
    """The task a text build learns: its demonstrations and its grader."""

    task: Task
    """Its groups' first prompt and `answer` are the SFT demonstrations; its `grade` scores the sampled quality."""
    texts: tuple[str, ...]
    """Every prompt and answer the task can draw (its pool): their characters beyond `PRINTABLE` join the
    vocabulary, so the model reads every prompt of the task."""
    settings: str
    """The task's settings as JSON: part of the build's key."""


def text_chars(texts: Iterable[str]) -> str:
    """The vocabulary of a text build: `PRINTABLE`, then every other character of `texts` in code-point order."""
    return PRINTABLE + "".join(sorted(set("".join(texts)) - set(PRINTABLE)))


def unreadable(prompt: str, chars: str) -> str | None:
    """The first character of `prompt` that is not among `chars`, or None."""
    known = set(chars)
    return next((c for c in prompt if c not in known), None)


def slip(answer: str, rng: np.random.Generator) -> str:
    """`answer` with one digit or letter (uniform over them) changed to another of its kind (uniform), or as it is
    when it has none."""
    spots = [(i, kind) for i, c in enumerate(answer) for kind in KINDS if c in kind]
    if not spots:
        return answer
    i, kind = spots[int(rng.integers(len(spots)))]
    others = kind.replace(answer[i], "")
    return answer[:i] + others[int(rng.integers(len(others)))] + answer[i + 1 :]


def demonstration(group: Group, slip_prob: float, rng: np.random.Generator) -> tuple[str, str, bool]:
    """(prompt, answer as the tutor writes it, whether the tutor slipped) for a group's first sample."""
    answer = group.answer
    if slip_prob and rng.random() < slip_prob:
        slipped = slip(answer, rng)
        return group.prompts[0], slipped, slipped != answer
    return group.prompts[0], answer, False


def key_payload(source: TaskSource, slip_prob: float, seed: int) -> dict:
    """What a text build's key adds to its settings: the vocabulary, the task's settings and its first traces."""
    rng = np.random.default_rng(seed)
    traces = ["".join(demonstration(g, slip_prob, rng)[:2]) for g in source.task.sample_groups(rng, HASH_TRACES, 1)]
    return {"chars": text_chars(source.texts), "task": json.loads(source.settings), "traces": traces}


class TextBatches:
    """SFT batches of a task's demonstrations, counting the slipped ones."""

    def __init__(self, source: TaskSource, tokenizer: PreTrainedTokenizerBase, slip_prob: float, batch_size: int):
        self.source, self.tokenizer, self.slip_prob, self.batch_size = source, tokenizer, slip_prob, batch_size
        self.traces = self.slipped = 0

    def __call__(self, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Right-padded (input_ids, attention_mask, labels); labels are -100 except on the answer and EOS."""
        tok = self.tokenizer
        rows = []
        for group in self.source.task.sample_groups(rng, self.batch_size, 1):
            prompt, answer, slipped = demonstration(group, self.slip_prob, rng)
            self.traces, self.slipped = self.traces + 1, self.slipped + slipped
            head = [tok.bos_token_id, *tok.convert_tokens_to_ids(list(prompt))]
            tail = [*tok.convert_tokens_to_ids(list(answer)), tok.eos_token_id]
            rows.append((head + tail, [-100] * len(head) + tail))
        return pad_rows(rows, tok.pad_token_id)


def pad_rows(rows: list[tuple[list[int], list[int]]], pad_id: int) -> tuple[torch.Tensor, ...]:
    """SFT rows of (token ids, labels) right-padded into [N, width] ids, attention mask and labels (-100: no loss)."""
    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (row_ids, row_labels) in enumerate(rows):
        ids[i, : len(row_ids)] = torch.tensor(row_ids)
        labels[i, : len(row_labels)] = torch.tensor(row_labels)
        mask[i, : len(row_ids)] = 1
    return ids, mask, labels


@dataclass(frozen=True)
class TextEval:
    """Sampled quality of a text build (temperature 1, no top-k/top-p): every prompt is clean."""

    accuracy_clean: float
    """Share of sampled answers the task grades correct (a response without EOS in the budget counts wrong)."""
    reward_mean: float
    """Mean reward of the sampled answers (0 for a truncated one)."""
    length_mean: float
    """Mean response length in tokens, EOS included."""
    truncated_frac: float
    """Share of responses with no EOS within max_new_tokens."""
    n: int
    """Responses sampled (one per prompt)."""


@torch.no_grad()
def sample_one_each(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerBase,
    task: Task,
    n: int,
    seed: int,
    max_new_tokens: int,
    batch_size: int,
) -> list[tuple[Group, str, int, bool]]:
    """One sampled response (temperature 1, no top-k or top-p) to each of `n` prompts the task draws with `seed`:
    (group, text without special tokens, length in tokens with EOS, whether it ended within `max_new_tokens`)."""
    groups = task.sample_groups(np.random.default_rng(seed), n, 1)
    torch.manual_seed(seed)
    out_rows: list[tuple[Group, str, int, bool]] = []
    for first in range(0, n, batch_size):
        chunk: Sequence[Group] = groups[first : first + batch_size]
        encoded = tokenizer([g.prompts[0] for g in chunk], return_tensors="pt", padding=True).to(model.device)
        out = model.generate(
            **encoded,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        for group, row in zip(chunk, out[:, encoded["input_ids"].shape[1] :].tolist(), strict=True):
            ended = tokenizer.eos_token_id in row
            row = row[: row.index(tokenizer.eos_token_id) + 1] if ended else row
            out_rows.append((group, tokenizer.decode(row, skip_special_tokens=True), len(row), ended))
    return out_rows


def sampled_text_accuracy(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerBase,
    task: Task,
    n: int,
    seed: int,
    max_new_tokens: int = 64,
    batch_size: int = 256,
) -> TextEval:
    """Sample one response to each of `n` prompts the task draws with `seed`, and grade them with the task."""
    rewards, correct, lengths, truncated = [], [], [], []
    for group, text, length, ended in sample_one_each(model, tokenizer, task, n, seed, max_new_tokens, batch_size):
        grade = task.grade(group, 0, text) if ended else None
        rewards.append(grade.reward if grade is not None else 0.0)
        correct.append(grade is not None and grade.correct)
        lengths.append(length)
        truncated.append(not ended)
    mean = lambda xs: float(np.mean(xs)) if xs else math.nan  # noqa: E731
    return TextEval(
        accuracy_clean=mean(correct),
        reward_mean=mean(rewards),
        length_mean=mean(lengths),
        truncated_frac=mean(truncated),
        n=n,
    )
