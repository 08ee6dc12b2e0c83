"""A custom task's hostile code through `harness run`: does harness survive, within what memory, leaving nothing?

    python benchmarks/hostile_user_code.py [--only NAME ...]

Each case is one `harness run` of a toy run (1 step, 4 prompts × 4, the default toy model) whose reward function
or task class is hostile: memory at import or per call, a fork bomb, a detached process, killing its process group
or its parent, exiting, printing 1 GB, files named like installed modules beside the config, `root:` in the config,
a class whose `__init__` hangs. For each: harness's exit code and last line, the wall time, the peak resident memory
of harness's whole process tree (sampled every 20 ms: every process under the command, by its resident pages, a
page shared by several processes counted in each: an upper bound), what reached harness's stdout and stderr
(bytes), the processes left running after it ended (those the code noted, and any carrying a helper's token that
did not before the case started), and the marker files of modules that should never be imported. Prints a table
with the machine and its load; writes results/benchmarks/hostile_user_code.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _report import write_json

from trainer.rewards import process_tree

ROOT = Path(__file__).resolve().parents[1]
PAGE = os.sysconf("SC_PAGE_SIZE")
HOSTILE = """
import os, signal, subprocess, sys, time

def _note(pid):
    with open(os.path.join(os.path.dirname(__file__), "pids.txt"), "a") as f:
        f.write(f"{pid}\\n")

def fine(completion, reference, prompt):
    return 1.0

def grows(completion, reference, prompt):
    blocks = []
    while True:
        blocks.append(bytearray(16 * 2**20))

def forks(completion, reference, prompt):
    for _ in range(1000):
        pid = os.fork()
        if pid == 0:
            time.sleep(20)
            os._exit(0)
        _note(pid)
    return 1.0

def detaches(completion, reference, prompt):
    _note(subprocess.Popen(["sleep", "60"], start_new_session=True).pid)
    return 1.0

def kills_its_group(completion, reference, prompt):
    os.killpg(0, signal.SIGKILL)

def exits(completion, reference, prompt):
    os._exit(0)

def kills_its_parent(completion, reference, prompt):
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(15)
    return 1.0

def prints(completion, reference, prompt):
    chunk = "x" * 2**20
    for _ in range(1024):
        sys.stdout.write(chunk)
    return 1.0
"""
HEAVY_IMPORT = (
    "BLOCKS = [bytearray(64 * 2**20) for _ in range(200)]\n\ndef f(completion, reference, prompt):\n    return 1.0\n"
)
SLOW_CLASS = (
    "import time\n\nclass Slow:\n    def __init__(self):\n        time.sleep(3600)\n"
    "    def sample_groups(self, rng, n, g): return []\n    def grade(self, group, i, c): return None\n"
    "    def step_metrics(self, groups, grades, lengths): return {}\n"
)
SHADOWS = ("torch", "mlflow", "transformers", "tokenizers", "safetensors", "sympy", "sqlalchemy", "alembic", "uuid")
TINY = [
    "train.steps=1",
    "rollout.prompts_per_step=4",
    "rollout.group_size=4",
    "rollout.max_new_tokens=16",
]


def custom(reward: str = "hostile.py:fine", extra: str = "") -> str:
    return f"task:\n  name: custom\n  custom:\n    data: data.jsonl\n    reward: {reward}\n{extra}"


CASES = {  # name: (task yaml, what the case is)
    "memory at import": (custom("heavy.py:f"), "a module that allocates 12.5 GiB at import"),
    "memory per call (budget_s 30)": (custom("hostile.py:grows", "    budget_s: 30\n"), "16 MiB blocks until it fails"),
    "1,000 sleeping forks": (custom("hostile.py:forks", "    budget_s: 30\n"), "forks 1,000 children sleeping 20 s"),
    "a detached sleep": (custom("hostile.py:detaches"), "Popen(['sleep', '60'], start_new_session=True)"),
    "killpg(0, SIGKILL)": (custom("hostile.py:kills_its_group"), "kills its process group"),
    "os._exit(0)": (custom("hostile.py:exits"), "exits"),
    "kill(getppid(), 9)": (custom("hostile.py:kills_its_parent"), "kills its parent"),
    "prints 1 GiB": (custom("hostile.py:prints", "    budget_s: 30\n"), "writes 1 GiB to stdout per call"),
    "modules named like installed ones": (custom("plain.py:f"), "torch.py, mlflow.py, ... beside the config"),
    "root in the config": (custom("hostile.py:fine", "    root: /tmp\n"), "root: names another folder"),
    "class __init__ hangs (start_s 5)": (
        "task:\n  name: custom\n  custom:\n    class: slow_task.py:Slow\n    start_s: 5\n",
        "a task class whose __init__ sleeps an hour",
    ),
}


def setup(folder: Path) -> None:
    (folder / "data.jsonl").write_text(
        "".join(json.dumps({"problem": f"{a}+2=", "answer": str(a + 2)}) + "\n" for a in range(8))
    )
    (folder / "hostile.py").write_text(HOSTILE)
    (folder / "heavy.py").write_text(HEAVY_IMPORT)
    (folder / "slow_task.py").write_text(SLOW_CLASS)
    for name in SHADOWS:
        (folder / f"{name}.py").write_text(f"open({str(folder / (name + '.imported'))!r}, 'w').close()\n")
    (folder / "plain.py").write_text(
        "import json, uuid\n\ndef f(completion, reference, prompt):\n    return float(json.loads('1'))\n"
    )


def tree_rss(root: int) -> int:
    pids = [root, *process_tree.descendants(root)]
    total = 0
    for pid in pids:
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            pass
    return total


def tokened() -> list[int]:
    """Live processes carrying any helper's token."""
    mark, out = f"{process_tree.TOKEN_ENV}=".encode(), []
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(e.startswith(mark) for e in env) and process_tree.usage([pid]).processes:
            out.append(pid)
    return out


