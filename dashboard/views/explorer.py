"""Any metric of any runs, and the sampled responses behind them."""

import plotly.graph_objects as go
import streamlit as st

from dashboard import context, page
from harness.analysis import figures
from harness.analysis.stats import ema

st.title("Run explorer")
data = context.current()
if data is None:
    st.stop()
runs = data.runs
arm_labels = context.labels(data)
labels = {r.run_id: f"{arm_labels(r.arm)} · seed {r.seed} ({r.state})" for r in runs.itertuples()}
chosen = st.multiselect("Runs", list(labels), default=list(labels), format_func=labels.get, key="ex_runs")
keys = data.keys
if not keys:
    st.warning("No metrics logged yet in this sweep.")
    st.stop()
c1, c2, c3 = st.columns([2, 1, 1])
metric = c1.selectbox(
    "Metric", keys, index=keys.index("train/accuracy") if "train/accuracy" in keys else 0, key="ex_metric"
)
x = c2.radio(
    "x axis",
    ["step", "tokens"],
    horizontal=True,
    key="ex_x",
    format_func={"step": "RL step", "tokens": "tokens generated"}.get,
)
smooth = c3.radio("Smoothing", ["off", "EMA"], horizontal=True, key="ex_smooth")
alpha = st.slider("EMA α", 0.01, 1.0, 0.1, key="ex_alpha") if smooth == "EMA" else 1.0

wide = data.wide(metric, x)
colour = figures.colours(data.arms)
fig = go.Figure()
for run_id in chosen:
    if run_id not in wide:
        continue
    r = runs.set_index("run_id").loc[run_id]
    y = ema(wide[run_id].dropna(), alpha)
    fig.add_trace(
        go.Scatter(
            x=y.index,
            y=y.values,
            mode="lines",
            name=labels[run_id],
            line={"color": colour.get(r["arm"], "#444")},
            hovertemplate=f"%{{y:.4g}}<br>{arm_labels.hover(r['arm'])}",
        )
    )
fig.update_layout(
    height=440,
    xaxis_title="tokens generated" if x == "tokens" else "RL step",
    yaxis_title=metric,
    margin={"t": 30, "b": 40, "l": 50, "r": 10},
)
st.plotly_chart(fig, key="ex_curves")

st.subheader("Rollouts")
run_id = st.selectbox("Run", list(labels), format_func=labels.get, key="ex_rollout_run")
table = context.rollouts((runs.set_index("run_id").loc[run_id, "artifact_uri"],)).popitem()[1]
if table.empty:
    st.info("This run has no rollout table yet: it is written when the run ends.")
    st.stop()
c1, c2 = st.columns(2)
step = c1.select_slider("Step", sorted(table["step"].unique()), value=int(table["step"].max()), key="ex_step")
outcome = c2.radio("Show", ["all", "correct", "incorrect"], horizontal=True, key="ex_outcome")
rows = table[table["step"] == step]
if outcome != "all":
    rows = rows[rows["correct"] == (outcome == "correct")]
cols = [
    c
    for c in (
        "prompt_id",
        "sample_index",
        "round",
        "reward",
        "correct",
        "length",
        "truncated",
        "advantage",
        "kept",
        "prompt",
        "response",
    )
    if c in rows
]
page.table(rows[cols])
if "response" not in rows:
    st.caption("Texts are logged when `train.log_text` is on.")
