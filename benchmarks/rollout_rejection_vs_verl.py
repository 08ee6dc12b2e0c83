"""The rollout rejection and the batch-normalised rollout weights against verl's own functions, on random cases.

    python benchmarks/rollout_rejection_vs_verl.py [--cases 300] [--seed 0] [--verl PATH]

harness's `objective.rollout_rejection` (`rollout_keep` in trainer/objective/rejection.py) against verl's
`compute_rollout_rejection_mask`, criterion by criterion, and `objective.rollout_correction` with
`rollout_correction_batch_normalize` (the weights of trainer/objective/masks.py divided by `rollout_weight_mean`)
against verl's `compute_rollout_correction_weights` with `rollout_is_batch_normalize=True` (and without, as a check
of the weights themselves), both in verl/trainer/ppo/rollout_corr_helper.py. verl's code is run, not transcribed:
that file and verl/utils/torch_functional.py (its `masked_sum` and `masked_mean`) are read out of a verl source into
a temporary folder and imported from there; what else they import is only named in type hints or never called here
(verl's `DataProto`, `RolloutCorrectionConfig`, `PolicyLossConfig`, its device helpers, tensordict's `TensorDict`)
and is replaced by empty stand-ins. `--verl` takes the released wheel (`pip download verl==0.9.1 --no-deps`) or a
git snapshot of the repository (default: the stored GitHub mirror, verl 0.8.0.dev at b178a3c, whose two functions
are 0.9.1's but for the IcePop weights, `"low_high"` thresholds, which it does not have: those modes are then
skipped and said so). Nothing of verl is copied into harness.

Each case: 1-8 responses of 1-40 tokens (some with no loss token, at least one token in the batch), log π_old −
log π_rollout drawn at one of four scales (0.02 to 1) with, in one case in five, a few outliers at ±25 (beyond verl's
clamp at ±20); thresholds drawn among the case's own statistics, so that most cases keep some and reject some; a k1
criterion gets a single threshold (lower = 1/upper) or a "low_high" pair. float64 throughout. Prints the tokens whose
verdict differs and the largest differences of the weights; writes results/benchmarks/rollout_rejection_vs_verl.json.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import subprocess
import sys
import tempfile
import types
import zipfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import write_json

from trainer.objective import ROLLOUT_CORRECTIONS, ROLLOUT_REJECTIONS, ObjectiveSettings, rollout_weight_mean
from trainer.objective.registry import RATIO_BAND_REJECTIONS
from trainer.objective.rejection import rollout_keep

MIRROR = Path("/work/.mirror/volcengine+verl/repo")
FILES = ("verl/trainer/ppo/rollout_corr_helper.py", "verl/utils/torch_functional.py")
D = torch.float64


# ---- verl, run from its own source ----------------------------------------------------------------------------------
def _read_sources(source: Path) -> tuple[dict[str, str], str]:
    """The text of `FILES` in `source` (a wheel, or a git directory's HEAD) and a line saying what was read."""
    if source.suffix == ".whl":
        with zipfile.ZipFile(source) as wheel:
            texts = {f: wheel.read(f).decode() for f in FILES}
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        return texts, f"{source.name} (sha256 {digest[:12]}…)"
    git = ["git", "-C", str(source)]
    texts = {
        f: subprocess.run([*git, "show", f"HEAD:{f}"], capture_output=True, text=True, check=True).stdout for f in FILES
    }
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True).stdout
    version = subprocess.run([*git, "show", "HEAD:verl/version/version"], capture_output=True, text=True).stdout
    return texts, f"git {source} at {commit.strip()} (verl {version.strip() or '?'})"


def _stand_in(name: str, **attrs: object) -> None:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module


def load_verl(source: Path) -> tuple[types.ModuleType, str]:
    """verl's rollout_corr_helper module imported from `source`, and what was read."""
    texts, what = _read_sources(source)
    root = Path(tempfile.mkdtemp(prefix="verl-src-"))
    for path, text in texts.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    for package in ("verl", "verl.utils", "verl.trainer", "verl.trainer.ppo"):  # the real files' folders
        _stand_in(package, __path__=[str(root / package.replace(".", "/"))])
    placeholder = type("NamedInTypeHintsOnly", (), {})
    for name in ("verl.trainer.config", "verl.workers", "verl.workers.config"):
        _stand_in(name, __path__=[])
    _stand_in("verl.protocol", DataProto=placeholder)
    _stand_in("verl.trainer.config.algorithm", RolloutCorrectionConfig=placeholder)
    _stand_in("verl.workers.config.actor", PolicyLossConfig=placeholder)
    _stand_in("verl.utils.device", get_device_name=lambda: "cpu", get_torch_device=lambda: torch.cpu)
    if importlib.util.find_spec("tensordict") is None:
        _stand_in("tensordict", TensorDict=placeholder)
    return importlib.import_module("verl.trainer.ppo.rollout_corr_helper"), what


