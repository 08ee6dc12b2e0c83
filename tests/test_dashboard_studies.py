"""The Optuna studies page (streamlit.testing AppTest): a real SQLite study storage with completed, pruned and
failed trials, a second study too small for importances, and missing or non-Optuna storages (never written to)."""

import os
import sqlite3

import optuna
import pytest
from streamlit.testing.v1 import AppTest

from dashboard.launch import OPTUNA_ENV, URI_ENV

pytestmark = pytest.mark.slow  # every test drives the Streamlit app (AppTest)

APP = os.path.join(os.path.dirname(__file__), "..", "dashboard", "app.py")


def _storage(tmp_path) -> str:
    """Study "lr_sweep": 6 completed trials of a 2-parameter quadratic, one pruned, one failed, with `harness tune`'s
    user attrs; study "tiny" (created later, so listed first): one completed trial."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(
        study_name="lr_sweep", storage=url, direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0)
    )
    study.set_user_attr("objective_metric", "eval/math500/accuracy")
    study.set_user_attr("objective_at", "final")

    def objective(trial):
        lr = trial.suggest_float("lr", 1e-6, 1e-4, log=True)
        clip = trial.suggest_float("clip_high", 0.2, 0.3)
        trial.set_user_attr("mlflow_run_id", f"run{trial.number:02d}")
        return 1 - (lr * 1e5 - 3) ** 2 / 100 - (clip - 0.28) ** 2

    study.optimize(objective, n_trials=6)
    pruned = study.ask(
        {
            "lr": optuna.distributions.FloatDistribution(1e-6, 1e-4, log=True),
            "clip_high": optuna.distributions.FloatDistribution(0.2, 0.3),
        }
    )
    pruned.set_user_attr("mlflow_run_id", "run06")
    pruned.report(0.1, 5)
    study.tell(pruned, state=optuna.trial.TrialState.PRUNED)
    failed = study.ask()
    failed.suggest_float("lr", 1e-6, 1e-4, log=True)
    study.tell(failed, state=optuna.trial.TrialState.FAIL)

    tiny = optuna.create_study(study_name="tiny", storage=url)
    tiny.optimize(lambda t: t.suggest_float("x", 0, 1) ** 2, n_trials=1)
    return url


def _studies_page(monkeypatch, tmp_path, storage: str | None) -> AppTest:
    monkeypatch.setenv(URI_ENV, f"sqlite:///{tmp_path / 'mlflow.db'}")  # no runs: the sidebar has no sweep
    if storage is None:
        monkeypatch.delenv(OPTUNA_ENV, raising=False)
    else:
        monkeypatch.setenv(OPTUNA_ENV, storage)
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    at.switch_page("views/studies.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert [t.value for t in at.title] == ["Studies (Optuna)"]
    return at


def _trials(at: AppTest):
    tables = [d.value for d in at.dataframe if "mlflow_run_id" in d.value.columns]
    assert len(tables) == 1
    return tables[0]


def test_a_study_gets_its_summary_figures_and_trials(tmp_path, monkeypatch):
    storage = _storage(tmp_path)
    at = _studies_page(monkeypatch, tmp_path, storage)
    assert at.text_input(key="optuna_storage").value == storage
    assert at.selectbox(key="study").options == ["tiny · 1 trial · minimize", "lr_sweep · 8 trials · maximize"]
    at.selectbox(key="study").set_value("lr_sweep").run()
    assert not at.exception, [e.value for e in at.exception]

    assert not at.info
    counts = {m.label: m.value for m in at.metric}
    best = max(
        optuna.load_study(study_name="lr_sweep", storage=storage).get_trials(
            states=(optuna.trial.TrialState.COMPLETE,)
        ),
        key=lambda t: t.value,
    )
    assert counts == {
        "complete": "6",
        "pruned": "1",
        "fail": "1",
        "running": "0",
        "best value (max)": f"{best.value:.4g}",
    }
    assert any(f"Best trial #{best.number}" in m.value and f"run{best.number:02d}" in m.value for m in at.markdown)
    assert any("eval/math500/accuracy" in c.value and "final" in c.value and "maximize" in c.value for c in at.caption)

    charts = at.get("plotly_chart")
    assert len(charts) == 3  # history, importances, parallel coordinates

    trials = _trials(at)
    assert len(trials) == 8
    assert trials["state"].value_counts().to_dict() == {"COMPLETE": 6, "PRUNED": 1, "FAIL": 1}
    assert {"number", "value", "lr", "clip_high", "duration (s)", "last reported step"} <= set(trials.columns)
    assert trials["mlflow_run_id"].tolist()[:7] == [f"run{i:02d}" for i in range(7)]
    assert trials.loc[trials["state"] == "PRUNED", "last reported step"].tolist() == [5]


def test_one_completed_trial_skips_importances_with_a_reason(tmp_path, monkeypatch):
    at = _studies_page(monkeypatch, tmp_path, _storage(tmp_path))
    assert at.session_state["study"] == "tiny"  # the newest study first
    assert len(at.get("plotly_chart")) == 2  # history and parallel coordinates
    assert any("at least 2 completed trials" in c.value for c in at.caption)
    assert len(_trials(at)) == 1


def test_the_storage_box_switches_storage(tmp_path, monkeypatch):
    _storage(tmp_path)
    at = _studies_page(monkeypatch, tmp_path, f"sqlite:///{tmp_path / 'elsewhere.db'}")
    assert any("No Optuna studies" in i.value for i in at.info)
    at.text_input(key="optuna_storage").set_value(str(tmp_path / "optuna.db")).run()  # a bare path is SQLite
    assert not at.exception and not at.info
    assert at.session_state["study"] == "tiny" and len(at.get("plotly_chart")) == 2
    assert not (tmp_path / "elsewhere.db").exists()


@pytest.mark.parametrize("kind", ["missing", "empty file", "mlflow-like database"])
def test_no_studies_gives_the_hint_and_writes_nothing(tmp_path, monkeypatch, kind):
    path = tmp_path / "results" / "optuna.db"
    if kind != "missing":
        path.parent.mkdir()
        path.touch()
    if kind == "mlflow-like database":
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE runs (run_uuid TEXT)")
    before = path.read_bytes() if path.exists() else None
    at = _studies_page(monkeypatch, tmp_path, f"sqlite:///{path}")
    assert [i.value for i in at.info] == [
        f"No Optuna studies in `sqlite:///{path}` yet. Run `harness tune ablations/tune_dr_grpo_lr.yaml`."
    ]
    assert not at.get("plotly_chart") and not at.dataframe and not at.error
    assert (path.read_bytes() if path.exists() else None) == before  # neither created nor given Optuna's tables
    assert path.exists() == (kind != "missing") and not path.parent.joinpath("optuna.db-journal").exists()


def test_the_default_storage_is_results_optuna_db_under_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    at = _studies_page(monkeypatch, tmp_path, None)
    expected = f"sqlite:///{tmp_path.resolve() / 'results' / 'optuna.db'}"
    assert at.text_input(key="optuna_storage").value == expected
    assert any(expected in i.value for i in at.info)
    assert not (tmp_path / "results").exists()
