"""benchmarks/gpu_check.py's table: each figure with what decides it, then every factor side by side."""

from __future__ import annotations

import json
import statistics

from benchmarks._decode_probe import Window
from trainer import metric_names as M


def settled(values: list[float | None]) -> float:
    """The median of the second half of a run's values, the last (profiled) left out: a run's first steps share the
    CPU with its grading helper's start (~2 s of CPU importing sympy and math-verify, in its own process)."""
    return statistics.median(v for v in values[len(values) // 2 : -1] if v is not None)


def peak(gib: list[float | None] | None) -> str:
    """An update's peak memory above what was allocated before it: the largest after the first update (which
    allocates the optimiser's state)."""
    if not gib or gib[0] is None:
        return "n/a on CPU"
    return f"+{max(gib[1:] or gib):.1f} GiB"


def decided(f: dict) -> str:
    """A decode's factors in one line."""
    kernels = ", ".join(k.removeprefix("aten::_scaled_dot_product_") for k in f["sdpa_kernels"]) or "none seen"
    busy = "" if f["gpu_busy"] is None else f", GPU busy {f['gpu_busy']:.0%}"
    return (
        f"{f['dtype']}, {f['attn_implementation']}, mask {f['decode_mask']}, SDPA {kernels} "
        f"({f['sdpa_share']:.0%} of {Window.STEPS} steps){busy}, {f['torch_threads']} torch threads, "
        f"threads alive: {', '.join(f['threads_alive'])}"
    )


def factor_rows(columns: list[dict]) -> list[tuple[str, list[str], bool]]:
    """(factor, its value in each column, whether they differ) for every factor `_decode_probe.describe` reads."""
    env = sorted({k for f in columns for k in f["env"]})
    flat = [
        {k: v for k, v in f.items() if k not in ("flags", "env", "profiled_steps_s")}
        | f["flags"]
        | {f"${k}": f["env"].get(k, "(unset)") for k in env}
        for f in columns
    ]
    rows = []
    for key in flat[0]:
        values = [v if isinstance(v := f.get(key), str) else json.dumps(v) for f in flat]
        rows.append((key, values, len(set(values)) > 1))
    return rows


def rows(r: dict) -> list[tuple[str, str, str]]:
    """(what, figure, what decides it) for each figure of the report."""
    a, run, history, config = r["args"], r["run"], r["run"]["metrics"], r["run"]["config"]
    in_run, bare = settled(history[M.DECODE_STEP_S]), settled(r["bare"]["per_step_s"])
    shape = f"{a['prompts']} x {a['group']} responses, <= {a['new_tokens']} new tokens"
    out = [
        ("harness run", f"{run['status']}, {a['steps']} steps, {r['stages_s']['harness run']:.1f} s", shape),
        ("decode / token step, in the run", f"{1000 * in_run:.2f} ms", decided(run["factors"])),
        ("decode / token step, bare", f"{1000 * bare:.2f} ms", decided(r["bare"]["factors"])),
        (
            "  the same, prompts of one length",
            f"{1000 * settled(r['bare_equal']['per_step_s']):.2f} ms",
            decided(r["bare_equal"]["factors"]),
        ),
        ("in the run / bare", f"{in_run / bare:.2f}x", "the factors below that differ"),
        ("generate, in the run", f"{settled(history[M.GENERATE_S]):.3f} s/step", "the decode, then grading"),
        (
            "update, in the run",
            f"{settled(history[M.UPDATE_S]):.3f} s, peak {peak(run['update_peak_gib'])}",
            f"{r['dtype']}, gradient checkpointing, micro-batch {config['train.micro_batch_size']}, "
            f"{config['train.length_buckets']} length buckets",
        ),
        (
            "harness eval",
            f"accuracy {r['eval']['accuracy']:.2f}, {r['stages_s']['harness eval']:.1f} s",
            f"{r['eval']['problems']} MATH-500 problems, {r['dtype']}, greedy, <= {a['new_tokens']} new tokens, "
            "random weights",
        ),
    ]
    t = r["vs_trl"]
    if t is None:
        out.append(("vs_trl", "skipped: no TRL", 'pip install -c constraints-cpu.txt -e ".[bench]"'))
    else:
        h, trl = t["harness"], t["trl"]
        out.append(
            (
                "vs_trl: step harness / TRL",
                f"{h['step_s']:.3f} / {trl['step_s']:.3f} s = {t['ratio']:.2f}",
                f"update {h['update_s']:.3f} / {trl['update_s']:.3f} s, peak {peak([h['update_peak_gib']])} / "
                f"{peak([trl['update_peak_gib']])}; both {t['dtype']}, checkpointing {t['gradient_checkpointing']}; "
                f"harness micro-batch {t['micro_batch_size']}, TRL {trl['version']} the whole batch",
            )
        )
    out.append(("whole check", f"{r['wall_s']:.1f} s", f"limit {a['time_limit']:.0f} s"))
    return out


def print_table(r: dict) -> None:
    a, m = r["args"], r["machine"]
    print(
        f"gpu_check --size {a['size']} --device {a['device']}: {m['hardware']}, {r['parameters'] / 1e6:.1f}M "
        f"parameters; CPU {m['cpu']}; torch {m['torch']}, transformers {m['transformers']}; "
        f"load {m['load_before'][0]:.2f} -> {m['load_after'][0]:.2f}; {m['when']}"
    )
    table = rows(r)
    what, figure = max(len(row[0]) for row in table), max(len(row[1]) for row in table)
    for name, value, why in table:
        print(f"{name:{what}}  {value:{figure}}  {why}")
    columns = {
        "in the run": r["run"]["factors"],
        "bare": r["bare"]["factors"],
        "one length": r["bare_equal"]["factors"],
    }
    print(f"\nwhat decides the decode (* where they differ): {' | '.join(columns)}")
    for key, values, differs in factor_rows(list(columns.values())):
        print(f"{'*' if differs else ' '} {key}: {' | '.join(values)}")
