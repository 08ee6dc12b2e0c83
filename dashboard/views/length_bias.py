"""Dr. GRPO (arXiv 2503.20783, Fig. 1/5): length of correct vs incorrect responses over training.

GRPO's 1/|o_i| term divides a wrong answer's penalty by its length, so incorrect responses grow
longer; Dr. GRPO's constant normaliser removes that pull.
"""

import pandas as pd
import streamlit as st

from dashboard import context, page
from dashboard.labels import with_settings
from harness.analysis import figures
from harness.analysis.stats import mean_ci
from harness.config.at import At
from trainer import metric_names as M

data, kw, x = page.curve_page("Length bias (Dr. GRPO)", "len", "length_bias")

correct, incorrect = data.by_arm(M.LENGTH_CORRECT_MEAN, x), data.by_arm(M.LENGTH_INCORRECT_MEAN, x)
if not correct and not incorrect:
    st.warning("No length metrics logged yet in this sweep.")
else:
    st.plotly_chart(figures.length_by_correctness(correct, incorrect, data.arms, **kw), key="len_curves")
    st.caption(
        "Mean over seeds, 95% bootstrap band over seeds. GRPO's 1/|o_i| normaliser lets incorrect "
        "responses grow long; Dr. GRPO's constant normaliser does not (arXiv 2503.20783, Fig. 1)."
    )
    done = set(data.runs.loc[data.runs["state"] == "done", "run_id"])
    if not done:
        st.caption("No table of final lengths: no run has finished.")
    else:
        last = st.slider("Final window (last N logged steps)", 1, 50, 10, key="len_last")
        rows = []
        for arm in data.arms:
            row = {"arm": arm}
            for name, key in (
                ("incorrect length", M.LENGTH_INCORRECT_MEAN),
                ("correct length", M.LENGTH_CORRECT_MEAN),
                ("accuracy", M.ACCURACY),
            ):
                final = data.values(key, At("last", k=last)).frame  # finished runs
                m, lo, hi = mean_ci(final.loc[final["arm"] == arm, "value"])
                row[name] = f"{m:.3g} [{lo:.3g}, {hi:.3g}]" if pd.notna(lo) else f"{m:.3g}"
            rows.append(row)
        st.caption(
            f"Finished runs: mean over seeds of each run's last {last} logged steps (all of them in a shorter "
            "run), with a 95% bootstrap CI over seeds."
        )
        page.table(with_settings(pd.DataFrame(rows), kw["labels"]))

st.subheader("Reward and accuracy")
page.curves([("reward", M.REWARD_MEAN), ("accuracy", M.ACCURACY), *page.ACCURACY_STRATA], data, kw, x, "len_reward")
if any(m in data.keys for _, m in page.ACCURACY_STRATA):
    st.caption(
        "Accuracy by stratum (Stratified GRPO's strata on the toy task): on the prompts without and with a hidden "
        "digit (" + ", ".join(f"`{m}`" for _, m in page.ACCURACY_STRATA) + ")."
    )

benches = sorted({k.split("/")[1] for k in data.keys if k.startswith("eval/") and k.count("/") == 2})
for bench in benches:
    st.subheader(f"Evaluation: {bench}")
    ec = data.by_arm(M.eval_metric(bench, "length_correct_mean"))
    ei = data.by_arm(M.eval_metric(bench, "length_incorrect_mean"))
    if ec or ei:
        st.plotly_chart(
            figures.length_by_correctness(ec, ei, data.arms, per_seed=kw["per_seed"], labels=kw["labels"]),
            key=f"eval_len_{bench}",
        )
    st.plotly_chart(
        figures.curves_by_arm(
            [("accuracy", data.by_arm(M.eval_metric(bench, "accuracy")))],
            data.arms,
            per_seed=kw["per_seed"],
            labels=kw["labels"],
        ),
        key=f"eval_acc_{bench}",
    )

st.subheader("Length distribution by correctness")
max_step = int(data.runs["last_step"].max())
if max_step < 1:
    st.info("No step finished yet.")
    st.stop()
c1, c2 = st.columns(2)
step = c1.slider("Step", 1, max_step, max_step, key="len_step")
window = c2.slider("± steps pooled", 0, 20, min(5, max_step - 1), key="len_window")
tables = context.rollouts(tuple(data.runs["artifact_uri"]))
pooled = []
for r in data.runs.itertuples():
    t = tables.get(r.artifact_uri)
    if t is None or t.empty:
        continue
    t = t[(t["step"] - step).abs() <= window]
    pooled.append(t.assign(arm=r.arm)[["arm", "correct", "length"]])
if pooled:
    rows = pd.concat(pooled, ignore_index=True)
    st.plotly_chart(figures.length_distribution(rows, data.arms, kw["labels"]), key="len_dist")
    st.caption(
        f"Every sampled response of steps {max(1, step - window)}–{min(max_step, step + window)}, all seeds pooled "
        f"({len(rows)} responses)."
    )
else:
    st.info("No rollout tables yet: a run writes its table when it ends.")
