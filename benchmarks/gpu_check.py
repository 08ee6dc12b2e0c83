"""The paper path end to end on a new GPU host, with what decides each figure printed beside it.

    python benchmarks/gpu_check.py                              # one GPU: Qwen2.5-0.5B's shape, bf16
    python benchmarks/gpu_check.py --device cpu --size tiny     # the same on CPU in under a minute (a test runs it)

1. saves a random-weight model of Qwen2.5-0.5B's shape (`--size tiny`: 2 layers) locally (benchmarks/_qwen_shape.py);
2. runs the paper config (ablations/paper/qwen_math_1p5b.yaml: MATH, R1 template, gradient checkpointing, bf16 on a
   GPU, float32 on CPU) through `harness run` for --steps steps at the shape given, into a SQLite store, with its
   last generate call described from inside the process (benchmarks/_decode_probe.py), and reads the run back;
3. replays the run's generate calls (prompts, sampling settings, seeds) on the bare `TransformersBackend` in this
   process, then the same calls with prompts of one length each (no padding: no attention mask at the decode);
4. runs `harness eval` on 4 MATH-500 problems;
5. runs benchmarks/vs_trl.py at the same shape, where TRL is installed.

A decode's time per token step is a generate call's time over its longest response. Each figure is the median over
the second half of the calls before the last (profiled): the first steps of a run share the CPU with the start of its
grading helper, a process that imports sympy and math-verify. Beside each: the policy's dtype, the attention
implementation and the mask the decode passes, the SDPA kernels the profiler saw and the call's share in SDPA, torch's
threads and the threads alive; then every such factor side by side, those that differ marked. Each stage runs within
what is left of --time-limit (360 s: the defaults are sized to fit 6 minutes on one H100, not yet run on one; it stops
at the stage it reached). Prints one table and writes results/benchmarks/gpu_check_<size>_<device>.json.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks._decode_probe import describe  # noqa: E402
from benchmarks._gpu_check_table import print_table  # noqa: E402
from benchmarks._qwen_shape import SIZES, save  # noqa: E402
from benchmarks._report import RESULTS, write_json  # noqa: E402
from trainer import metric_names as M  # noqa: E402
from trainer.models.fingerprint import Machine, gpu_name  # noqa: E402
from trainer.models.load import load_policy  # noqa: E402
from trainer.rollout.base import SamplingParams  # noqa: E402
from trainer.rollout.hf import TransformersBackend  # noqa: E402

PAPER = ROOT / "ablations" / "paper" / "qwen_math_1p5b.yaml"
SHAPES = {  # prompts, group, new tokens, steps
    "0.5b": (8, 8, 256, 5),
    "tiny": (2, 4, 32, 8),
}
EVAL_PROBLEMS = 4


class Stop(Exception):
    """A stage failed or the time limit was reached: one line, exit 1."""


class Clock:
    def __init__(self, limit: float):
        self.start, self.limit = time.perf_counter(), limit

    def left(self, stage: str) -> float:
        left = self.limit - (time.perf_counter() - self.start)
        if left <= 0:
            raise Stop(f"the time limit ({self.limit:.0f} s) was reached before {stage}")
        return left


def run_stage(stage: str, command: list[str], clock: Clock, env: dict[str, str] | None = None) -> float:
    """Run `command` from the repository root within the time left; its wall time."""
    start = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", **(env or {})}
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=clock.left(stage))
    except subprocess.TimeoutExpired:
        raise Stop(f"{stage} ran past the time limit ({clock.limit:.0f} s)") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise Stop(f"{stage} exited {done.returncode}: {last}")
    return time.perf_counter() - start


def equal_length(prompts: list[str], tokenizer) -> list[str]:
    """Prompts of digits (one token each) as long as the longest of `prompts`, one per distinct prompt."""
    width = max(len(ids) for ids in tokenizer(sorted(set(prompts)))["input_ids"])
    index: dict[str, int] = {}
    return [f"{index.setdefault(p, len(index)):04d}" + "7" * (width - 4) for p in prompts]


def replay(backend: TransformersBackend, calls: list[dict], prompts_of) -> tuple[list[float | None], dict]:
    """The recorded calls on `backend` with the prompts `prompts_of(call)`: the first (a warm-up), those `settled`
    reads and the last, described; seconds per token step of each (None for those left out)."""
    per_step: list[float | None] = [None] * len(calls)
    factors: dict = {}
    for i in [0, *range(max(1, len(calls) // 2), len(calls))]:
        call = calls[i]
        generate = functools.partial(backend.generate, prompts_of(call), SamplingParams(**call["params"]), call["seed"])
        start = time.perf_counter()
        if i < len(calls) - 1:
            batch = generate()
        else:
            batch, factors = describe(backend, generate)
        per_step[i] = (time.perf_counter() - start) / int(batch.lengths.max())
    return per_step, factors


def read_run(uri: str) -> tuple[str, dict[str, list[float]], dict[str, str]]:
    """(status, metric histories in step order, params) of the one run of experiment gpu_check at `uri`."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("gpu_check").experiment_id])
    keys = (M.DECODE_STEP_S, M.GENERATE_S, M.UPDATE_S, M.STEP_S, M.LENGTH_MEAN)
    history = {
        k: [m.value for m in sorted(client.get_metric_history(run.info.run_id, k), key=lambda m: m.step)] for k in keys
    }
    return run.info.status, history, run.data.params