# ---- random cases ---------------------------------------------------------------------------------------------------
def _case(rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(π_old's log-probs, the rollout engine's, the loss mask), [B, T]."""
    b, t = int(rng.integers(1, 9)), int(rng.integers(1, 41))
    lengths = rng.integers(0, t + 1, b)
    if lengths.sum() == 0:
        lengths[rng.integers(b)] = int(rng.integers(1, t + 1))
    mask = torch.tensor(np.arange(t)[None, :] < lengths[:, None], dtype=torch.long)
    log_r = rng.normal(0.0, rng.choice([0.02, 0.1, 0.3, 1.0]), (b, t))
    if rng.random() < 0.2:
        outliers = rng.random((b, t)) < 0.05
        log_r[outliers] = rng.choice([-25.0, 25.0], int(outliers.sum()))
    old = -np.abs(rng.normal(1.0, 1.0, (b, t)))
    return torch.tensor(old, dtype=D), torch.tensor(old - log_r, dtype=D), mask


def _statistics(name: str, old: torch.Tensor, rollout: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
    """The criterion's statistic on each loss token or scored response, for drawing thresholds among them only."""
    log_r = (old - rollout).clamp(-20, 20)
    k = {"k1": -log_r, "k2": 0.5 * log_r**2, "k3": log_r.exp() - 1 - log_r}[name[-2:]]
    m = mask.bool()
    if name.startswith("token"):
        return k[m].numpy()
    rows = m.any(-1)
    if name.startswith("seq_sum"):
        values = (k * m).sum(-1)
    elif name.startswith("seq_mean"):
        values = (k * m).sum(-1) / m.sum(-1).clamp(min=1)
    else:
        values = torch.where(m, k, torch.full_like(k, -torch.inf)).amax(-1)
    return values[rows].numpy()


def _thresholds(name: str, stats: np.ndarray, rng: np.random.Generator) -> tuple[float | None, float, str]:
    """(harness's low, high; verl's rollout_rs_threshold) drawn among `stats`, nudged off every value."""
    if name in RATIO_BAND_REJECTIONS:
        if rng.random() < 0.5:  # one threshold: the band [−log high, log high] of k1
            high = float(np.exp(np.quantile(np.abs(stats), rng.uniform(0.1, 0.9)) * (1 + 1e-6) + 1e-12))
            return None, high, repr(high)
        lo_q, hi_q = np.sort(rng.uniform(0.0, 1.0, 2))
        low = float(np.exp(np.quantile(stats, lo_q) - 1e-9))
        high = float(np.exp(np.quantile(stats, hi_q) + 1e-9))
        return low, high, f"{low!r}_{high!r}"
    high = float(np.quantile(stats, rng.uniform(0.1, 0.9)) * (1 + 1e-6) + 1e-15)
    return None, high, repr(high)


def compare_rejection(verl, rng: np.random.Generator, cases: int) -> dict[str, dict[str, float]]:
    out = {}
    for name in ROLLOUT_REJECTIONS.names():
        differing = tokens = mixed = 0
        rejected = []
        for _ in range(cases):
            old, rollout, mask = _case(rng)
            low, high, spec = _thresholds(name, _statistics(name, old, rollout, mask), rng)
            theirs, _ = verl.compute_rollout_rejection_mask(
                old - rollout, mask, rollout_rs=name, rollout_rs_threshold=spec
            )
            ours = rollout_keep(old, rollout, mask, name, low, high).long() * mask
            differing += int((ours != theirs).sum())
            tokens += int(mask.sum())
            share = 1 - float(ours.sum()) / int(mask.sum())
            rejected.append(share)
            mixed += 0 < share < 1
        out[name] = {
            "cases": cases,
            "tokens": tokens,
            "tokens_differing": differing,
            "cases_with_a_mix": mixed,
            "rejected_share_mean": float(np.mean(rejected)),
        }
    return out


MODES = {  # harness's rollout_correction → verl's rollout_is and whether the threshold is "low_high" (IcePop)
    "token_truncate": ("token", False),
    "sequence_truncate": ("sequence", False),
    "token_mask": ("token", True),
    "sequence_mask": ("sequence", True),
}


def compare_weights(verl, rng: np.random.Generator, cases: int) -> dict[str, dict[str, float | int | str]]:
    """Per mode, the largest absolute difference of the normalised weights and of the raw ones over every case; then,
    over the cases where no loss token's log r (for a response-level weight, no response's Σ log r) lies beyond
    verl's clamp at ±20, which otherwise moves that weight and through the batch mean every other, the largest
    absolute difference of the normalised weights and relative difference of the batch mean (verl's
    `rollout_is_batch_norm_factor`). A case where IcePop masks every weight is
    counted apart: verl's own metrics then divide by 0 (`compute_is_metrics`, its effective sample size)."""
    out: dict[str, dict[str, float | int | str]] = {}
    for mode, (level, icepop) in MODES.items():
        worst = {"normalised_abs": 0.0, "normalised_abs_within_clamp": 0.0, "raw_abs": 0.0, "mean_rel": 0.0}
        unscored = 0  # cases verl's own metrics cannot compute
        clamped = 0  # cases with a log r (token level) or Σ log r (response level) beyond ±20
        for k in range(cases):
            old, rollout, mask = _case(rng)
            low = float(np.exp(-rng.uniform(0.05, 2.0))) if icepop else None
            high = float(np.exp(rng.uniform(0.05, 2.0)))
            spec = f"{low!r}_{high!r}" if icepop else high
            s = ObjectiveSettings.preset(
                "grpo",
                rollout_correction=mode,
                rollout_correction_min=low,
                rollout_correction_max=high,
                rollout_correction_batch_normalize=True,
            )
            try:
                theirs, metrics = verl.compute_rollout_correction_weights(old - rollout, mask, level, spec, True)
                theirs_raw, _ = verl.compute_rollout_correction_weights(old - rollout, mask, level, spec, False)
            except ZeroDivisionError:  # verl's metrics: every weight masked, its effective sample size 1/0
                unscored += 1
                continue
            except (TypeError, ValueError) as error:
                if k == 0 and icepop:
                    out[mode] = {"skipped": f"this verl has no {level} IcePop weights ({type(error).__name__})"}
                    break
                raise
            m = mask.bool()
            raw = ROLLOUT_CORRECTIONS[mode](old, rollout, mask, low, high).expand(m.shape)
            mean = rollout_weight_mean(old, rollout, mask, s)
            ours = raw / mean
            log_r = torch.where(m, old - rollout, torch.zeros_like(old))
            if level == "sequence":
                log_r = log_r.sum(-1, keepdim=True).expand(m.shape)
            diff = (ours - theirs).abs()
            worst["normalised_abs"] = max(worst["normalised_abs"], float(diff[m].max()))
            worst["raw_abs"] = max(worst["raw_abs"], float((raw - theirs_raw)[m].abs().max()))
            if (log_r[m].abs() > 20).any():  # verl's clamp acts on this case (and through the mean on every weight)
                clamped += 1
                continue
            worst["normalised_abs_within_clamp"] = max(worst["normalised_abs_within_clamp"], float(diff[m].max()))
            factor = metrics.get("rollout_is_batch_norm_factor", 1.0)
            worst["mean_rel"] = max(worst["mean_rel"], abs(mean - factor) / factor)
        else:
            out[mode] = {"cases": cases - unscored, "verl_failed": unscored, "cases_beyond_clamp": clamped, **worst}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=300, help="random cases per criterion and per weight mode")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--verl", type=Path, default=MIRROR, help="verl's wheel, or a git directory (its HEAD)")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    verl, what = load_verl(args.verl)
    print(f"verl read from {what}")
    rejection = compare_rejection(verl, rng, args.cases)
    weights = compare_weights(verl, rng, args.cases)
    print(f"{'criterion':<12} {'cases':>5} {'mixed':>5} {'tokens':>7} {'differ':>6} {'rejected':>8}")
    for name, r in rejection.items():
        print(
            f"{name:<12} {r['cases']:>5} {r['cases_with_a_mix']:>5} {r['tokens']:>7} {r['tokens_differing']:>6} "
            f"{r['rejected_share_mean']:>8.3f}"
        )
    head = f"{'weights':<18} {'cases':>5} {'normalised abs':>14} {'beyond ±20':>10} {'the rest':>9} {'raw abs':>9}"
    print(f"\n{head} {'mean rel':>9}  note")
    for mode, w in weights.items():
        if "skipped" in w:
            print(f"{mode:<18} skipped: {w['skipped']}")
            continue
        note = f"  {w['verl_failed']} more where verl's metrics divide by 0" if w["verl_failed"] else ""
        print(
            f"{mode:<18} {w['cases']:>5} {w['normalised_abs']:>14.2e} {w['cases_beyond_clamp']:>10} "
            f"{w['normalised_abs_within_clamp']:>9.2e} "
            f"{w['raw_abs']:>9.2e} {w['mean_rel']:>9.2e}{note}"
        )
    write_json(
        "rollout_rejection_vs_verl", {"verl": what, "seed": args.seed, "rejection": rejection, "weights": weights}
    )


if __name__ == "__main__":
    main()
