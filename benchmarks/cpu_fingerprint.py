"""Which library makes two CPUs part on the pinned path: each operation a toy step runs, hashed, per configuration.

    python benchmarks/cpu_fingerprint.py                       # this machine, every configuration, and the cost
    python benchmarks/cpu_fingerprint.py --against docs/cpu_fingerprints/AuthenticAMD-25-17.json
    python benchmarks/cpu_fingerprint.py --write-reference docs/cpu_fingerprints/VENDOR-FAMILY-MODEL.json

Each configuration runs in a fresh process (torch and MKL read their variables once). In it, every operation a
toy training step computes is run on fixed inputs at the toy's shapes and its output hashed (sha256 of the bytes):
MKL's GEMMs (a linear layer forward and its weight gradient, the attention's batched products), torch's own
vectorised kernels (softmax, log-softmax, exp, SiLU, RMS norm, a sum), the AdamW step, seeded multinomial sampling,
glibc's libm (Python's `math` on 10,000 values), and the shipped toy's forward and backward and a greedy decode
as a whole. It also reads the CNR branch MKL reports it ran (`MKL_VERBOSE`'s `CNR:` field), and times the toy's
forward and backward on 64 × 120 tokens and a 40-token greedy decode of 32 rows (1 thread, median of 5; every
configuration `--rounds` times, interleaved, each ratio taken within a round), so that the table is also the
pin's cost. `--against` compares each configuration here with the same one in a reference
written on another machine (`--write-reference`), operation by operation: the rows that differ name the library
that parts, and the columns say which configuration gives the same bits on both machines.
Writes results/benchmarks/cpu_fingerprint.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from _report import write_json

from trainer.cpu_path import PINNED

ROOT = Path(__file__).resolve().parents[1]
CHILD = r"""
import hashlib, json, math, re, statistics, sys, time
import torch
import torch.nn.functional as F
from trainer.models.fingerprint import Machine
from trainer.models.load import load_policy
from trainer.models.toy import ToyModelConfig, shipped_toy_model

torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
def rand(*shape):
    return torch.randn(*shape, generator=g)
def h(t):
    t = t.detach().contiguous() if isinstance(t, torch.Tensor) else torch.tensor(t, dtype=torch.float64)
    return hashlib.sha256(t.numpy().tobytes()).hexdigest()[:16]

ops = {}
x, w, grad = rand(64 * 120, 64), rand(192, 64), rand(64 * 120, 192)
ops["MKL sgemm: linear 7680x64 . 64x192"] = h(F.linear(x, w))
ops["MKL sgemm: weight gradient 192x7680 . 7680x64"] = h(grad.t() @ x)
q, k = rand(64, 4, 120, 16), rand(64, 4, 120, 16)
ops["MKL batched sgemm: attention scores 120x16 . 16x120"] = h(q @ k.transpose(-1, -2))
logits = rand(64 * 120, 47) * 3
ops["torch: softmax"] = h(torch.softmax(logits, -1))
ops["torch: log_softmax"] = h(torch.log_softmax(logits, -1))
ops["torch: exp"] = h(torch.exp(logits))
ops["torch: exp, 7 values (scalar tail)"] = h(torch.exp(logits[0, :7]))
ops["torch: silu"] = h(F.silu(x))
ops["torch: rms norm"] = h(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
ops["torch: sum of 491,520 values"] = h(x.sum())
p = torch.nn.Parameter(rand(192, 64))
opt = torch.optim.AdamW([p], lr=1e-3)
for _ in range(3):
    p.grad = rand(192, 64)
    opt.step()
ops["torch: AdamW, 3 steps"] = h(p)
ops["torch: multinomial, seeded"] = h(
    torch.multinomial(torch.softmax(logits[:512], -1), 1, generator=torch.Generator().manual_seed(1)).double()
)
vals = [i / 997.0 - 5.0 for i in range(10000)]
ops["glibc libm: exp, log1p, tanh, pow"] = h(
    [math.exp(v) + math.log1p(abs(v)) + math.tanh(v) + math.pow(abs(v), 1.37) for v in vals]
)

path = shipped_toy_model(ToyModelConfig())
policy, tok = load_policy(str(path), torch.device("cpu"))
ids = torch.randint(3, 47, (64, 120), generator=torch.Generator().manual_seed(2))
def fwd_bwd():
    policy.zero_grad(set_to_none=True)
    out = policy(input_ids=ids).logits
    loss = torch.logsumexp(out, -1).mean()
    loss.backward()
    return out
out = fwd_bwd()
ops["the toy: forward (logits)"] = h(out)
ops["the toy: backward (every gradient)"] = h(torch.cat([q.grad.flatten() for q in policy.parameters()]))
prompts = ids[:32, :12]
def decode():
    with torch.no_grad():
        return policy.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=40,
                               min_new_tokens=40, do_sample=False, pad_token_id=0)
ops["the toy: greedy decode, 32 x 40 tokens"] = h(decode().double())

def timed(fn, n):
    times = []
    for _ in range(n):
        t = time.perf_counter(); fn(); times.append(time.perf_counter() - t)
    return statistics.median(times)
with torch.backends.mkl.verbose(torch.backends.mkl.VERBOSE_ON):
    torch.mm(rand(8, 8), rand(8, 8))
print(json.dumps({"machine": Machine.here().__dict__, "ops": ops, "fwd_bwd_s": timed(fwd_bwd, 5),
                  "decode_s": timed(decode, 5)}))
