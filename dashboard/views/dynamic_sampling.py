"""Groups and advantages. DAPO's dynamic sampling (arXiv 2503.14476, §3.2): groups whose samples are all correct or
all wrong have zero advantage and no gradient; the filter drops them and samples again. NGRPO (arXiv 2509.18851) and
negative-sample reinforcement (arXiv 2506.01347) learn from the all-wrong groups instead; MC-GRPO (arXiv 2601.22582)
counts the responses whose advantage sign its median baseline reverses; ReMax (arXiv 2310.10505) takes its baseline
from a greedy response; SPO (arXiv 2509.13232) from a persistent per-prompt success-rate tracker. Scaf-GRPO (arXiv
2510.19807) and HiLL (arXiv 2604.00698) give all-wrong groups hinted responses; PF-PPO (arXiv 2409.06957) resamples
the trained responses by reward."""

import pandas as pd
import streamlit as st

from dashboard import page
from harness.analysis import figures
from trainer import metric_names as M

data, kw, x = page.curve_page("Groups & advantages (DAPO, NGRPO, MC-GRPO)", "ds", "dynamic_sampling")

shares: dict[str, dict[str, pd.Series]] = {}
for label, key in (
    ("all correct", M.GROUPS_ALL_CORRECT_FRAC),
    ("mixed", M.GROUPS_MIXED_FRAC),
    ("all wrong", M.GROUPS_ALL_WRONG_FRAC),
):
    for arm, curves in data.by_arm(key, x).items():
        shares.setdefault(arm, {})[label] = curves.mean(axis=1)
if shares:
    st.plotly_chart(figures.group_outcomes(shares, data.arms, kw["x_title"], kw["labels"]), key="ds_groups")
else:
    st.warning("No group metrics logged yet in this sweep.")
