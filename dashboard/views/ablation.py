"""Final metrics per arm with 95% CIs over seeds: DAPO's progressive table (arXiv 2503.14476, Table 1)
for cumulative sweeps, and the main effect of each switch for factorial ones."""

import pandas as pd
import streamlit as st

from dashboard import context, page, verdicts
from dashboard.labels import with_settings
from harness.analysis import figures
from harness.analysis.stats import factorial_effects, mean_ci
from harness.analysis.verdict_table import md
from harness.config.at import At
from trainer import metric_names as M

st.title("Ablation table")
data = context.current()
if data is None:
    st.stop()
verdicts.panel("ablation")
labels = context.labels(data)
keys = data.keys
if not keys:
    st.warning("No metrics logged yet in this sweep.")
    st.stop()
strata = [m for _, m in page.ACCURACY_STRATA]
shown_first = [M.ACCURACY, *strata, M.REWARD_MEAN, M.LENGTH_INCORRECT_MEAN, M.LENGTH_CORRECT_MEAN, M.ENTROPY]
default = [k for k in shown_first if k in keys]
c1, c2 = st.columns([3, 1])
chosen = c1.multiselect("Metrics", keys, default=default or keys[:1], key="abl_metrics")
last = c2.number_input("Final window (last N steps)", 1, 1000, 10, key="abl_last")
only_done = st.toggle("Finished runs only", value=True, key="abl_done")
runs_ok = set(data.runs.loc[data.runs["state"] == "done", "run_id"]) if only_done else set(data.current["run_id"])
for warning in data.warnings:
    st.warning(md(warning))
window = At("last", k=int(last))
found = {key: data.values(key, window, finished_only=only_done) for key in chosen}
for key in chosen:  # the statistics refuse ±inf: name the runs, and leave them out
    if found[key].not_finite:
        st.error(md(found[key].not_finite))


def fmt(m: float, lo: float, hi: float) -> str:
    return "—" if pd.isna(m) else (f"{m:.4g} [{lo:.4g}, {hi:.4g}]" if pd.notna(lo) else f"{m:.4g}")


table, numbers = [], {}
for arm in data.arms:
    row = {"arm": arm, "seeds": int(((data.runs["arm"] == arm) & data.runs["run_id"].isin(runs_ok)).sum())}
    for key in chosen:
        f = found[key].frame
        vals = f.loc[f["arm"] == arm, "value"]
        numbers[(arm, key)] = (mean_ci(vals), vals.tolist())
        row[key] = fmt(*numbers[(arm, key)][0])
    table.append(row)
if data.cumulative and chosen:  # progressive layout: what each added technique changed
    for i, row in enumerate(table):
        prev = numbers.get((data.arms[i - 1], chosen[0])) if i else None
        cur = numbers[(data.arms[i], chosen[0])][0][0]
        row[f"Δ {chosen[0]} vs previous"] = f"{cur - prev[0][0]:+.4g}" if prev and pd.notna(cur) else ""
st.caption(
    f"Mean over seeds of each run's last {last} steps [95% bootstrap CI over seeds]"
    + (" — arms in order, each adding one technique to the one above." if data.cumulative else ".")
)
page.table(with_settings(pd.DataFrame(table), labels))

if chosen:
    metric = st.selectbox("Per-seed view of", chosen, key="abl_bar")
    bars = pd.DataFrame(
        [
            {
                "arm": a,
                "mean": numbers[(a, metric)][0][0],
                "low": numbers[(a, metric)][0][1],
                "high": numbers[(a, metric)][0][2],
                "seeds": numbers[(a, metric)][1],
            }
            for a in data.arms
        ]
    )
    st.plotly_chart(figures.final_bars(bars, metric, labels), key="abl_bars")

    if data.varying and not data.cumulative:
        st.subheader("Main effects")
        final = found[metric].frame
        effects, caught = factorial_effects(final, data.varying)
        for note in caught:
            st.warning(md(f"{metric}: {note}"))
        effects = effects[
            ["factor", "level", "n", "mean", "effect", "low", "high", "model_effect", "model_low", "model_high"]
            + ["model_p", "note"]
        ].rename(
            columns={
                "low": "low (bootstrap)",
                "high": "high (bootstrap)",
                "model_effect": "model effect",
                "model_low": "low (model)",
                "model_high": "high (model)",
                "model_p": "p",
            }
        )
        st.caption(
            f"{metric}: mean over the grid's cells at each level minus at the first level (model effect), with "
            "its 95% CI and p from the factorial cell-means model (as `harness report`); beside it the "
            "two-group difference with a bootstrap CI. Where a cell of the grid has no run, the model gives no "
            "estimate (note): the two levels would average over different cells and mix in the other "
            "switches' effects, and the two-group difference is biased the same way."
        )
        st.dataframe(
            effects.style.format(
                {c: "{:.4g}" for c in effects.columns if c not in ("factor", "level", "n", "note")}, na_rep=""
            ),
            hide_index=True,
            width="stretch",
        )
