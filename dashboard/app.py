"""`harness dashboard`: the papers' bias analyses redrawn on the runs of a tracking store.

Run through the CLI (`harness dashboard`), or `streamlit run dashboard/app.py`.
"""

import streamlit as st

from dashboard import context

st.set_page_config(page_title="harness dashboard", layout="wide")
page = st.navigation(
    [
        st.Page("views/sweeps.py", title="Sweeps", default=True),
        st.Page("views/length_bias.py", title="Length bias (Dr. GRPO)"),
        st.Page("views/entropy_clipping.py", title="Entropy & clipping (DAPO, GSPO)"),
        st.Page("views/dynamic_sampling.py", title="Groups & advantages (DAPO, NGRPO, MC-GRPO)"),
        st.Page("views/ablation.py", title="Ablation table"),
        st.Page("views/explorer.py", title="Run explorer"),
        st.Page("views/studies.py", title="Studies (Optuna)"),
    ]
)
context.sidebar()
page.run()
