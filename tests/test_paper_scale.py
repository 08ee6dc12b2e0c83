"""The paper-scale path on CPU: a Qwen2-architecture model and a dataset saved locally in HF format, loaded
by path like a hub id; a math-task training run with periodic evaluation; `harness eval`."""

from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from harness.cli import main
from trainer.data import load_records
from trainer.data.benchmarks import benchmark_path

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_qwen(tmp_path_factory) -> Path:
    """A randomly initialised 2-layer Qwen2 model with a byte-level BPE tokenizer trained here on math text,
    saved with save_pretrained (safetensors): what a downloaded checkpoint looks like on disk."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    text = [row["problem"] for row in load_records(benchmark_path("math500"))]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        text,
        trainers.BpeTrainer(
            vocab_size=400, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=len(fast),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=1024,
            eos_token_id=fast.eos_token_id,
            pad_token_id=fast.pad_token_id,
            tie_word_embeddings=True,
        )
    )
    path = tmp_path_factory.mktemp("tiny-qwen")
    model.save_pretrained(path)
    fast.save_pretrained(path)
    assert (path / "model.safetensors").exists()
    return path


def test_load_by_path_with_dtype_and_checkpointing(tiny_qwen):
    from trainer.models.load import load_policy

    model, tok = load_policy(str(tiny_qwen), torch.device("cpu"), "bfloat16", gradient_checkpointing=True)
    on = getattr(model, "is_activation_checkpointing", None)
    assert model.dtype == torch.bfloat16 and (on if on is not None else model.is_gradient_checkpointing)
    assert tok.pad_token_id is not None
    model, _ = load_policy(str(tiny_qwen), torch.device("cpu"))  # auto on CPU: float32
    assert model.dtype == torch.float32


def test_math_run_with_periodic_eval_on_a_local_hf_model_and_dataset(tiny_qwen, tmp_path):
    import datasets

    pool = tmp_path / "pool"  # a training set in HF format, loaded by path with a field mapping
    rows = load_records(benchmark_path("gsm8k_train"))[:12]
    datasets.Dataset.from_list([{"q": r["question"], "a": r["answer"]} for r in rows]).save_to_disk(str(pool))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code = main(
        [
            "run",
            str(ROOT / "ablations" / "toy_run.yaml"),
            "--tracking-uri",
            uri,
            "--quiet",
            "--set",
            "model.source=hf",
            "--set",
            f"model.name_or_path={tiny_qwen}",
            "--set",
            "task.name=math",
            "--set",
            f"task.math.train={pool}",
            "--set",
            "task.math.fields.question=q",
            "--set",
            "task.math.fields.answer=a",
            "--set",
            "task.math.fields.solution=null",
            "--set",
            "task.math.answer_format=gsm8k",
            "--set",
            "task.math.template=none",
            "--set",
            "rollout.prompts_per_step=2",
            "--set",
            "rollout.group_size=2",
            "--set",
            "rollout.max_new_tokens=12",
            "--set",
            "train.steps=2",
            "--set",
            "train.lr=1e-3",
            "--set",
            "eval.every=2",
            "--set",
            "eval.benchmarks=[math500,gsm8k]",
            "--set",
            "eval.limit=2",
            "--set",
            "eval.k=2",
            "--set",
            "eval.max_new_tokens=8",
        ]
    )
    assert code == 0
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("toy").experiment_id])
    assert run.info.status == "FINISHED"
    for key in ("eval/math500/accuracy", "eval/gsm8k/pass_at_k", "eval/mean/accuracy", "train/accuracy"):
        assert key in run.data.metrics, key
    assert [m.step for m in client.get_metric_history(run.info.run_id, "eval/math500/accuracy")] == [2]


def test_harness_eval_logs_and_prints(tiny_qwen, tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code = main(
        [
            "eval",
            "--model",
            str(tiny_qwen),
            "--benchmarks",
            "math500,amc23",
            "--limit",
            "3",
            "--k",
            "2",
            "--max-new-tokens",
            "8",
            "--tracking-uri",
            uri,
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "math500" in out and "amc23" in out and "pass@k" in out
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("eval").experiment_id])
    assert run.data.metrics["eval/math500/problems"] == 3 and run.data.metrics["eval/amc23/k"] == 2
    assert run.data.params["model"] == str(tiny_qwen)


def test_eval_rejects_unknown_benchmark(capsys):
    assert main(["eval", "--model", "x", "--benchmarks", "math500,nope"]) == 2
    assert "--benchmarks: nope is not one of" in capsys.readouterr().err


def test_evaluation_only_run_scores_the_initial_model(tiny_qwen, tmp_path):
    """train.steps 0: the template study's unit (one model × one template, every benchmark at step 0)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code = main(
        [
            "run",
            str(ROOT / "ablations" / "toy_run.yaml"),
            "--tracking-uri",
            uri,
            "--quiet",
            "--set",
            "model.source=hf",
            "--set",
            f"model.name_or_path={tiny_qwen}",
            "--set",
            "task.name=math",
            "--set",
            "task.math.train=gsm8k_train",
            "--set",
            "task.math.limit=4",
            "--set",
            "task.math.template=r1",
            "--set",
            "train.steps=0",
            "--set",
            "eval.every=1",
            "--set",
            "eval.benchmarks=[aime24]",
            "--set",
            "eval.limit=2",
            "--set",
            "eval.max_new_tokens=6",
            "--set",
            "eval.temperature=0",
        ]
    )
    assert code == 0
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("toy").experiment_id])
    assert run.info.status == "FINISHED" and run.data.params["task.math.template"] == "r1"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "eval/aime24/accuracy")] == [0]
    assert "train/accuracy" not in run.data.metrics


def test_eval_only_needs_eval(tmp_path, capsys):
    assert main(["run", str(ROOT / "ablations" / "toy_run.yaml"), "--set", "train.steps=0"]) == 2
    assert "evaluation-only run" in capsys.readouterr().err
