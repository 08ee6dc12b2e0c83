"""DAPO (arXiv 2503.14476, Fig. 2): entropy collapses without clip-higher; GSPO (arXiv 2507.18071,
Fig. 2): sequence-level clipping clips far more than token-level, yet learns better."""

import streamlit as st

from dashboard import page
from harness.analysis import figures
from harness.runs.sweep_data import arm_setting, updates_per_batch
from trainer import metric_names as M

data, kw, x = page.curve_page("Entropy & clipping (DAPO, GSPO)", "ent", "entropy_clipping")

lo, hi = arm_setting(data, "objective.clip_low"), arm_setting(data, "objective.clip_high")
st.caption(
    "Clip range per arm: "
    + "; ".join(f"{kw['labels'](a)}: [1-{lo.get(a, '?')}, 1+{hi.get(a, '?')}]" for a in data.arms)
)
st.plotly_chart(
    figures.curves_by_arm([("policy entropy (token mean)", data.by_arm(M.ENTROPY, x))], data.arms, **kw),
    key="ent_entropy",
)
st.subheader("Clip fractions")
steps = updates_per_batch(data)
on_policy = [a for a in data.arms if steps.get(a) == 1]
if on_policy:
    who = "Every arm takes" if len(on_policy) == len(data.arms) else ", ".join(map(kw["labels"], on_policy)) + " take"
    st.info(
        f"{who} one optimiser step per rollout batch (`train.mini_batches` × `train.epochs` = 1): the policy that "
        "sampled is the one updated, every ratio is 1, and nothing is clipped, by construction; their clip "
        "fractions are 0. Clipping acts only off-policy: `gspo_vs_grpo.yaml` and `clip_higher_entropy.yaml` take "
        "4 steps per batch."
    )
st.plotly_chart(
    figures.curves_by_arm(
        [
            ("low (r < 1-ε_low, A<0)", data.by_arm(M.CLIP_FRAC_LOW, x)),
            ("high (r > 1+ε_high, A>0)", data.by_arm(M.CLIP_FRAC_HIGH, x)),
            ("total", data.by_arm(M.CLIP_FRAC, x)),
        ],
        data.arms,
        fit_y=True,
        **kw,
    ),
    key="ent_clip",
)
st.subheader("Importance ratios")
page.curves(
    [
        ("largest ratio r = π/π_old in the step", M.RATIO_MAX),
        ("mean ratio", M.RATIO_MEAN),
        ("smallest ratio", M.RATIO_MIN),
    ],
    data,
    kw,
    x,
    "ent_ratios",
    fit_y=True,
)
st.caption(
    "Over the step's loss tokens (per response under a sequence ratio), before clipping. GMPO (arXiv 2507.20673) "
    "claims its geometric mean keeps the ratio in a steadier range than GRPO's arithmetic mean (`opo_gmpo.yaml` "
    "judges it on `policy/ratio_max`); on-policy arms (one optimiser step per batch) stay at 1."
)
page.method_panels(
    [
        page.MethodPanel(
            "Entropy-keeping switches (Clip-Cov, KL-Cov, the entropy bonus, the 80/20 rule)",
            (M.COV_SELECTED_FRAC, M.ENTROPY_COEF, M.ENTROPY_TRAINED),
            [
                ("loss tokens Clip-Cov cut or KL-Cov penalised", M.COV_SELECTED_FRAC),
                ("entropy bonus coefficient applied", M.ENTROPY_COEF),
                ("entropy of the trained tokens", M.ENTROPY_TRAINED),
            ],
            "ent_cov",
            "Clip-Cov and KL-Cov (`objective.clip_cov_ratio`, `objective.kl_cov_ratio`; arXiv 2505.22617) act on the "
            "tokens picked by the covariance of log π and A (`policy/cov_selected_frac`); the entropy bonus "
            "(`objective.entropy_coef`, adaptive with `objective.entropy_target` as in Skywork-OR1) subtracts β·H of "
            "the trained tokens (`policy/entropy_coef`, β as applied); `objective.top_entropy_quantile` (the 80/20 "
            "rule) trains only the highest-entropy tokens. `policy/entropy_trained`: the entropy of the tokens trained "
            "on.",
        ),
        page.MethodPanel(
            "Rollout correction and rejection",
            (M.ROLLOUT_WEIGHT_MEAN, M.ROLLOUT_REJECTED_FRAC),
            [
                ("mean rollout weight (π_old / π_rollout, corrected)", M.ROLLOUT_WEIGHT_MEAN),
                ("loss tokens rejected", M.ROLLOUT_REJECTED_FRAC),
            ],
            "ent_rollout",
            "Where the rollout engine's log-probabilities differ from the trainer's (vLLM, or a stale policy): "
            "`policy/rollout_weight_mean`, the mean over loss tokens of the truncated or masked importance weight "
            "(`objective.rollout_correction`); `policy/rollout_rejected_frac`, the share of loss tokens the rollout "
            "rejection took out of the loss (`objective.rollout_rejection`). Where the sampler is the trained model "
            "itself (the toy's own decode), the two differ only by floating-point rounding.",
        ),
    ],
    data,
    kw,
    x,
)
st.subheader("Token- vs sequence-level clipping")
level = arm_setting(data, "objective.ratio")
groups = {}
for arm in data.arms:
    groups.setdefault(level.get(arm, "unknown"), []).append(arm)