def eval_accuracy(uri: str) -> float:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("gpu_check_eval").experiment_id])
    return run.data.metrics[M.eval_metric("math500", "accuracy")]


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--size", choices=list(SIZES), default="0.5b")
    ap.add_argument("--prompts", type=int, help="prompts per step (0.5b: 8, tiny: 2)")
    ap.add_argument("--group", type=int, help="responses per prompt (0.5b: 8, tiny: 4)")
    ap.add_argument("--new-tokens", type=int, help="response budget (0.5b: 256, tiny: 32)")
    ap.add_argument("--steps", type=int, help="RL steps, at least 3 (0.5b: 5, tiny: 8; the last is profiled)")
    ap.add_argument("--threads", type=int, help="torch CPU threads (train.threads): 1 on CPU, else torch's own")
    ap.add_argument("--time-limit", type=float, default=360.0, help="seconds for the whole check (360)")
    args = ap.parse_args()
    shape = dict(zip(("prompts", "group", "new_tokens", "steps"), SHAPES[args.size]))
    for key, value in shape.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.threads is None and args.device == "cpu":
        args.threads = 1  # the toy's setting: a second thread waits on the first on a shared 2-core machine
    if min(args.prompts, args.group, args.new_tokens) < 1 or args.steps < 3 or (args.threads or 1) < 1:
        ap.error("--prompts, --group, --new-tokens and --threads must be >= 1 and --steps >= 3")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit(f"gpu_check: --device cuda: torch {torch.__version__} sees no CUDA device here (--device cpu runs it)")
    return args


def overrides(args: argparse.Namespace, model: Path, dtype: str) -> list[str]:
    """The run config's overrides every stage shares: the saved model, its dtype, the device, no periodic eval."""
    sets = [f"model.name_or_path={model}", f"model.dtype={dtype}", f"train.device={args.device}", "eval.every=0"]
    return sets + ([f"train.threads={args.threads}"] if args.threads else [])


def sets(items: list[str]) -> list[str]:
    return [x for item in items for x in ("--set", item)]


def train(args: argparse.Namespace, work: Path, common: list[str], clock: Clock, report: dict) -> list[dict]:
    """`harness run` of the paper config with the probe inside; the generate calls it recorded."""
    shape = [
        f"rollout.prompts_per_step={args.prompts}",
        f"rollout.group_size={args.group}",
        f"rollout.max_new_tokens={args.new_tokens}",
        f"train.steps={args.steps}",
        "tracking.experiment=gpu_check",
    ]
    probe, uri = work / "probe.json", f"sqlite:///{work / 'mlflow.db'}"
    command = [sys.executable, str(ROOT / "benchmarks" / "_decode_probe.py"), str(probe), "run", str(PAPER)]
    command += ["--tracking-uri", uri, "--quiet", *sets(common + shape)]
    report["stages_s"]["harness run"] = run_stage("harness run", command, clock, {"GPU_CHECK_PROFILE": str(args.steps)})
    inside = json.loads(probe.read_text())
    report["run"] = {"factors": inside["described"], "update_peak_gib": inside["update_peak_gib"]}
    return inside["calls"]


