"""A user's reward code cannot take the run or the machine with it: memory, processes, output, process groups,
modules it did not name, and code that dies (trainer/rewards/bounded.py, trainer/tasks/user_code.py)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from harness.config.errors import ConfigError
from harness.config.run_config import load_run_config
from trainer.tasks.base import Group
from trainer.tasks.custom import ClassTask, CustomTask, RewardFunctionError, code_problem
from trainer.tasks.custom_config import CustomTaskConfig

HOSTILE = """
import os, signal, subprocess, sys, time

def _note(reference, pid):
    with open(reference["pids"], "a") as f:
        f.write(f"{pid}\\n")

def fine(completion, reference, prompt):
    return 1.0

def grows(completion, reference, prompt):
    blocks = []
    while True:
        blocks.append(bytearray(8 * 2**20))

def forks(completion, reference, prompt):
    for _ in range(300):
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        _note(reference, pid)
    time.sleep(30)
    return 1.0

def detaches(completion, reference, prompt):
    _note(reference, subprocess.Popen(["sleep", "30"], start_new_session=True).pid)
    return 1.0

def kills_its_group(completion, reference, prompt):
    _note(reference, os.getppid())
    os.killpg(0, signal.SIGKILL)

def exits(completion, reference, prompt):
    os._exit(0)

def kills_its_parent(completion, reference, prompt):
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(5)
    return 1.0

def prints(completion, reference, prompt):
    sys.stdout.write("o" * 3_000_000)
    sys.stderr.write("e" * 3_000_000 + "the end")
    return 1.0

def prints_then_raises(completion, reference, prompt):
    print("hello from the reward")
    raise ValueError("no such test case")
