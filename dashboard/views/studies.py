"""`harness tune`'s Optuna studies: trials by state, the best trial, and Optuna's own Plotly figures (optimisation
history, parameter importances, parallel coordinates)."""

import streamlit as st

from dashboard import context, page


def fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


st.title("Studies (Optuna)")
st.text_input(
    "Optuna storage",
    value=context.optuna_storage(),
    key="optuna_storage",
    help="Any Optuna RDB URL, or a SQLite file's path; `harness tune` writes results/optuna.db by default.",
)
storage = context.optuna_storage()
try:
    found = context.optuna_studies(storage)
except Exception as e:  # noqa: BLE001 (a bad URL, a missing driver, an incompatible schema: all shown as is)
    st.error(f"Cannot read `{storage}`: {type(e).__name__}: {e}")
    found = None
if found is not None and not found:
    st.info(f"No Optuna studies in `{storage}` yet. Run `harness tune ablations/tune_dr_grpo_lr.yaml`.")
if not found:
    st.stop()

labels = {
    s.name: f"{s.name} · {s.n_trials} trial{'' if s.n_trials == 1 else 's'} · {'/'.join(s.directions)}" for s in found
}
name = st.selectbox("Study", list(labels), format_func=labels.get, key="study")
study = context.optuna_study(storage, name)
if study is None:
    st.info(f"Study `{name}` is no longer in `{storage}`: press Reload.")
    st.stop()

attrs, objective, states = study.user_attrs, study.objective, study.states
at = attrs.get("objective_at")
goal = " / ".join(study.directions)
st.caption(
    f"Objective: `{objective}`" + (f" at {at}" if at else "") + f", to {goal}."
    if "objective_metric" in attrs
    else f"Direction: {goal} (the study records no `objective_metric`)."
)
cols = st.columns(5)
for col, state in zip(cols, ("COMPLETE", "PRUNED", "FAIL", "RUNNING")):
    col.metric(state.lower(), states[state])
best = study.best
cols[4].metric(f"best value ({study.directions[0][:3]})", fmt(best.value) if best else "—")
if best:
    params = ", ".join(f"{k} = {fmt(v)}" for k, v in best.params.items())
    run = f" · MLflow run `{best.mlflow_run_id}`" if best.mlflow_run_id else ""
    st.markdown(f"**Best trial #{best.number}**: {params or 'no parameters'}{run}")
elif study.pareto is not None:
    st.markdown(f"**{study.pareto} trials on the Pareto front**; the figures show the first objective.")

figs = study.figures
if not figs:
    st.info("No completed trial yet: the figures appear with the first one.")
else:
    n = states["COMPLETE"]
    left, right = st.columns(2)
    with left:
        st.plotly_chart(figs["history"], key="optuna_history")
        st.caption(
            f"`{objective}` of each completed trial ({n}) in trial order, and the best so far "
            "(Optuna's plot_optimization_history); pruned and failed trials are not drawn."
        )
    with right:
        if "importances" in figs:
            st.plotly_chart(figs["importances"], key="optuna_importances")
            st.caption(
                f"fANOVA importance (seeded) of each parameter for `{objective}` over the completed "
                f"trials ({n}; Optuna's plot_param_importances): a random-forest estimate, rough with few "
                "trials."
            )
        else:
            st.caption(study.notes.get("importances", "No parameter importances."))
    st.plotly_chart(figs["parallel"], key="optuna_parallel")
    st.caption(
        f"One line per completed trial through its parameter values, coloured by `{objective}` "
        "(Optuna's plot_parallel_coordinate)."
    )

st.subheader("Trials")
trials = study.trials
formats = {
    c: st.column_config.NumberColumn(format="%d" if c == "last reported step" else "%.4g")
    for c in trials.columns
    if trials[c].dtype.kind == "f"
}  # log-scale parameters such as lr stay legible
page.table(trials, column_config=formats)
st.caption(
    "Every trial of the study; `mlflow_run_id` is the MLflow run a `harness tune` trial logged to, and a "
    "pruned trial's value is its last reported one."
)
