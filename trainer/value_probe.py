"""POISE's value probe: each response's value predicted from the policy's own internal states, refit across RL steps.

Choi et al. 2026, Your Language Model is Its Own Critic: Reinforcement Learning with Value Estimation from Actor's
Internal States (POISE, arXiv 2605.07579), as the authors' release trains it (holi-lab/POISE: `src/poise/estimator.py`
`fit_estimator`, `src/poise/domain_estimator_bank.py` `DomainEstimatorBank.update`, `src/poise/trainer.py`
`_fit_with_tracking`). A response's features z are read from the policy that sampled it, before the update: the mean
hidden state of its prompt's last n tokens and that of its own last n tokens, both at one decoder layer
(`poise_depth`, `poise_pool_tokens`), and its mean token entropy at the sampling temperature. The probe g is
  PCA of each hidden state (`poise_pca_dims`) → standardise every feature → ridge regression (`poise_ridge_alpha`)
  → clip to `reward_range`,
fit in closed form, from scratch, on the newest `poise_buffer_rows` responses (whole prompt groups) with target
y_i = the mean reward of response i's siblings (`leave_one_out_targets`). Each step the advantage reads g from the
fit of the steps before (`ValueProbe.values`), and only then are the step's responses added and g refit
(`ValueProbe.observe`): the baseline never saw the rewards it is subtracted from. Before the first fit (the first
`poise_bootstrap_steps` steps) `values` hands the rewards themselves, so that the estimator's leave-one-out baseline
is RLOO's, the authors' scratch bootstrap.

The probe is no part of the policy: its features are read under `torch.no_grad()` and it has no parameter an optimiser
steps, so it changes the policy's gradient only through the advantage. Nothing is random (an exact SVD where the
authors' sklearn PCA is randomized with a seed), so it needs no seed. A run does not checkpoint the trainer's state,
so the probe's is not saved either; it lives as long as the run.

Departs from the authors' release: one probe for the whole task where they keep one per domain (math, code, other);
of their three entropy features (the whole output's, the <think> part's and the answer's mean token entropy) only the
whole output's, since a split needs the reasoning format's tags; the features come from an extra forward pass of the
kept responses (theirs come free with the old log-probabilities); their optional warm-start from saved probes is not
built (the scratch bootstrap is their default).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import torch

from trainer import metric_names as M
from trainer.objective import leave_one_out_targets, token_entropy
from trainer.objective.settings import ObjectiveSettings


@dataclass(frozen=True)
class ProbeFeatures:
    """What the probe reads of N responses: `prompt` and `response` [N, H], the mean hidden state of the prompt's and
    of the response's last n tokens at the probe's layer; `entropy` [N], the response's mean token entropy."""

    prompt: torch.Tensor
    response: torch.Tensor
    entropy: torch.Tensor

    def __len__(self) -> int:
        return self.entropy.shape[0]

    @staticmethod
    def gather(parts: list[tuple[torch.Tensor, ProbeFeatures]], n: int) -> ProbeFeatures:
        """The features of rows 0..n−1 from `parts`, each (its rows, their features)."""
        first = parts[0][1]
        out = ProbeFeatures(
            first.prompt.new_zeros((n, first.prompt.shape[1])),
            first.response.new_zeros((n, first.response.shape[1])),
            first.entropy.new_zeros(n),
        )
        for rows, f in parts:
            rows = rows.cpu()
            out.prompt[rows], out.response[rows], out.entropy[rows] = f.prompt, f.response, f.entropy
        return out

    @staticmethod
    def cat(parts: list[ProbeFeatures]) -> ProbeFeatures:
        return ProbeFeatures(
            torch.cat([p.prompt for p in parts]),
            torch.cat([p.response for p in parts]),
            torch.cat([p.entropy for p in parts]),
        )


def probe_layer(depth: float, layers: int) -> int:
    """The index in a model's `hidden_states` (0 = the embeddings, k = decoder layer k's output) that `poise_depth`
    names: round(depth × layers), at least 1."""
    return max(1, round(depth * layers))