st.subheader("All-wrong and all-correct groups")
page.curves(
    [("all-correct groups", M.GROUPS_ALL_CORRECT_FRAC), ("all-wrong groups", M.GROUPS_ALL_WRONG_FRAC)],
    data,
    kw,
    x,
    "ds_solve",
)
st.caption(
    "Shares of the step's groups. Under a group-mean baseline both give every response A = 0: no gradient. "
    "Dynamic sampling drops them; NGRPO's virtual maximum reward and negative-sample reinforcement put the "
    "all-wrong ones to use."
)
st.subheader("Advantages")
page.curves(
    [
        ("zero-advantage responses", M.ADV_ZERO_FRAC),
        ("mean |advantage|", M.ADV_ABS_MEAN),
        ("sign flips vs the group mean", M.ADV_SIGN_FLIP_FRAC),
    ],
    data,
    kw,
    x,
    "ds_adv",
)
st.caption(
    "Sign flips (`adv/sign_flip_frac`): the share of trained responses whose advantage has the opposite sign to "
    "R_i − mean_g R, MC-GRPO's concern in small groups; 0 by construction under the group-mean baselines "
    "(`group_std`, `group_mean`, `batch_std`)."
)
page.method_panels(
    [
        page.MethodPanel(
            "ReMax's greedy baseline",
            M.GREEDY_REWARD_MEAN,
            [("greedy response's reward", M.GREEDY_REWARD_MEAN), ("sampled responses' mean reward", M.REWARD_MEAN)],
            "ds_greedy",
            "ReMax (`advantage: remax`, arXiv 2310.10505): each response's baseline is the reward of one greedy "
            "(temperature-0) response to its prompt, generated each step and never trained on "
            "(`adv/greedy_reward_mean`). Above the sampled responses' mean, most advantages are negative.",
        ),
        page.MethodPanel(
            "POISE's value probe",
            M.POISE_ADV_VAR_RATIO,
            [
                ("|probe value − siblings' mean reward|", M.POISE_VALUE_ABS_ERR),
                ("probe's explained variance of its targets", M.POISE_VALUE_EXPLAINED_VAR),
                ("Var(advantage) / Var(reward)", M.POISE_ADV_VAR_RATIO),
                ("probe fitted (0 while bootstrapping on RLOO)", M.POISE_PROBE_FITTED),
            ],
            "ds_poise",
            "POISE (`advantage: poise`, arXiv 2605.07579): each response's baseline is the mean value of its siblings, "
            "each predicted by a ridge probe on the policy's own hidden states and token entropy, refit after every "
            "step on the newest responses. `poise/value_abs_err` and `poise/value_explained_var`: the probe's "
            "predictions against their targets (the siblings' mean reward), made before it saw the step; "
            "`poise/adv_var_ratio`: the advantage's variance against REINFORCE's without a baseline (below 1, the "
            "baseline removes variance).",
        ),
        page.MethodPanel(
            "SPO's value tracker",
            M.SPO_VALUE_MEAN,
            [
                ("|tracked value − reward|", M.SPO_VALUE_ABS_ERR),
                ("mean tracked value v̂", M.SPO_VALUE_MEAN),
                ("share of prompts tracked", M.SPO_TRACKED_FRAC),
                ("forgetting factor ρ", M.SPO_RHO_MEAN),
            ],
            "ds_spo",
            "SPO (`advantage: spo`, arXiv 2509.13232): each response's baseline is its prompt's success rate v̂(x) "
            "from a Beta tracker that persists across steps (no group: one response per prompt), its old evidence "
            "discounted by ρ as the policy drifts on that prompt. `spo/value_abs_err`: |v̂ − R| with v̂ from before "
            "the step; `spo/tracked_frac`: the share of the step's prompts initialised or seen before (the rest start "
            "at ½); `spo/rho_mean`: the step's mean ρ (ρ_max on first visits, lower the more the policy moved).",
        ),
        page.MethodPanel(
            "Hints for all-wrong groups (Scaf-GRPO, HiLL)",
            M.HINT_GROUPS_TRIGGERED_FRAC,
            [
                ("groups given hinted draws", M.HINT_GROUPS_TRIGGERED_FRAC),
                ("groups with a hinted response trained", M.HINT_GROUPS_HINTED_FRAC),
                ("trained responses that are hinted", M.HINT_RESPONSES_FRAC),
                ("hinted draws correct", M.HINT_ACCURACY),
                ("hint reliance (nats per token)", M.HINT_RELIANCE),
            ],
            "ds_hint",
            "`rollout.hint` (`scaf_grpo`, `hinted_group`): after `rollout.hint_after_steps`, a group whose every "
            "response is wrong is sampled again with hints in its prompt. `hint/groups_triggered_frac`: the share of "
            "the step's groups that drew hinted responses; `hint/groups_hinted_frac`: the share whose samples hinted "
            "ones replaced; `hint/responses_frac`: the share of the trained responses that are hinted; "
            "`hint/accuracy`: the share of hinted draws that are correct; `hint/reliance`: HiLL's mean_t log π(o_t | "
            "q) − log π(o_t | q ⊕ h) over the correct hinted responses swapped in (negative: less likely without the "
            "hint, the transfer HiLL warns of). Accuracy elsewhere on these pages is that of the draws without hints.",
        ),
        page.MethodPanel(
            "PF-PPO's resampling by reward",
            M.PF_PPO_DISTINCT_FRAC,
            [
                ("responses drawn at least once", M.PF_PPO_DISTINCT_FRAC),
                ("resampled batch's mean reward", M.PF_PPO_REWARD_MEAN),
                ("sampled responses' mean reward", M.REWARD_MEAN),
            ],
            "ds_pf_ppo",
            "PF-PPO (`objective.pf_ppo_reweight`, arXiv 2409.06957): the responses to be trained are drawn again with "
            "replacement, weighted by their reward. `train/pf_ppo_distinct_frac`: the share drawn at least once; "
            "`train/pf_ppo_reward_mean` against `train/reward_mean`: how far the draw tilts the batch toward high "
            "reward.",
        ),
    ],
    data,
    kw,
    x,
)
st.subheader("Cost of the filter")
page.curves(
    [("generation rounds per step", M.GEN_ROUNDS), ("groups dropped per step", M.GROUPS_DROPPED)],
    data,
    kw,
    x,
    "ds_cost",
)
