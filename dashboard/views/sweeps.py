"""Every sweep of the store: its grid, its jobs (done / running / failed, with reasons) and progress."""

import pandas as pd
import streamlit as st

from dashboard import context, page
from harness.analysis.verdict_table import md
from harness.runs.reader import reader_for

st.title("Sweeps")
found = context.all_sweeps(context.tracking_uri())
if not found:
    st.info(f"No runs in `{context.tracking_uri()}` yet. Start one with `harness sweep ablations/dr_grpo_bias.yaml`.")
    st.stop()

summary = []
for s in found:
    status = s.runs["status"].value_counts()
    summary.append(
        {
            "sweep": s.name,
            "experiment": s.experiment,
            "sweep id": s.sweep_id or "—",
            "status": s.parent["status"] if s.parent is not None else "—",
            "finished": int(status.get("FINISHED", 0)),
            "running": int(status.get("RUNNING", 0)),
            "failed": int(status.get("FAILED", 0) + status.get("KILLED", 0)),
            "planned": max(
                int(s.parent["n_jobs"]) if s.parent is not None and pd.notna(s.parent.get("n_jobs")) else 0,
                s.runs["job_id"].nunique() if "job_id" in s.runs else len(s.runs),
            ),
            "started": pd.to_datetime(s.runs["start_time"].min(), unit="ms") if not s.runs.empty else None,
        }
    )
page.table(pd.DataFrame(summary))

data = context.current()
if data is None:
    st.stop()
runs = data.runs
st.header(md(data.sweep.name))
for warning in data.warnings:  # what the reader set aside (a job run twice), as the report prints it
    st.warning(md(warning))
status = data.jobs  # planned jobs, plus any job of the sweep run outside the current plan (an earlier profile, say)
counts = runs["state"].value_counts()
cols = st.columns(6)
cols[0].metric("planned", status.total)
cols[1].metric("done", status.finished)
cols[2].metric("running", int(counts.get("running", 0)))
cols[3].metric("stalled", int(counts.get("stalled", 0)), help="RUNNING in MLflow but silent for 10 min")
cols[4].metric("failed", status.failed, help="Jobs whose every run failed (the reasons are below)")
cols[5].metric("never started", status.missing)
st.progress(min(1.0, status.finished / status.total) if status.total else 0.0, text=status.line())
st.caption("Machines: where the runs computed (CPU, torch's CPU capability, threads, base model's sha256)")
page.table(pd.DataFrame([{**m.machine.row(), "runs": m.runs} for m in data.machines]))

if data.sweep.parent is not None:
    settings = reader_for(context.tracking_uri()).params([data.sweep.parent["run_id"]])
    with st.expander("Grid (the sweep file as run)", expanded=True):
        grid = settings.drop(columns="run_id").rename(columns={"key": "setting"})
        page.table(grid.replace({"value": {"None": "null"}}))  # a YAML null, logged by MLflow as Python's None

total = runs["steps"].map(lambda n: "?" if pd.isna(n) else str(int(n)))
jobs = runs.assign(
    progress=runs["last_step"].astype(str) + " / " + total,
    started=pd.to_datetime(runs["start_time"], unit="ms"),
    failure_reason=runs["failure_reason"].fillna(""),
)
show = ["arm", "seed", "state", "progress", "failure_reason", "run_name", "started", "run_id"]
if data.planned:
    seen = set(runs.get("job_id", pd.Series(dtype=str)))
    pending = pd.DataFrame(
        [{"arm": j["arm"], "seed": j["seed"], "state": "pending"} for j in data.planned if j["job_id"] not in seen]
    )
    jobs = pd.concat([jobs, pending], ignore_index=True) if not pending.empty else jobs
st.subheader("Jobs")
page.table(jobs[show])
for failed in status.failed_runs:
    st.error(md(failed.line()))
