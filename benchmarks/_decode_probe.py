"""What decides a decode's speed in a process, read during one `TransformersBackend.generate` call; and `harness run`
with that reading taken inside it (benchmarks/gpu_check.py).

`describe` runs one call with a few of its decode steps under torch's profiler and reports the policy's dtype and
attention implementation, the mask the first attention layer receives at a decode step, the SDPA kernels the profiler
saw and the share of those steps spent in SDPA, the GPU's busy share, torch's thread counts, the threads alive in the
process, torch's backend flags and the environment variables that steer kernels. As a script it runs
`harness run ARGS...` (harness.cli.main, the same code as the command) with every generate call's prompts, sampling
settings and seed recorded, call number $GPU_CHECK_PROFILE described, and each update's peak device memory above what
was allocated before it, all written to OUT as JSON:

    python benchmarks/_decode_probe.py OUT.json run CONFIG --set KEY=VALUE ...
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

import torch

from trainer.rollout import static_decode
from trainer.rollout.hf import pick_decoder

ENV = (
    "ATEN_CPU_CAPABILITY",
    "MKL_CBWR",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "CUDA_LAUNCH_BLOCKING",
    "PYTORCH_CUDA_ALLOC_CONF",
    "TORCH_CUDNN_SDPA_ENABLED",
    "TRANSFORMERS_SDPA_FORCE_GQA",
    "TOKENIZERS_PARALLELISM",
)
"""Environment variables that change which kernels run or how many threads they use."""


_PATHS = {
    "forward": "the model's forward",
    "llama": "LlamaDecoder",
    "static": "StaticDecoder",
    "fixed": "StaticDecoder, fixed shapes",
    "graph": "StaticDecoder, CUDA graphs",
}
"""Each decode step `pick_decoder` resolves to, as the table names it."""


def threads_alive() -> list[str]:
    """The Python threads of this process, by name (MainThread included)."""
    return sorted(t.name for t in threading.enumerate())


def os_threads() -> int | None:
    """Every thread of this process, torch's and the CUDA driver's included (Linux only)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


def allocator() -> dict[str, float] | None:
    """CUDA's caching allocator: memory held, and its calls to the driver (each cudaMalloc or cudaFree can stall the
    stream); None without CUDA."""
    if not torch.cuda.is_available():
        return None
    stats = torch.cuda.memory_stats()
    counts = {k: stats.get(k, 0) for k in ("num_alloc_retries", "num_device_alloc", "num_device_free")}
    return counts | {
        "allocated_gib": torch.cuda.memory_allocated() / 2**30,
        "reserved_gib": torch.cuda.memory_reserved() / 2**30,
    }


def _during(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The allocator's driver calls during a call, and the memory it held when the call began."""
    memory = ("allocated_gib", "reserved_gib")
    return {k: after[k] - before[k] for k in before if k not in memory} | {k: round(before[k], 2) for k in memory}


def backend_flags() -> dict[str, object]:
    """torch's switches an import or a script may have set."""
    flags: dict[str, object] = {
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "grad_enabled_outside": torch.is_grad_enabled(),
    }
    if torch.cuda.is_available():
        c = torch.backends.cuda
        flags |= {
            "sdp_enabled": {
                "flash": c.flash_sdp_enabled(),
                "mem_efficient": c.mem_efficient_sdp_enabled(),
                "cudnn": c.cudnn_sdp_enabled(),
                "math": c.math_sdp_enabled(),
            },
            "matmul_allow_tf32": c.matmul.allow_tf32,
            "cudnn_version": torch.backends.cudnn.version(),
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "cudnn_deterministic": torch.backends.cudnn.deterministic,
        }
    return flags


class Window:
    """The profiler on over `STEPS` decode steps, from the end of the first: a forward pre-hook on the model's final
    norm, which the prefill, every decode step and every `LlamaDecoder` step run once."""

    STEPS = 8
    """Enough to see every kernel; few enough events to sum in a second (a whole 256-token decode of a 24-layer model
    is ~10^5 events: minutes of the profiler's Python)."""

    def __init__(self, cuda: bool):
        from torch.profiler import ProfilerActivity, profile

        self.cuda, self.calls, self.start, self.wall = cuda, 0, 0.0, None
        self.profiler = profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else []))

    def __call__(self, *_) -> None:
        self.calls += 1
        if self.calls == 2:
            self._sync()
            self.profiler.start()
            self.start = time.perf_counter()
        elif self.calls == 2 + self.STEPS:
            self.stop()

    def stop(self) -> None:
        if self.calls >= 2 and self.wall is None:
            self._sync()
            self.wall = time.perf_counter() - self.start
            self.profiler.stop()

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


