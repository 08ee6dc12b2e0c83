"""A toy base model for a text task of the user's (`model.toy.text`): the tutor's slips, the vocabulary, the key,
a real (tiny) build on a task's pairs, and the settings that refuse it. No extra is needed: the task here is a
small exact-match task written for the test."""

from __future__ import annotations

import json

import numpy as np
import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

import trainer.models.toy as toy
from harness.config.errors import ConfigError
from harness.config.run_config import RunConfig
from harness.config.yaml_io import validate
from trainer.models.char_tokenizer import build_char_tokenizer
from trainer.models.text_build import PRINTABLE, TaskSource, demonstration, slip, text_chars
from trainer.models.toy_config import TextBuildConfig, ToyModelConfig
from trainer.rewards.grade import Grade
from trainer.tasks.base import Group

TINY = ToyModelConfig(
    sft_steps=4, batch_size=8, warmup_steps=1, eval_samples=8, min_clean_accuracy=0.0, text={"slip_prob": 0.5}
)


class Reverse:
    """Reverse a word: exact match, over a fixed pool."""

    name = "reverse"

    def __init__(self, words: list[str]):
        self.prompts = [f"reverse: {w}\n" for w in words]
        self.answers = [w[::-1] for w in words]

    def sample_groups(self, rng: np.random.Generator, num_groups: int, group_size: int) -> list[Group]:
        picks = rng.choice(len(self.prompts), size=num_groups)
        return [Group(str(i), self.answers[i], (self.prompts[i],) * group_size) for i in picks]

    def grade(self, group: Group, index: int, completion: str) -> Grade:
        right = completion.strip() == group.answer
        return Grade(reward=float(right), correct=right)

    def step_metrics(self, groups, grades, lengths) -> dict[str, float]:
        return {}


def source(words=("abc", "hello", "déjà", "x1y2")) -> TaskSource:
    task = Reverse(list(words))
    return TaskSource(task, (*task.prompts, *task.answers), json.dumps({"words": list(words)}))