"""


@pytest.fixture
def folder(tmp_path) -> Path:
    row = {"problem": "1+1=", "answer": "2", "pids": str(tmp_path / "pids.txt")}
    (tmp_path / "data.jsonl").write_text(json.dumps(row) + "\n")
    (tmp_path / "hostile.py").write_text(HOSTILE)
    return tmp_path


def settings(folder: Path, function: str, **more) -> CustomTaskConfig:
    return CustomTaskConfig.model_validate(
        {"data": "data.jsonl", "reward": f"hostile.py:{function}", "root": str(folder), **more}
    )


def grade(t: CustomTask, completion: str = "2"):
    group = Group(problem_id=t.ids[0], answer="2", prompts=(t.prompts[0],), meta=({"row": 0},))
    return t.grade(group, 0, completion)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state != b"Z"


def noted(folder: Path) -> list[int]:
    path = folder / "pids.txt"
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def gone(pids: list[int], within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(alive(p) for p in pids)


def test_a_call_past_the_memory_bound_fails_in_one_line_and_the_next_call_gets_a_fresh_process(folder):
    t = CustomTask(settings(folder, "grows", memory_mb=256))
    try:
        with pytest.raises(RewardFunctionError) as raised:
            grade(t)
        line = str(raised.value)
        assert "\n" not in line and "hostile.py:grows" in line and "256 MB" in line and "row 0" in line
        assert "task.custom.memory_mb" in line
        with pytest.raises(RewardFunctionError):  # a fresh child, bounded again
            grade(t)
    finally:
        t.close()


def test_a_module_whose_import_passes_the_memory_bound_fails_the_check_in_one_line(folder):
    (folder / "heavy.py").write_text(
        "BIG = bytearray(2**31)\n\ndef score(completion, reference, prompt):\n    return 1\n"
    )
    problem = code_problem(
        CustomTaskConfig.model_validate(
            {"data": "data.jsonl", "reward": "heavy.py:score", "root": str(folder), "memory_mb": 256}
        )
    )
    assert problem is not None and "\n" not in problem
    assert problem.startswith("task.custom.reward: heavy.py:score") and "256 MB" in problem


def test_a_fork_bomb_is_stopped_at_the_process_bound_and_nothing_it_started_outlives_the_call(folder):
    t = CustomTask(settings(folder, "forks", processes=4, budget_s=20))
    try:
        with pytest.raises(RewardFunctionError) as raised:
            grade(t)
        line = str(raised.value)
        assert "\n" not in line and "hostile.py:forks" in line and "over 4 processes" in line
        pids = noted(folder)
        assert len(pids) >= 5
        assert gone(pids)
    finally:
        t.close()


def test_a_detached_process_is_killed_when_the_task_closes(folder):
    t = CustomTask(settings(folder, "detaches"))
    assert grade(t).reward == 1.0
    (pid,) = noted(folder)
    assert alive(pid)  # a call may leave a process running (a sandbox's server, say) until the run ends
    t.close()
    assert gone([pid])


@pytest.mark.parametrize(
    ("function", "said"),
    [
        ("kills_its_group", "the call's process was killed by SIGKILL"),
        ("exits", "the call's process exited with status 0"),
        ("kills_its_parent", "the helper process was killed by SIGKILL"),
    ],
)
def test_code_that_dies_fails_in_one_line_naming_the_function_and_this_process_survives(folder, function, said):
    t = CustomTask(settings(folder, function))
    try:
        with pytest.raises(RewardFunctionError) as raised:
            grade(t)
        line = str(raised.value)
        assert "\n" not in line and said in line and "row 0" in line
        assert f"hostile.py:{function}" in line
    finally:
        t.close()


def test_what_the_code_prints_is_kept_cut_to_the_bound_and_never_reaches_this_process(folder, capfd):
    t = CustomTask(settings(folder, "prints", output_kb=8))
    try:
        assert grade(t).reward == 1.0
        kept = t.service.output()
        assert kept.startswith("o" * 100) and kept.endswith("the end")
        assert len(kept.encode()) < 9 * 1024 and "bytes dropped" in kept
    finally:
        t.close()
    out, err = capfd.readouterr()
    assert len(out) + len(err) < 1000


def test_what_a_failing_function_printed_follows_its_one_line(folder):
    t = CustomTask(settings(folder, "prints_then_raises"))
    try:
        with pytest.raises(RewardFunctionError) as raised:
            grade(t)
        assert "ValueError: no such test case" in str(raised.value)
        assert any("hello from the reward" in note for note in raised.value.__notes__)
    finally:
        t.close()


def test_files_named_like_modules_beside_the_config_shadow_nothing(folder):
    for name in ("torch", "mlflow", "json", "uuid", "numpy", "sympy"):
        (folder / f"{name}.py").write_text(f"open({str(folder / (name + '.imported'))!r}, 'w').close()\n")
    (folder / "plain.py").write_text(
        "import json, uuid\n\ndef score(completion, reference, prompt):\n    return float(json.loads('1'))\n"
    )
    s = CustomTaskConfig.model_validate({"data": "data.jsonl", "reward": "plain.py:score", "root": str(folder)})
    assert code_problem(s) is None
    t = CustomTask(s)
    try:
        assert grade(t).reward == 1.0
    finally:
        t.close()
    assert sorted(p.name for p in folder.glob("*.imported")) == []
    assert str(folder) not in sys.path  # this process never put the config's folder on its path


def test_a_neighbour_module_still_imports(folder):
    (folder / "helpers_h62.py").write_text("VALUE = 0.5\n")
    (folder / "uses.py").write_text(
        "from helpers_h62 import VALUE\n\ndef score(completion, reference, prompt):\n    return VALUE\n"
    )
    t = CustomTask(
        CustomTaskConfig.model_validate({"data": "data.jsonl", "reward": "uses.py:score", "root": str(folder)})
    )
    try:
        assert grade(t).reward == 0.5
    finally:
        t.close()


def test_a_task_class_whose_init_hangs_fails_at_its_start_bound(folder):
    (folder / "slow_task.py").write_text(
        "import time\n\nclass Slow:\n    def __init__(self):\n        time.sleep(60)\n"
        "    def sample_groups(self, rng, n, g): return []\n    def grade(self, group, i, c): return None\n"
        "    def step_metrics(self, groups, grades, lengths): return {}\n"
    )
    s = CustomTaskConfig.model_validate({"class": "slow_task.py:Slow", "root": str(folder), "start_s": 1})
    start = time.monotonic()
    problem = code_problem(s)
    assert problem is not None and problem.startswith("task.custom.class: slow_task.py:Slow") and "\n" not in problem
    assert problem.endswith("(task.custom.start_s)")
    with pytest.raises(RewardFunctionError):
        ClassTask(s)
    assert time.monotonic() - start < 20


def test_root_written_in_a_config_is_refused_in_one_line(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text(
        "task:\n  name: custom\n  custom:\n    data: d.jsonl\n    reward: r.py:f\n    root: /somewhere/else\n"
    )
    with pytest.raises(ConfigError) as raised:
        load_run_config(run)
    assert "\n" not in str(raised.value) and "task.custom.root" in str(raised.value)


def test_harness_survives_a_reward_that_kills_its_process_group(folder, tiny_run_overrides):
    """Through `harness run`: the run fails in one line naming the function, harness exits 1, nothing outlives it."""
    from tests.test_custom_task import _harness, _only_run, _run_file, _sets

    (folder / "data.jsonl").write_text(
        json.dumps({"problem": "1+1=", "answer": "2", "pids": str(folder / "pids.txt")}) + "\n"
    )
    task_yaml = "task:\n  name: custom\n  custom:\n    data: data.jsonl\n    reward: hostile.py:kills_its_group\n"
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    done = _harness(
        "run", str(_run_file(folder, task_yaml)), *_sets(tiny_run_overrides, steps=1), "--tracking-uri", uri, cwd=folder
    )
    assert done == 1
    _, run = _only_run(uri)
    reason = run.data.tags["failure_reason"]
    assert run.info.status == "FAILED" and "\n" not in reason and "hostile.py:kills_its_group" in reason
    assert gone(noted(folder))  # the helper (the reward noted its pid) is gone with harness