def describe(backend, call):
    """Run `call()` (one `backend.generate`) with a few of its decode steps profiled: (its batch, what decided its
    speed)."""
    model = backend.model
    seen: list[str] = []

    def mask_of(_module, _args, kwargs):
        hidden = kwargs.get("hidden_states")
        if not seen and hidden is not None and hidden.shape[1] == 1:  # a decode step, not the prefill
            mask = kwargs.get("attention_mask")
            seen.append("none" if mask is None else f"{str(mask.dtype)[6:]} {list(mask.shape)}")

    attend = static_decode.sdpa_attention_forward

    def static_mask(module, query, key, value, attention_mask, **kwargs):  # StaticDecoder calls attention directly
        if not seen:
            mask = attention_mask
            seen.append("none" if mask is None else f"{str(mask.dtype)[6:]} {list(mask.shape)}")
        return attend(module, query, key, value, attention_mask, **kwargs)

    static_decode.sdpa_attention_forward = static_mask
    traced = sys.gettrace() is not None or sys.getprofile() is not None  # a tracer slows every Python call
    before = allocator()
    window = Window(backend.device.type == "cuda")
    hooks = [
        model.model.layers[0].self_attn.register_forward_pre_hook(mask_of, with_kwargs=True),
        model.model.norm.register_forward_pre_hook(window),
    ]
    try:
        batch = call()
    finally:
        static_decode.sdpa_attention_forward = attend
        window.stop()
        for hook in hooks:
            hook.remove()
    if window.wall is None:
        raise ValueError("the call decoded no step to profile (max_new_tokens 1?)")
    events = window.profiler.key_averages()
    sdpa = [e.key for e in events if "scaled_dot_product" in e.key and e.key != "aten::scaled_dot_product_attention"]
    top = [e.cpu_time_total for e in events if e.key == "aten::scaled_dot_product_attention"]
    device_us = sum(getattr(e, "self_device_time_total", 0) for e in events if e.device_type.name == "CUDA")
    return batch, {
        "dtype": str(next(model.parameters()).dtype)[6:],
        "attn_implementation": model.config._attn_implementation,
        "decode_path": _PATHS[pick_decoder(backend.decoder, backend.capture, backend.device.type, model)],
        "decode_mask": seen[0] if seen else "not seen (a decode step that builds no mask)",
        "padded_prompt_share": round(1 - float(batch.prompt_mask.float().mean()), 3),
        "sdpa_kernels": sorted(sdpa),
        "sdpa_share": round(top[0] / 1e6 / window.wall, 3) if top else 0.0,
        "gpu_busy": round(device_us / 1e6 / window.wall, 3) if window.cuda else None,
        "gradient_checkpointing": _checkpointing(model),
        "torch_threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "threads_alive": threads_alive(),
        "python_tracer": traced,
        "cuda_allocator": None if before is None else _during(before, allocator()),
        "os_threads": os_threads(),
        "flags": backend_flags(),
        "env": {k: os.environ[k] for k in ENV if k in os.environ},
        "profiled_steps_s": round(window.wall, 4),
    }


def _checkpointing(model) -> bool:
    on = getattr(model, "is_activation_checkpointing", None)  # transformers 5's name; the old one warns there
    return bool(on if on is not None else model.is_gradient_checkpointing)


def _peak_above(fn):
    """`fn` wrapped to record its peak device memory above what was allocated when it was called (CUDA only)."""
    peaks: list[float] = []

    def wrapped(*args, **kwargs):
        if not torch.cuda.is_available():
            return fn(*args, **kwargs)
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        try:
            return fn(*args, **kwargs)
        finally:
            torch.cuda.synchronize()
            peaks.append((torch.cuda.max_memory_allocated() - base) / 2**30)

    return wrapped, peaks


def main(out: Path, argv: list[str]) -> int:
    from harness.cli import main as harness
    from trainer.loop import Trainer
    from trainer.rollout.hf import TransformersBackend

    profile_call = int(os.environ.get("GPU_CHECK_PROFILE", "0"))
    generate = TransformersBackend.generate
    record: dict[str, object] = {"calls": [], "described": None}

    def probed(self, prompts, params, seed):
        calls = record["calls"]
        calls.append({"prompts": list(prompts), "params": asdict(params), "seed": seed, "threads": threads_alive()})
        if len(calls) != profile_call:
            return generate(self, prompts, params, seed)
        batch, record["described"] = describe(self, lambda: generate(self, prompts, params, seed))
        return batch

    TransformersBackend.generate = probed
    Trainer.update, record["update_peak_gib"] = _peak_above(Trainer.update)
    try:
        return harness(argv)
    finally:
        out.write_text(json.dumps(record))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(f"usage: {Path(__file__).name} OUT.json run CONFIG [--set KEY=VALUE ...]")
    sys.exit(main(Path(sys.argv[1]), sys.argv[2:]))