def read_features(
    model: torch.nn.Module,
    ids: torch.Tensor,
    attn: torch.Tensor,
    prompt_len: int,
    width: int,
    depth: float,
    pool: int,
    temperature: float,
) -> ProbeFeatures:
    """The probe's features of the rows of `ids` [n, P + width]: prompts left-padded to P = `prompt_len` columns,
    responses right-padded to `width` (`attn` marks the real tokens). One forward with `output_hidden_states`; the
    hidden states of the layer `probe_layer(depth, layers)`, mean-pooled over the prompt's last `pool` tokens and over
    the response's last `pool` (zeros for an empty response), and the response tokens' mean entropy at `temperature`
    (0 for an empty response). On the host, in float32. Call it under `torch.no_grad()`."""
    pos = (attn.cumsum(1) - 1).clamp(min=0)
    out = model(
        input_ids=ids, attention_mask=attn, position_ids=pos, output_hidden_states=True, logits_to_keep=width + 1
    )
    hidden = out.hidden_states[probe_layer(depth, len(out.hidden_states) - 1)].float()
    P = prompt_len
    cols = torch.arange(P + width, device=ids.device)
    in_prompt = attn[:, :P].bool() & (cols[:P] >= P - pool)
    in_response = attn[:, P:].bool()
    n_response = in_response.sum(1, keepdim=True)
    last_response = in_response & (cols[None, :width] >= n_response - pool)

    def pooled(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        w = mask.to(h.dtype)
        return (h * w[..., None]).sum(1) / w.sum(1, keepdim=True).clamp(min=1)

    logits = out.logits[:, :-1, :].float() / temperature
    entropy = (token_entropy(logits) * in_response).sum(1) / n_response[:, 0].clamp(min=1)
    return ProbeFeatures(
        pooled(hidden[:, :P], in_prompt).cpu(), pooled(hidden[:, P:], last_response).cpu(), entropy.float().cpu()
    )


@dataclass(frozen=True)
class _Projection:
    """x ↦ (x − mean) Cᵀ, C the top principal directions [k, H]; or x itself when `components` is None."""

    mean: torch.Tensor | None
    components: torch.Tensor | None

    @staticmethod
    def fit(x: torch.Tensor, dims: int) -> _Projection:
        """PCA of the rows of `x` to min(dims, rows, columns) components (the authors' `fit_pca`); dims 0 = none."""
        if dims == 0:
            return _Projection(None, None)
        mean = x.mean(0)
        _, _, vh = torch.linalg.svd(x - mean, full_matrices=False)
        return _Projection(mean, vh[: min(dims, *x.shape)])

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.components is None:
            return x
        assert self.mean is not None
        return (x - self.mean) @ self.components.T


@dataclass(frozen=True)
class ProbeFit:
    """One fit of the probe: g(z) = clip(((φ(z) − μ) / σ)·w + b, low, high), φ(z) = [PCA_p(prompt), PCA_r(response),
    entropy], μ and σ the features' mean and population std over the fit's rows (σ = 1 where a feature is
    constant), w the ridge solution and b the targets' mean."""

    prompt: _Projection
    response: _Projection
    mu: torch.Tensor
    sigma: torch.Tensor
    weight: torch.Tensor
    intercept: float
    low: float
    high: float

    def _features(self, f: ProbeFeatures) -> torch.Tensor:
        x = torch.cat(
            [self.prompt(f.prompt.double()), self.response(f.response.double()), f.entropy.double()[:, None]], 1
        )
        return (x - self.mu) / self.sigma

    def predict(self, f: ProbeFeatures) -> torch.Tensor:
        """g(z) of each response of `f`, [N] float64."""
        return (self._features(f) @ self.weight + self.intercept).clamp(self.low, self.high)


def fit_probe(
    f: ProbeFeatures, targets: torch.Tensor, pca_dims: tuple[int, int], alpha: float, clip: tuple[float, float]
) -> ProbeFit:
    """The probe fit to `targets` [N] on features `f`, in float64: each hidden state projected on its principal
    directions (`pca_dims`, 0 = none), every feature standardised over the rows, then ridge regression with an
    intercept, w = (ZᵀZ + αI)⁻¹ Zᵀ(y − ȳ), b = ȳ (Z has zero column means, so this is sklearn's Ridge on Z: the
    authors' StandardScaler → Ridge(alpha) pipeline); predictions clipped to `clip`."""
    y = targets.double()
    prompt = _Projection.fit(f.prompt.double(), pca_dims[0])
    response = _Projection.fit(f.response.double(), pca_dims[1])
    x = torch.cat([prompt(f.prompt.double()), response(f.response.double()), f.entropy.double()[:, None]], 1)
    mu, sigma = x.mean(0), x.std(0, unbiased=False)
    sigma = torch.where(sigma > 0, sigma, torch.ones_like(sigma))
    z = (x - mu) / sigma
    ybar = y.mean()
    gram = z.T @ z + alpha * torch.eye(z.shape[1], dtype=z.dtype)
    weight = torch.linalg.solve(gram, z.T @ (y - ybar))
    return ProbeFit(prompt, response, mu, sigma, weight, float(ybar), clip[0], clip[1])


class ValueProbe:
    """The probe across RL steps, owned by the `Trainer` when the advantage reads values (`needs_values`): a buffer
    of the newest responses' features and targets, and the fit of the steps so far (None during the bootstrap)."""

    def __init__(self, s: ObjectiveSettings):
        assert s.poise_depth is not None and s.poise_pool_tokens is not None and s.poise_pca_dims is not None
        assert s.poise_ridge_alpha is not None and s.poise_buffer_rows is not None
        assert s.poise_bootstrap_steps is not None and s.reward_range is not None
        self.depth, self.pool = s.poise_depth, s.poise_pool_tokens
        self.pca_dims, self.alpha = s.poise_pca_dims, s.poise_ridge_alpha
        self.max_rows, self.bootstrap_steps, self.clip = s.poise_buffer_rows, s.poise_bootstrap_steps, s.reward_range
        self.groups: deque[tuple[ProbeFeatures, torch.Tensor]] = deque()
        """The buffer: (features, targets) of one prompt group each, oldest first."""
        self.rows = 0
        self.fit: ProbeFit | None = None

    @classmethod
    def of(cls, s: ObjectiveSettings) -> ValueProbe | None:
        """The probe an advantage that reads values needs (POISE's), else None."""
        return cls(s) if s.needs_values else None

    def values(self, f: ProbeFeatures, rewards: torch.Tensor) -> torch.Tensor:
        """[groups, G] values of the step's responses (`f` in their order, `rewards` [groups, G]): the current fit's
        predictions, or the rewards themselves before the first fit (so that the leave-one-out baseline is RLOO's)."""
        if self.fit is None:
            return rewards.clone()
        return self.fit.predict(f).to(rewards.dtype).view(rewards.shape)

    def observe(
        self, step: int, f: ProbeFeatures, rewards: torch.Tensor, values: torch.Tensor, advantages: torch.Tensor
    ) -> dict[str, float]:
        """After step `step`'s advantages: the probe's metrics of this step (its predictions `values` against their
        targets, made before it saw them), then the step's groups into the buffer (the oldest groups out past
        `max_rows`) and, from step `bootstrap_steps` on, a refit."""
        targets = leave_one_out_targets(rewards)
        metrics = self._metrics(rewards, values, targets, advantages)
        G = rewards.shape[1]
        for g in range(rewards.shape[0]):
            rows = slice(g * G, (g + 1) * G)
            self.groups.append((ProbeFeatures(f.prompt[rows], f.response[rows], f.entropy[rows]), targets[g]))
            self.rows += G
        while self.rows > self.max_rows:
            self.rows -= len(self.groups.popleft()[0])
        if step >= self.bootstrap_steps and self.groups:
            buffered = ProbeFeatures.cat([g[0] for g in self.groups])
            self.fit = fit_probe(buffered, torch.cat([g[1] for g in self.groups]), self.pca_dims, self.alpha, self.clip)
        metrics[M.POISE_BUFFER_ROWS] = float(self.rows)
        return metrics

    def _metrics(
        self, rewards: torch.Tensor, values: torch.Tensor, targets: torch.Tensor, advantages: torch.Tensor
    ) -> dict[str, float]:
        r, a = rewards.double().flatten(), advantages.double().flatten()
        out = {M.POISE_PROBE_FITTED: float(self.fit is not None)}
        if r.var(unbiased=False) > 0:  # the advantage's variance against REINFORCE's without a baseline (A = R)
            out[M.POISE_ADV_VAR_RATIO] = (a.var(unbiased=False) / r.var(unbiased=False)).item()
        if self.fit is not None:  # the probe's own out-of-sample error on its targets (before this step's refit)
            v, y = values.double().flatten(), targets.double().flatten()
            out[M.POISE_VALUE_ABS_ERR] = (v - y).abs().mean().item()
            if y.var(unbiased=False) > 0:
                out[M.POISE_VALUE_EXPLAINED_VAR] = (1 - (v - y).square().mean() / y.var(unbiased=False)).item()
        return out