def bare(args: argparse.Namespace, model: Path, dtype: str, calls: list[dict], clock: Clock, report: dict) -> None:
    """The run's generate calls replayed on the bare backend, with the run's prompts and with prompts of one length."""
    clock.left("the bare backend")
    start = time.perf_counter()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    policy, tokenizer = load_policy(str(model), device, dtype, gradient_checkpointing=True)  # as the paper config's
    backend = TransformersBackend(policy, tokenizer)
    report["parameters"] = sum(p.numel() for p in policy.parameters())
    for key, prompts_of in (
        ("bare", lambda call: call["prompts"]),
        ("bare_equal", lambda call: equal_length(call["prompts"], tokenizer)),
    ):
        report[key] = dict(zip(("per_step_s", "factors"), replay(backend, calls, prompts_of)))
    report["stages_s"]["bare backend"] = time.perf_counter() - start
    del policy, backend
    if device.type == "cuda":
        torch.cuda.empty_cache()


def read_back(args: argparse.Namespace, work: Path, report: dict) -> None:
    status, history, params = read_run(f"sqlite:///{work / 'mlflow.db'}")
    if status != "FINISHED" or len(history[M.DECODE_STEP_S]) != args.steps:
        raise Stop(f"harness run: the run read back is {status}, {len(history[M.DECODE_STEP_S])} steps logged")
    report["run"] |= {"status": status, "metrics": history}
    report["run"]["config"] = {k: params[k] for k in ("train.micro_batch_size", "train.length_buckets")}


def evaluate(args: argparse.Namespace, work: Path, model: Path, dtype: str, clock: Clock, report: dict) -> None:
    uri = f"sqlite:///{work / 'mlflow.db'}"
    command = [sys.executable, "-m", "harness.cli", "eval", "--model", str(model), "--benchmarks", "math500"]
    command += ["--limit", str(EVAL_PROBLEMS), "--k", "1", "--temperature", "0", "--template", "r1"]
    command += ["--max-new-tokens", str(args.new_tokens), "--device", args.device, "--dtype", dtype]
    command += ["--tracking-uri", uri, "--experiment", "gpu_check_eval"]
    report["stages_s"]["harness eval"] = run_stage("harness eval", command, clock)
    report["eval"] = {"problems": EVAL_PROBLEMS, "accuracy": eval_accuracy(uri)}


def versus_trl(args: argparse.Namespace, common: list[str], threads: int, clock: Clock, report: dict) -> None:
    """benchmarks/vs_trl.py on the same model, config and shape (a warm-up step and a measured one each), where TRL
    is installed."""
    report["vs_trl"] = None
    if importlib.util.find_spec("trl") is None:
        return
    name = f"gpu_check_vs_trl_{args.size}_{args.device}"
    command = [sys.executable, str(ROOT / "benchmarks" / "vs_trl.py"), "--config", str(PAPER), "--name", name]
    command += ["--steps", "1", "--warmup", "1", "--prompts", str(args.prompts), "--group", str(args.group)]
    command += ["--max-new", str(args.new_tokens), "--threads", str(threads), *sets(common)]
    report["stages_s"]["vs_trl"] = run_stage("vs_trl", command, clock)
    report["vs_trl"] = json.loads((RESULTS / f"{name}.json").read_text())


def check(args: argparse.Namespace, report: dict) -> None:
    """Every stage in turn, into `report`: what the table and the JSON show."""
    clock = Clock(args.time_limit)
    dtype = "bfloat16" if args.device == "cuda" else "float32"  # the paper config's on a GPU; auto's on CPU
    threads, load_before = torch.get_num_threads(), os.getloadavg()
    report |= {"args": vars(args), "dtype": dtype, "stages_s": {}}
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        work = Path(tmp)
        start = time.perf_counter()
        model = save(args.size, work / "model", getattr(torch, dtype))
        report["stages_s"]["save model"] = time.perf_counter() - start
        common = overrides(args, model, dtype)
        calls = train(args, work, common, clock, report)
        bare(args, model, dtype, calls, clock, report)
        read_back(args, work, report)  # MLflow imported only now: the bare backend ran without it
        evaluate(args, work, model, dtype, clock, report)
        versus_trl(args, common, args.threads or threads, clock, report)
    machine = Machine.here()
    report["machine"] = {
        "hardware": gpu_name(args.device) or machine.cpu_model,
        "cpu": f"{machine.cpu_model} ({machine.cpu_capability})",
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "when": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    report["wall_s"] = time.perf_counter() - clock.start


def main() -> None:
    args = parse()
    report: dict = {}
    name = f"gpu_check_{args.size}_{args.device}"
    try:
        check(args, report)
    except Stop as stop:
        write_json(name, report)  # the stages that finished
        sys.exit(f"gpu_check: {stop}")
    print_table(report)
    write_json(name, report)


if __name__ == "__main__":
    main()