clip = data.by_arm(M.CLIP_FRAC_TOKENS, x)  # one unit under every ratio: GSPO's comparison (arXiv 2507.18071)
panels = [
    (f"ratio = {lvl} (share of clipped tokens)", {a: clip[a] for a in arms if a in clip})
    for lvl, arms in groups.items()
]
st.plotly_chart(figures.curves_by_arm(panels, data.arms, fit_y=True, **kw), key="ent_levels")
st.caption(
    "A token of a response whose sequence ratio is clipped counts as clipped (`policy/clip_frac_tokens`); "
    "the clip fractions above count sequences under a sequence ratio."
)
missing = [a for a in data.arms if a not in clip]
if missing:
    st.caption(
        "Not drawn, no `policy/clip_frac_tokens` logged (a run from before harness logged it, or TRL at "
        "`importance_sampling_level` sequence): " + ", ".join(kw["labels"](a) for a in missing)
    )
if len(groups) < 2:
    st.caption("Every arm of this sweep uses the same ratio level; `ablations/gspo_vs_grpo.yaml` compares them.")

st.subheader("KL to the reference policy")
kl, penalty = data.by_arm(M.KL, x), data.by_arm(M.KL_REWARD_PENALTY, x)
panels = [
    (title, series)
    for title, series in (
        ("KL to the reference (`policy/kl`, token mean; the initial policy unless refreshed)", kl),
        ("KL penalty in the reward (β Σ_t kl_t, mean over responses)", penalty),
        ("KL in the reward (`reward/kl_mean`, π_old against π_ref)", data.by_arm(M.KL_REWARD_MEAN, x)),
        ("adaptive β of the KL in the loss (`policy/kl_coef`)", data.by_arm(M.KL_COEF, x)),
        ("adaptive β of the KL in the reward (`reward/kl_coef`)", data.by_arm(M.KL_REWARD_COEF, x)),
        ("reference refreshed: its move ‖Δθ_ref‖ at each refresh", data.by_arm(M.REF_REFRESH_DISTANCE, x)),
    )
    if series
]
if panels:
    st.plotly_chart(figures.curves_by_arm(panels, data.arms, fit_y=True, **kw), key="ent_kl")
    st.caption(
        "`policy/kl` is logged when `train.reference_kl` is on or the loss has a KL term (`objective.kl_coef`); the "
        "penalty only for arms with `objective.kl_reward_coef` > 0, where it is subtracted from the reward before "
        "the advantage; the β panels only for arms with an adaptive coefficient (`objective.kl_target`), each step's "
        "β as applied before its update; the reference's move only for arms that refresh it "
        "(`train.reference_sync_steps`), at the steps it was refreshed, after which the KL is to the new reference."
    )
else:
    st.caption("No arm logged a KL to the reference (`train.reference_kl` off and no KL term in the loss or reward).")