def test_a_slip_changes_one_digit_or_letter_to_another_of_its_kind():
    rng = np.random.default_rng(0)
    for answer in ["-42", "hello", "Ab9", "x y"]:
        for _ in range(50):
            out = slip(answer, rng)
            diff = [(a, b) for a, b in zip(answer, out) if a != b]
            assert len(out) == len(answer) and len(diff) == 1, (answer, out)
            (a, b), kinds = diff[0], ("0123456789", "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
            assert any(a in k and b in k for k in kinds), (a, b)
    assert slip("-- ?", rng) == "-- ?"  # nothing that can slip


def test_the_tutor_slips_at_its_stated_rate():
    rng = np.random.default_rng(1)
    group = Group("1", "12345", ("p",))
    slipped = [demonstration(group, 0.2, rng)[2] for _ in range(4000)]
    assert abs(np.mean(slipped) - 0.2) < 0.02
    assert not any(demonstration(group, 0.0, rng)[2] for _ in range(100))


def test_the_vocabulary_is_printable_ascii_then_the_pool_s_other_characters_and_reads_newline_runs():
    chars = text_chars(["déjà vu", "naïve\n\n"])
    assert chars == PRINTABLE + "àéï" and len(PRINTABLE) == 96
    tokenizer = build_char_tokenizer(chars)
    text = "a\n\nb  déjà\n"
    ids = tokenizer(text)["input_ids"]
    assert len(ids) == len(text) + 1 and tokenizer.unk_token_id not in ids
    assert tokenizer.decode(ids, skip_special_tokens=True) == text


def test_the_addition_toy_keeps_its_build_hash_and_its_dump():
    assert toy.config_hash(ToyModelConfig()) == "815c506b2d1fda13"
    assert "text" not in ToyModelConfig().model_dump()


def test_a_text_build_s_key_holds_its_task_and_slip_rate():
    key = toy.config_hash(TINY, source())
    assert key == toy.config_hash(TINY, source())
    assert key != toy.config_hash(TINY, source(("abc", "hello")))
    assert key != toy.config_hash(TINY.model_copy(update={"text": TextBuildConfig(slip_prob=0.1)}), source())
    with pytest.raises(ValueError, match="TaskSource"):
        toy.config_hash(TINY)


def test_a_text_build_trains_on_the_task_s_pairs_and_loads_as_an_ordinary_checkpoint(tmp_path):
    built = toy.ensure_toy_model(TINY, tmp_path, source())
    assert built.name == f"toy-{toy.config_hash(TINY, source())}"
    report = json.loads((built / toy.COMPLETE_MARKER).read_text())
    assert report["sft_slipped"]["traces"] == 4 * 8 and 0 < report["sft_slipped"]["slipped"] < 32
    assert report["eval"]["n"] == 8 and set(report["eval"]) >= {"accuracy_clean", "reward_mean", "truncated_frac"}
    assert report["built_on"]["threads"] == 1
    tokenizer = AutoTokenizer.from_pretrained(built)
    model = AutoModelForCausalLM.from_pretrained(built)
    assert model.config.vocab_size == len(tokenizer) == len(text_chars(source().texts)) + 4
    assert tokenizer.decode(tokenizer("reverse: déjà\n")["input_ids"], skip_special_tokens=True) == "reverse: déjà\n"
    assert toy.ensure_toy_model(TINY, tmp_path, source()) == built  # cached


def test_a_text_build_outside_the_band_caches_nothing(tmp_path):
    weak = TINY.model_copy(update={"min_clean_accuracy": 0.9})
    with pytest.raises(toy.ToyBuildTooWeak, match="below model.toy.min_clean_accuracy"):
        toy.ensure_toy_model(weak, tmp_path, source())
    assert not toy.toy_model_ready(weak, tmp_path, source())


def _config(task: dict, text: dict | None = None) -> RunConfig:
    model = {"source": "toy", **({"toy": {"text": text}} if text is not None else {})}
    return validate(RunConfig, {"objective": {"preset": "grpo"}, "task": task, "model": model}, "run.yaml")


def test_text_is_refused_on_the_addition_task_and_on_a_task_class():
    with pytest.raises(ConfigError, match="model.toy.text: .*the toy addition task has its own build"):
        _config({"name": "toy_addition"}, {})
    with pytest.raises(ConfigError, match="model.toy.text: .*task 'custom' has none"):
        _config({"name": "custom", "custom": {"class": "m.py:C"}}, {})
    rows = _config({"name": "custom", "custom": {"data": "d.jsonl", "reward": "r.py:f"}}, {"slip_prob": 0.3})
    assert rows.model.toy.text.slip_prob == 0.3


def test_a_text_build_enters_a_job_s_identity_only_when_set():
    task = {"name": "custom", "custom": {"data": "d.jsonl", "reward": "r.py:f"}}
    plain, built = _config(task), _config(task, {})
    assert "text" not in json.dumps(plain.identity()["model"]) and plain.config_hash != built.config_hash


def test_a_custom_task_the_addition_toy_cannot_read_gets_a_base_model_of_its_own(tmp_path):
    """Rows and functions of the user's: refused on the addition toy, naming the character; with `model.toy.text`,
    a build over its rows' characters (its answers among them) that a run loads."""
    from harness.engine.base_model import policy_path, task_source
    from harness.engine.preflight import custom_task_problem
    from harness.engine.training import build_task

    rows = [{"problem": f"Reverse «{w}»:", "answer": w[::-1]} for w in ("abc", "dog", "Zebra", "ünï")]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "reward.py").write_text(
        "def exact(completion, reference, prompt):\n    return completion == reference['answer']\n"
    )
    task = {"name": "custom", "custom": {"data": "rows.jsonl", "reward": "reward.py:exact", "root": str(tmp_path)}}
    plain = _config(task)
    assert custom_task_problem(plain).startswith("task.custom.data: the prompt of row 0 has ' :R«»', which the toy")
    toy = {"text": {}, "sft_steps": 2, "eval_samples": 4, "min_clean_accuracy": 0.0}
    data = {
        "objective": {"preset": "grpo"},
        "task": task,
        "model": {"source": "toy", "cache_dir": str(tmp_path), "toy": toy},
    }
    cfg = validate(RunConfig, data, "run.yaml")
    assert custom_task_problem(cfg) is None
    built = build_task(cfg)
    try:
        source = task_source(cfg, built)
        assert "Zebra"[::-1] in source.texts and "Reverse «abc»:" in source.texts
        path = policy_path(cfg, built)
    finally:
        built.close()
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert tokenizer.unk_token_id not in tokenizer("Reverse «ünï»: ïnü")["input_ids"]
    moved = cfg.model_copy(
        update={
            "task": cfg.task.model_copy(update={"custom": cfg.task.custom.model_copy(update={"root": "/elsewhere"})})
        }
    )
    assert task_source(moved, built).settings == source.settings  # where the files are is not part of the key
