"""PF-PPO's resampling (objective.pf_ppo_reweight) against verl's own function, on random batches, with the same draws.

    python benchmarks/pf_ppo_vs_verl.py [--cases 300] [--seed 0] [--verl-git DIR] [--verl-ref REF]

verl's `compute_pf_ppo_reweight_data` and the `compute_weights` inside it are read from a git copy of verl
(`git show REF:verl/trainer/ppo/core_algos.py`; by default the stored snapshot at /work/.mirror/volcengine+verl/repo,
whose text of the function is the verl 0.9.1 wheel's), cut out of the file with `ast` unchanged, written to a temporary
module beside the two imports they use (numpy, torch) and imported: the rest of core_algos.py needs verl's whole
package (omegaconf, its configs), which this check does not. The function takes a `DataProto`; a stand-in with the
three fields it reads (`batch`, a dict with a `batch_size`; `non_tensor_batch`; `meta_info`) is passed, its scores
on each response's last token as verl's reward managers place them, and a `row` column that says which response each
draw is.

Each case draws a method (pow with k in {0.5, 1, 2, 3} or drawn in (0, 4]; max_min; max_random), 1-64 responses and
their rewards (0/1, continuous, a few tied values, 0/1 plus DAPO's overlong punishment in [−1, 0], all equal), and a
seed: verl draws from torch's global generator after `torch.manual_seed(seed)`, harness from a `torch.Generator`
seeded the same, so the draws can be compared one by one. Prints, per method, the largest difference of the weights
(verl's `compute_weights` + 1e-8 clamped at 1e-8, as its caller) and the cases whose draws differ, with float64
rewards given to both and with verl given them in float32, as its trainers hold them; writes
results/benchmarks/pf_ppo_vs_verl.json. verl's max_min and max_random weights are float32 whatever the scores'
dtype (`torch.where` with Python constants): its 1 + 1e-8 rounds to 1 and its 0.4 is 0.4 + 6e-9, which is the size
of the weight differences there.
"""

from __future__ import annotations

import argparse
import ast
import copy
import importlib.util
import subprocess
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from _report import write_json

from trainer.objective import ObjectiveSettings, pf_ppo_resample, pf_ppo_weights

MIRROR = "/work/.mirror/volcengine+verl/repo"
SOURCE = "verl/trainer/ppo/core_algos.py"
METHODS = ("pow", "max_min", "max_random")
FAMILIES = ("binary", "continuous", "ties", "binary + overlong", "flat")


def load_verl(git_dir: str, ref: str) -> SimpleNamespace:
    """verl's `compute_pf_ppo_reweight_data` and its inner `compute_weights` (without its `torch.no_grad` decorator),
    from `ref` of the git copy at `git_dir`."""
    text = subprocess.run(
        ["git", "--git-dir", git_dir, "show", f"{ref}:{SOURCE}"], check=True, capture_output=True, text=True
    ).stdout
    outer = next(
        n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == "compute_pf_ppo_reweight_data"
    )
    inner = next(n for n in outer.body if isinstance(n, ast.FunctionDef) and n.name == "compute_weights")
    module = "\n\n".join(
        [
            "import numpy as np\nimport torch",
            ast.get_source_segment(text, outer, padded=False),
            "\n".join(line[4:] for line in ast.get_source_segment(text, inner, padded=True).splitlines()),
        ]
    )
    with tempfile.TemporaryDirectory(prefix="verl-pf-ppo-") as folder:
        path = Path(folder) / "verl_pf_ppo.py"
        path.write_text(module)
        spec = importlib.util.spec_from_file_location("verl_pf_ppo", path)
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
    return SimpleNamespace(resample=loaded.compute_pf_ppo_reweight_data, weights=loaded.compute_weights, module=module)


class _Batch(dict):
    """verl's TensorDict as its function uses it: items by key, built from a dict, with a settable batch_size."""


def _data(scores: torch.Tensor, lengths: np.ndarray) -> SimpleNamespace:
    """A DataProto stand-in: token-level scores [n, L] with each reward on its response's last token, the row ids."""
    n, width = scores.numel(), int(lengths.max())
    token_scores = torch.zeros(n, width, dtype=scores.dtype)
    token_scores[torch.arange(n), torch.from_numpy(lengths - 1)] = scores
    batch = _Batch({"token_level_scores": token_scores, "row": torch.arange(n)})
    batch.batch_size = torch.Size([n])
    uid = np.array([f"prompt{i // 4}" for i in range(n)], dtype=object)
    return SimpleNamespace(batch=batch, non_tensor_batch={"uid": uid}, meta_info={"global_steps": 1})


