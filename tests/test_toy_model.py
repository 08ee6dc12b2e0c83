"""The toy model build: a real SFT build (few steps), cache reuse, determinism, loading as a hub model."""

from __future__ import annotations

import json
import re
import shutil
import threading

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

import trainer.models.toy as toy
from trainer.models.char_tokenizer import build_char_tokenizer
from trainer.models.fingerprint import weights_sha256
from trainer.tasks.toy_addition import CHARS, ToyAdditionTask, target_trace

TINY = toy.ToyModelConfig(sft_steps=4, batch_size=8, warmup_steps=1, eval_samples=8, min_clean_accuracy=0.0)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return toy.ensure_toy_model(TINY, tmp_path_factory.mktemp("cache"))


def _weights(path):
    return load_file(str(path / "model.safetensors"))


def test_build_loads_back_as_an_ordinary_checkpoint(built):
    assert built.name == f"toy-{toy.config_hash(TINY)}"
    model = AutoModelForCausalLM.from_pretrained(built)
    tokenizer = AutoTokenizer.from_pretrained(built)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.config.hidden_size == 64 and model.config.num_hidden_layers == 3
    assert model.config.intermediate_size == 192 and model.config.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert model.config.vocab_size == len(tokenizer) == len(CHARS) + 4
    assert model.config.eos_token_id == tokenizer.eos_token_id
    assert 150_000 < sum(p.numel() for p in model.parameters()) < 170_000
    report = json.loads((built / toy.COMPLETE_MARKER).read_text())
    assert report["hash"] == toy.config_hash(TINY) and report["config"] == TINY.model_dump(mode="json")
    assert report["eval"]["n"] == 8
    reloaded_weights = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    assert all(torch.equal(reloaded_weights[k], v) for k, v in _weights(built).items())


def test_second_call_reuses_the_cache(built, monkeypatch):
    def no_training(*args, **kwargs):
        raise AssertionError("retrained although a complete build exists")

    monkeypatch.setattr(toy, "_train", no_training)
    assert toy.ensure_toy_model(TINY, built.parent) == built


def test_same_config_gives_identical_weights_and_seed_changes_them(built, tmp_path):
    again = toy.build_toy_model(TINY, tmp_path / "a")
    first, second = _weights(built), _weights(again)
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    other = _weights(toy.build_toy_model(TINY.model_copy(update={"seed": 1}), tmp_path / "b"))
    assert not all(torch.equal(first[k], other[k]) for k in first)


def test_build_below_the_quality_bar_fails_loudly_and_caches_nothing(tmp_path):
    weak = TINY.model_copy(update={"min_clean_accuracy": 0.9})  # 4 SFT steps: accuracy ~0
    with pytest.raises(
        toy.ToyBuildTooWeak,
        match=r"sampled accuracy on clean prompts is 0\.\d{3} .*"
        r"below model\.toy\.min_clean_accuracy = 0\.9",
    ):
        toy.ensure_toy_model(weak, tmp_path)
    assert list(tmp_path.glob("toy-*/" + toy.COMPLETE_MARKER)) == []
    assert [p for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp dir left


@pytest.mark.parametrize(
    ("accuracy", "high", "fails"),
    [
        (0.899, None, "below"),
        (0.9, None, ""),
        (0.97, None, ""),
        (float("nan"), None, "below"),
        (0.95, 0.95, ""),
        (0.951, 0.95, "above model.toy.max_clean_accuracy = 0.95"),
    ],
)
def test_quality_band_is_clean_accuracy_between_floor_and_ceiling(accuracy, high, fails):
    evaluation = toy.ToyEval(
        accuracy_clean=accuracy,
        accuracy_hidden=0.1,
        accuracy=0.5,
        length_mean=40.0,
        truncated_frac=0.0,
        filler_blocks={},
        n=256,
    )
    config = TINY.model_copy(update={"min_clean_accuracy": 0.9, "max_clean_accuracy": high})
    if fails:
        with pytest.raises(toy.ToyBuildTooWeak, match=f"n=256.*{re.escape(fails)}"):
            toy.check_quality(config, evaluation, "abc")
    else:
        toy.check_quality(config, evaluation, "abc")


def test_hash_follows_the_config():
    assert toy.config_hash(TINY) == toy.config_hash(toy.ToyModelConfig(**TINY.model_dump()))
    assert toy.config_hash(TINY) != toy.config_hash(TINY.model_copy(update={"lr": 1e-3}))
    nested = TINY.model_copy(update={"task": TINY.task.model_copy(update={"hide_prob": 0.3})})
    assert toy.config_hash(TINY) != toy.config_hash(nested)


@pytest.mark.slow
def test_build_uses_its_own_thread_count(tmp_path, monkeypatch):
    """Float sums depend on the thread count (two 800-step builds, on 1 and 2 threads, differed by up
    to 0.59 in a weight), so the build runs on config.build_threads whatever the caller set."""
    seen = []
    real = toy._train
    monkeypatch.setattr(toy, "_train", lambda *a: (seen.append(torch.get_num_threads()), real(*a))[1])
    caller = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        toy.build_toy_model(TINY.model_copy(update={"build_threads": 2}), tmp_path)
        assert seen == [2] and torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(caller)


def test_hash_follows_the_trace_format(monkeypatch):
    """A changed trace format is a new cache key even if nobody bumps BUILD_VERSION."""
    before = toy.config_hash(TINY)
    real = toy.target_trace
    monkeypatch.setattr(toy, "target_trace", lambda *a: real(*a).replace(";", ":"))
    assert toy.config_hash(TINY) != before


def test_incomplete_build_is_rebuilt_and_concurrent_callers_build_once(tmp_path, monkeypatch):
    config = TINY.model_copy(update={"sft_steps": 1, "eval_samples": 0})
    leftover = toy.toy_model_dir(config, tmp_path)
    leftover.mkdir(parents=True)
    (leftover / "junk").write_text("crashed build")
    calls = []
    real_train = toy._train

    def counted(*args):
        calls.append(1)
        return real_train(*args)

    monkeypatch.setattr(toy, "_train", counted)
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(toy.ensure_toy_model(config, tmp_path))) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [leftover] * 3 and len(calls) == 1
    assert not (leftover / "junk").exists() and (leftover / toy.COMPLETE_MARKER).exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp dirs left


