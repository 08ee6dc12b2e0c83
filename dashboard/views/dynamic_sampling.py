"""DAPO's dynamic sampling (arXiv 2503.14476, §3.2): groups whose samples are all correct or all
wrong have zero advantage and no gradient; the filter drops them and samples again."""

import pandas as pd
import streamlit as st

from dashboard import page
from harness.analysis import figures
from trainer import metric_names as M

data, kw, x = page.curve_page("Dynamic sampling", "ds", "dynamic_sampling")

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
st.subheader("Groups with no learning signal")
st.plotly_chart(
    figures.curves_by_arm(
        [
            ("all correct", data.by_arm(M.GROUPS_ALL_CORRECT_FRAC, x)),
            ("all wrong", data.by_arm(M.GROUPS_ALL_WRONG_FRAC, x)),
            ("zero-advantage samples", data.by_arm(M.ADV_ZERO_FRAC, x)),
        ],
        data.arms,
        **kw,
    ),
    key="ds_solve",
)
st.subheader("Cost of the filter")
st.plotly_chart(
    figures.curves_by_arm(
        [
            ("generation rounds per step", data.by_arm(M.GEN_ROUNDS, x)),
            ("groups dropped per step", data.by_arm(M.GROUPS_DROPPED, x)),
        ],
        data.arms,
        **kw,
    ),
    key="ds_cost",
)