def run_case(name: str, task_yaml: str, base: Path) -> dict:
    folder = base / name.replace(" ", "_").replace("/", "_").replace("(", "").replace(")", "").replace(",", "")
    folder.mkdir()
    setup(folder)
    toy = (ROOT / "ablations" / "toy_run.yaml").read_text()
    (folder / "run.yaml").write_text(toy.split("rollout:")[0] + task_yaml + "rollout:" + toy.split("rollout:")[1])
    sets = [a for s in TINY for a in ("--set", s)]
    # the console script, as a user runs it (`python -m` would put the config's folder first on harness's own path)
    command = [str(Path(sys.executable).with_name("harness")), "run", "run.yaml", *sets, "--quiet", "--tracking-uri",
               f"sqlite:///{folder / 'mlflow.db'}"]  # fmt: skip
    out_path, err_path = folder / "stdout.txt", folder / "stderr.txt"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before = set(tokened())  # helpers of other programs on this machine (a test suite's, say) are not this case's
    start, peak = time.monotonic(), 0
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        process = subprocess.Popen(command, cwd=folder, stdout=out, stderr=err, env=env, start_new_session=True)
        while process.poll() is None:
            peak = max(peak, tree_rss(process.pid))
            time.sleep(0.02)
    wall = time.monotonic() - start
    time.sleep(0.5)
    noted = [int(p) for p in (folder / "pids.txt").read_text().split()] if (folder / "pids.txt").exists() else []
    left = sorted({p for p in noted if process_tree.usage([p]).processes} | (set(tokened()) - before))
    text = err_path.read_text(errors="replace").strip().splitlines()
    return {
        "case": name,
        "what": CASES[name][1],
        "exit": process.returncode,
        "last_line": text[-1][:200] if text else "",
        "wall_s": round(wall, 2),
        "peak_tree_mb": round(peak / 2**20),
        "stdout_stderr_bytes": out_path.stat().st_size + err_path.stat().st_size,
        "left_running": len(left),
        "imported_markers": sorted(p.stem for p in folder.glob("*.imported")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="case names to run (default: all)")
    args = parser.parse_args()
    names = args.only or list(CASES)
    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        for name in names:
            row = run_case(name, CASES[name][0], Path(tmp))
            rows.append(row)
            print(
                f"{row['case']:<36} exit {row['exit']:>3}  {row['wall_s']:>6.1f} s  peak {row['peak_tree_mb']:>5} MB  "
                f"out {row['stdout_stderr_bytes']:>7} B  left {row['left_running']}  "
                f"imported {','.join(row['imported_markers']) or '-'}\n    {row['last_line']}",
                flush=True,
            )
    machine = {
        "cpu": next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if "model name" in line
            ),
            platform.machine(),
        ),
        "cores": os.cpu_count(),
        "load_before": load_before,
        "load_after": os.getloadavg(),
    }
    print(f"machine: {machine}")
    write_json("hostile_user_code", {"machine": machine, "cases": rows})


if __name__ == "__main__":
    main()