BUILDER = """
import sys
import trainer.models.toy as toy
from trainer.models.fingerprint import weights_sha256
real = toy._train
def counted(*args):
    with open(sys.argv[2], "a") as log:
        log.write("built\\n")
    return real(*args)
toy._train = counted
config = toy.ToyModelConfig.model_validate_json(sys.argv[3])
print(toy.ensure_toy_model(config, sys.argv[1]))
"""


@pytest.mark.slow
def test_two_processes_building_one_model_build_it_once(tmp_path):
    """Two processes (two checkouts, or a sweep and a run) asking at once for one build into the shared cache:
    the file lock makes one build and the other wait, and both get the same complete build."""
    import subprocess
    import sys

    config = TINY.model_copy(update={"sft_steps": 30, "eval_samples": 0})
    log = tmp_path / "builds.log"
    args = [sys.executable, "-c", BUILDER, str(tmp_path / "cache"), str(log), config.model_dump_json()]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300)[0].strip().splitlines()[-1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs[0] == outs[1] == str(toy.toy_model_dir(config, tmp_path / "cache"))
    assert log.read_text().splitlines() == ["built"]
    assert (toy.toy_model_dir(config, tmp_path / "cache") / toy.COMPLETE_MARKER).exists()
    assert [p.name for p in (tmp_path / "cache").iterdir() if p.name.startswith(".")] == []


def test_sft_in_length_buckets_is_the_one_pass_loss_and_gradient():
    tokenizer = build_char_tokenizer(CHARS)
    torch.manual_seed(0)
    model = toy._new_model(TINY, tokenizer)
    ids, mask, labels = toy._sft_batch(ToyAdditionTask(TINY.task), tokenizer, np.random.default_rng(0), 16)
    assert mask.sum(-1).min() < mask.shape[1]  # rows of different lengths: the buckets are cut
    whole = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    whole.backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    loss = toy._backward_in_buckets(model, ids, mask, labels, 4)
    assert loss.item() == pytest.approx(whole.item(), rel=1e-6)
    assert max((p.grad - g).abs().max().item() for p, g in zip(model.parameters(), expected)) < 1e-6


def test_sft_batch_trains_on_the_response_only():
    tokenizer = build_char_tokenizer(CHARS)
    task = ToyAdditionTask(TINY.task)
    ids, mask, labels = toy._sft_batch(task, tokenizer, np.random.default_rng(0), 4)
    for row_ids, row_mask, row_labels in zip(ids.tolist(), mask.tolist(), labels.tolist()):
        n = sum(row_mask)
        text = tokenizer.decode(row_ids[:n])
        prompt_len = text.index("=") + 1 - len("<s>") + 1  # BOS + prompt
        assert row_ids[0] == tokenizer.bos_token_id and row_ids[n - 1] == tokenizer.eos_token_id
        assert row_labels[:prompt_len] == [-100] * prompt_len
        assert row_labels[prompt_len:n] == row_ids[prompt_len:n]
        assert row_labels[n:] == [-100] * (len(row_ids) - n)


@pytest.mark.slow
def test_short_sft_lowers_the_loss(tmp_path):
    config = TINY.model_copy(update={"sft_steps": 40, "batch_size": 16, "warmup_steps": 5, "eval_samples": 0})
    report = json.loads((toy.build_toy_model(config, tmp_path) / toy.COMPLETE_MARKER).read_text())
    assert report["final_loss"] < 2.0  # uniform guessing over the vocabulary is ln(46) = 3.8


class _ScriptedModel:
    """Stands in for a model: answers prompt i with the i-th scripted response (ids, EOS where scripted)."""

    device = torch.device("cpu")

    def __init__(self, responses: list[list[int]]):
        self.responses = responses

    def generate(self, input_ids, attention_mask, max_new_tokens, pad_token_id, **kwargs):
        width = max(len(r) for r in self.responses)
        assert width <= max_new_tokens
        rows = [r + [pad_token_id] * (width - len(r)) for r in self.responses]
        return torch.cat([input_ids, torch.tensor(rows)], dim=1)


def test_sampled_accuracy_counts_by_hand():
    tokenizer = build_char_tokenizer(CHARS)
    task = ToyAdditionTask(TINY.task.model_copy(update={"hide_prob": 0.0, "slip_prob": None}))  # right traces
    groups = task.sample_groups(np.random.default_rng(3), 3, 1)  # sampled_accuracy draws the same prompts
    trace = [toy_trace(task, g) for g in groups]
    ids = [tokenizer.convert_tokens_to_ids(list(t)) for t in trace]
    eos = tokenizer.eos_token_id
    wrong = trace[1].replace(">", ">9")  # an extra leading 9: a wrong answer
    filler = tokenizer.convert_tokens_to_ids(list("abcdefghijklmnop"))
    responses = [
        ids[0] + filler + [eos],
        tokenizer.convert_tokens_to_ids(list(wrong)) + [eos],
        (ids[2] + filler * 4)[:64],
    ]  # right answer but no EOS within the budget: wrong
    result = toy.sampled_accuracy(_ScriptedModel(responses), tokenizer, task, n=3, seed=3, max_new_tokens=64)
    assert result.accuracy == pytest.approx(1 / 3) and result.accuracy_clean == pytest.approx(1 / 3)
    assert np.isnan(result.accuracy_hidden)
    assert result.truncated_frac == pytest.approx(1 / 3)
    assert result.length_mean == pytest.approx((len(ids[0]) + 17 + len(wrong) + 1 + 64) / 3)
    assert result.filler_blocks == {"0": 1, "1": 1}


def toy_trace(task, group):
    return target_trace(task.config.model_copy(update={"max_filler_blocks": 0}), group, 0, np.random.default_rng(0))


def test_sampled_accuracy_is_seeded(built):
    model = AutoModelForCausalLM.from_pretrained(built)
    tokenizer = AutoTokenizer.from_pretrained(built)
    result = toy.sampled_accuracy(model, tokenizer, ToyAdditionTask(TINY.task), n=12, seed=0, max_new_tokens=16)
    assert result.n == 12 and 0 < result.length_mean <= 16
    assert 0.0 <= result.accuracy <= 1.0 and 0.0 <= result.truncated_frac <= 1.0
    again = toy.sampled_accuracy(model, tokenizer, ToyAdditionTask(TINY.task), n=12, seed=0, max_new_tokens=16)
    assert again == result


def test_default_settings_load_the_shipped_build_and_train_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(toy, "_train", lambda *a, **k: pytest.fail("built although the default settings ship"))
    path = toy.ensure_toy_model(toy.ToyModelConfig(), tmp_path / "empty-cache")
    manifest = json.loads((toy.SHIPPED_DIR / toy.SHIPPED_MANIFEST).read_text())[path.name]
    assert path.parent == toy.SHIPPED_DIR and path.name == f"toy-{toy.config_hash(toy.ToyModelConfig())}"
    assert not (tmp_path / "empty-cache").exists()
    assert weights_sha256(path) == manifest["files"]["model.safetensors"]
    assert toy.toy_model_ready(toy.ToyModelConfig(), tmp_path) and not toy.toy_model_ready(TINY, tmp_path)
    assert 0.6 <= manifest["eval"]["accuracy_clean"] <= 0.85  # the quality band of the default settings
    assert (path / "model.safetensors").stat().st_size < 1_000_000


def test_a_damaged_shipped_build_is_refused_naming_the_file(tmp_path):
    shutil.copytree(toy.SHIPPED_DIR, tmp_path / "shipped")
    name = f"toy-{toy.config_hash(toy.ToyModelConfig())}"
    assert toy.shipped_toy_model(toy.ToyModelConfig(), tmp_path / "shipped") == tmp_path / "shipped" / name
    weights = tmp_path / "shipped" / name / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(toy.ShippedModelCorrupt, match=r"model\.safetensors: sha256 .* reinstall harness"):
        toy.shipped_toy_model(toy.ToyModelConfig(), tmp_path / "shipped")
    assert toy.shipped_toy_model(TINY, tmp_path / "shipped") is None  # settings that do not ship are built


def test_other_settings_still_build_and_a_run_seed_names_the_build():
    assert toy.ToyModelConfig(seed="run").for_run(7) == toy.ToyModelConfig(seed=7)
    assert toy.ToyModelConfig(seed=3).for_run(7).seed == 3
    assert toy.config_hash(toy.ToyModelConfig(seed=1)) != toy.config_hash(toy.ToyModelConfig())


def _why_not_bitwise(built_on: dict, shipped_on: dict) -> str:
    """Why a build on `built_on` need not be the shipped build's bits ('' where the pinned path promises it is)."""
    from harness.runs.sweep_data import RunMachine

    fields = ("cpu_model", "cpu_capability", "torch_version", "threads", "cpu_vendor", "cpu_family", "cpu_path_env")
    here, there = (RunMachine(**{k: v for k, v in m.items() if k in fields}) for m in (built_on, shipped_on))
    return here.bits_differ(there)


def test_a_build_on_another_vendors_cpu_is_held_to_the_band_not_to_the_shipped_bits():
    """The record a user's Intel Xeon wrote (issue: the pinned path built sha256 74b8a295… there) carries no
    bitwise promise against the shipped AMD build; an AMD build on the same path and torch does."""
    shipped = json.loads((toy.SHIPPED_DIR / toy.SHIPPED_MANIFEST).read_text())
    shipped_on = shipped[f"toy-{toy.config_hash(toy.ToyModelConfig())}"]["built_on"]
    intel = {"cpu_model": "Intel(R) Xeon(R) CPU @ 2.50GHz", "cpu_capability": "AVX2", "torch_version": "2.13.0+cpu",
             "threads": 1, "cpu_vendor": "GenuineIntel", "cpu_family": "6/106"}  # fmt: skip
    assert _why_not_bitwise(intel, shipped_on) == "CPU vendor GenuineIntel vs AuthenticAMD"
    amd = {**intel, "cpu_model": "AMD EPYC", "cpu_vendor": "AuthenticAMD", "cpu_family": "25/17"}
    assert _why_not_bitwise(amd, shipped_on) == ""
    assert _why_not_bitwise({**amd, "cpu_capability": "AVX512"}, shipped_on) == "CPU capability AVX512 vs AVX2"


def test_the_default_settings_built_from_scratch_land_in_the_quality_band(default_build):
    """A fresh build of the default settings passes the quality band (build_toy_model refuses one outside it), and
    where the pinned path promises the same bits as the machine the shipped one was built on (the same CPU vendor
    and, where both recorded one, family; the same CPU path and torch), it is the shipped build bit for bit. On
    another vendor's CPU MKL computes the pinned GEMMs another way (docs/reproducibility.md), and only the band is
    checked."""
    report = json.loads((default_build / toy.COMPLETE_MARKER).read_text())
    assert report["hash"] == toy.config_hash(toy.ToyModelConfig())
    assert 0.6 <= report["eval"]["accuracy_clean"] <= 0.85
    assert report["built_on"]["threads"] == 1
    shipped = json.loads((toy.SHIPPED_DIR / toy.SHIPPED_MANIFEST).read_text())[default_build.name]
    why_not = _why_not_bitwise(report["built_on"], shipped["built_on"])
    if not why_not:
        assert weights_sha256(default_build) == shipped["files"]["model.safetensors"], (
            f"a build on {report['built_on']} differs from the shipped one built on {shipped['built_on']}: the "
            "pinned path did not reproduce it on this CPU (docs/reproducibility.md)"
        )
    else:
        print(f"not compared bit for bit with the shipped build ({why_not}); the quality band holds")