"""
KNOBS = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")
CONFIGS = {
    "pinned (harness's default): torch AVX2, MKL_CBWR=AVX2,STRICT": dict(PINNED),
    "torch AVX2, MKL_CBWR=AUTO,STRICT": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AUTO,STRICT"},
    "torch AVX2, MKL without CNR (MKL_CBWR=OFF)": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "OFF"},
    "torch AVX2, MKL_CBWR=COMPATIBLE": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"},
    "torch's own path, MKL without CNR": {"ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "OFF"},
    "torch DEFAULT, MKL_CBWR=AVX2,STRICT": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "AVX2,STRICT"},
}
"""Configurations by name: the variables of `KNOBS` each sets (the rest are unset; `trainer`'s pin sets only
what is unset, so each names both of its variables). torch takes the best path it has at or below the one asked."""


def run(env: dict[str, str]) -> dict:
    """One configuration in a fresh process: its machine, each operation's hash, timings and MKL's branch."""
    full = {k: v for k, v in os.environ.items() if k not in KNOBS}
    out = subprocess.run(
        [sys.executable, "-c", CHILD], env={**full, **env}, capture_output=True, text=True, cwd=ROOT, check=True
    )
    lines = out.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    cnr = [part[4:] for line in lines if line.startswith("MKL_VERBOSE") for part in line.split() if part[:4] == "CNR:"]
    result["mkl_branch"] = cnr[-1] if cnr else "not reported"
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", type=Path, help="a reference this script wrote on another machine")
    ap.add_argument("--write-reference", type=Path, help="write this machine's fingerprints there")
    ap.add_argument("--rounds", type=int, default=3, help="each configuration this many times, interleaved")
    args = ap.parse_args()
    load = os.getloadavg()
    rounds = [{name: run(env) for name, env in CONFIGS.items()} for _ in range(args.rounds)]
    after = os.getloadavg()
    results = rounds[0]
    for name in CONFIGS:  # the same process twice must give the same bits, or nothing here means anything
        if any(r[name]["ops"] != results[name]["ops"] for r in rounds):
            sys.exit(f"cpu_fingerprint: {name}: two runs of the same configuration gave other bits")
    ratio = {  # each round's time over the pinned configuration's in the same round, then the median of rounds
        (name, key): statistics.median(r[name][key] / r[next(iter(CONFIGS))][key] for r in rounds)
        for name in CONFIGS
        for key in ("fwd_bwd_s", "decode_s")
    }
    names = list(results)
    pinned = results[names[0]]
    m = pinned["machine"]
    print(
        f"{m['cpu_model']} ({m['cpu_vendor']} family/model {m['cpu_family']}), torch {m['torch_version']}, 1 thread; "
        f"load before {load[0]:.2f}, after {after[0]:.2f}"
    )
    print("\nEach operation's output against the pinned configuration's (= same bits, x differs):")
    short = [f"({i})" for i in range(1, len(names) + 1)]
    for s, n in zip(short, names):
        r = results[n]
        print(f"  {s} {n}: torch {r['machine']['cpu_capability']}, MKL ran CNR:{r['mkl_branch']}")
    width = max(len(op) for op in pinned["ops"])
    print(f"{'operation':{width}} " + " ".join(f"{s:>4}" for s in short))
    for op, digest in pinned["ops"].items():
        marks = ["=" if results[n]["ops"][op] == digest else "x" for n in names]
        print(f"{op:{width}} " + " ".join(f"{c:>4}" for c in marks))
    print(
        f"\nThe cost (1 thread; each time the median of 5 in a process, then of {args.rounds} interleaved rounds; "
        "the ratio to the pinned configuration in the same round, median of rounds):"
    )
    print(f"{'configuration':64} {'fwd+bwd s':>9} {'ratio':>6} {'decode s':>9} {'ratio':>6}")
    for n in names:
        fb, dec = (statistics.median(r[n][k] for r in rounds) for k in ("fwd_bwd_s", "decode_s"))
        print(f"{n:64} {fb:9.3f} {ratio[n, 'fwd_bwd_s']:6.2f} {dec:9.3f} {ratio[n, 'decode_s']:6.2f}")
    compared = None
    if args.against:
        ref = json.loads(args.against.read_text())
        rm = ref["machine"]
        print(
            f"\nEach configuration here against the same one in {args.against} ({rm['cpu_model']}, "
            f"{rm.get('cpu_vendor', '?')} family/model {rm.get('cpu_family', '?')}, torch {rm['torch_version']}):"
        )
        theirs = [n for n in names if n in ref["configs"]]
        print(f"{'operation':{width}} " + " ".join(f"{short[names.index(n)]:>4}" for n in theirs))
        compared = {
            n: {op: results[n]["ops"].get(op) == digest for op, digest in ref["configs"][n]["ops"].items()}
            for n in theirs
        }
        for op in pinned["ops"]:
            print(f"{op:{width}} " + " ".join(f"{'=' if compared[n].get(op) else 'x':>4}" for n in theirs))
        for n in theirs:
            print(f"  {short[names.index(n)]} MKL ran CNR:{results[n]['mkl_branch']} here, "
                  f"CNR:{ref['configs'][n]['mkl_branch']} there")  # fmt: skip
    if args.write_reference:
        args.write_reference.parent.mkdir(parents=True, exist_ok=True)
        configs = {n: {"env": CONFIGS[n], "mkl_branch": r["mkl_branch"], "ops": r["ops"]} for n, r in results.items()}
        text = json.dumps({"machine": m, "configs": configs}, indent=1, sort_keys=True)
        args.write_reference.write_text(text + "\n")
        print(f"wrote {args.write_reference}")
    write_json(
        "cpu_fingerprint",
        {
            "load_before": load,
            "load_after": after,
            "configs": CONFIGS,
            "rounds": rounds,
            "ratios": {f"{n} · {k}": v for (n, k), v in ratio.items()},
            "against": compared,
        },
    )


if __name__ == "__main__":
    main()