def _case(rng: np.random.Generator, family: str, method: str) -> tuple[torch.Tensor, float | None, int]:
    n = int(rng.integers(1, 65))
    if family == "binary":
        r = rng.integers(0, 2, n).astype(float)
    elif family == "continuous":
        r = rng.normal(size=n)
    elif family == "ties":
        r = rng.choice([-1.0, 0.0, 0.25, 0.5, 1.0], size=n)
    elif family == "binary + overlong":
        r = rng.integers(0, 2, n) + np.minimum(0.0, rng.uniform(-1.5, 1.0, n)).clip(-1.0)
    else:
        r = np.full(n, rng.choice([0.0, 1.0, 0.5]))
    k = float(rng.choice([0.5, 1.0, 2.0, 3.0, rng.uniform(0.01, 4.0)])) if method == "pow" else None
    return torch.from_numpy(r), k, int(rng.integers(0, 2**31))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--verl-git", default=MIRROR, help="a git directory of verl (a bare copy will do)")
    ap.add_argument("--verl-ref", default="HEAD", help="the commit or tag whose core_algos.py is read")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    verl = load_verl(args.verl_git, args.verl_ref)
    weight_diff = dict.fromkeys(METHODS, 0.0)
    draws_differ = dict.fromkeys(METHODS, 0)
    draws_differ_32 = dict.fromkeys(METHODS, 0)
    counts = dict.fromkeys(METHODS, 0)
    responses = dict.fromkeys(METHODS, 0)
    for i in range(args.cases):
        method, family = METHODS[i % 3], FAMILIES[(i // 3) % len(FAMILIES)]
        scores, k, seed = _case(rng, family, method)
        s = ObjectiveSettings.preset("grpo", pf_ppo_reweight=method, pf_ppo_weight_pow=k)
        theirs_w = torch.clamp(verl.weights(scores, method, k if k is not None else 2.0) + 1e-8, min=1e-8)
        weight_diff[method] = max(
            weight_diff[method], float((pf_ppo_weights(scores, s) - theirs_w.double()).abs().max())
        )
        lengths = rng.integers(1, 9, scores.numel())
        data = _data(scores, lengths)
        torch.manual_seed(seed)
        out = verl.resample(copy.deepcopy(data), method, k if k is not None else 2.0)
        theirs = out.batch["row"]
        ours = pf_ppo_resample(scores, s, torch.Generator().manual_seed(seed))
        assert torch.equal(out.batch["token_level_scores"].sum(-1), scores[theirs])  # verl moved whole rows
        draws_differ[method] += int(not torch.equal(ours, theirs))
        torch.manual_seed(seed)  # verl's trainers hold their scores in float32
        theirs_32 = verl.resample(_data(scores.float(), lengths), method, k if k is not None else 2.0).batch["row"]
        draws_differ_32[method] += int(not torch.equal(ours, theirs_32))
        counts[method] += 1
        responses[method] += scores.numel()
    head = ("method", "cases", "responses", "largest |weight diff.|", "other draws", "other draws (f32)")
    print(f"{head[0]:11} {head[1]:>5} {head[2]:>9} {head[3]:>22} {head[4]:>11} {head[5]:>17}")
    for m in METHODS:
        row = (counts[m], responses[m], weight_diff[m], draws_differ[m], draws_differ_32[m])
        print(f"{m:11} {row[0]:5d} {row[1]:9d} {row[2]:22.3g} {row[3]:11d} {row[4]:17d}")
    print(f"verl's code: {args.verl_git} at {args.verl_ref}, {SOURCE}")
    write_json(
        "pf_ppo_vs_verl",
        {
            "cases": args.cases,
            "seed": args.seed,
            "verl": {"git": args.verl_git, "ref": args.verl_ref, "file": SOURCE},
            "largest_weight_difference": weight_diff,
            "cases_with_other_draws": draws_differ,
            "cases_with_other_draws_verl_float32": draws_differ_32,
            "cases_by_method": counts,
            "responses_by_method": responses,
        },
    )


if __name__ == "__main__":
    main()
