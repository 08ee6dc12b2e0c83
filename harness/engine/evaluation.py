"""`harness eval`: a model on math benchmarks, k samples per problem, logged to MLflow and printed as a table."""

from __future__ import annotations

import torch
import transformers
from rich.console import Console
from rich.table import Table

from harness.config.evaluation import EvalSettings
from harness.runs.layout import default_tracking_uri
from harness.runs.writer import RunTracker, prepare_store
from trainer import metric_names as M


def load_benchmarks(names, limit: int | None):
    """Benchmark name → problems (the first `limit` of each)."""
    from trainer.data.benchmarks import load_benchmark

    return {name: load_benchmark(name)[:limit] if limit else load_benchmark(name) for name in names}


def run_eval(s: EvalSettings, *, tracking_uri: str | None = None, experiment: str = "eval") -> dict[str, float]:
    """Evaluate, log one MLflow run (params = the settings, metrics eval/<benchmark>/... at step 0), return them."""
    from trainer.evaluate import evaluate
    from trainer.models.load import load_policy, pick_device
    from trainer.rollout.base import SamplingParams
    from trainer.rollout.hf import TransformersBackend

    transformers.utils.logging.disable_progress_bar()
    benchmarks = load_benchmarks(s.benchmarks, s.limit)  # a bad benchmark name fails before the model loads
    device = pick_device(s.device)
    torch.manual_seed(s.seed)
    model, tokenizer = load_policy(s.model, device, s.dtype)
    backend = TransformersBackend(model, tokenizer)
    params = SamplingParams(s.max_new_tokens, s.temperature, s.top_p)  # temperature 0: greedy
    result = evaluate(backend, benchmarks, template=s.template, k=s.k, params=params, seed=s.seed)
    uri = default_tracking_uri("results", tracking_uri)
    with RunTracker(
        uri,
        prepare_store(uri, experiment),
        run_name=f"eval-{s.model.rstrip('/').split('/')[-1]}",
        tags={"kind": "eval", "model": s.model, "template": s.template},
        config=s,
    ) as tracker:
        tracker.log_metrics(0, result)
    return result


def print_table(result: dict[str, float], benchmarks, k: int) -> None:
    table = Table(title=f"k = {k} samples per problem")
    for col in ("benchmark", "problems", "avg@k", "pass@k", "maj@k", "len correct", "len incorrect"):
        table.add_column(col, justify="left" if col == "benchmark" else "right")
    fmt = lambda v: "—" if v is None else f"{v:.3f}" if v <= 1 else f"{v:.1f}"  # noqa: E731
    for b in [*benchmarks, "mean"]:
        get = lambda what, b=b: result.get(M.eval_metric(b, what))  # noqa: E731
        if get("accuracy") is None:
            continue
        n = get("problems")
        table.add_row(
            b,
            "" if n is None else str(int(n)),
            fmt(get("accuracy")),
            fmt(get("pass_at_k")),
            fmt(get("maj_at_k")),
            fmt(get("length_correct_mean")),
            fmt(get("length_incorrect_mean")),
        )
    Console().print(table)
