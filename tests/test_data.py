"""trainer.data: loading every format, the data's quirks, answer extraction, templates, dedupe, MathTask."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trainer.data import (
    BENCHMARKS,
    TEMPLATES,
    FieldMap,
    dedupe,
    extract_answer,
    extract_boxed,
    extract_gsm8k,
    load_benchmark,
    load_problems,
    load_records,
    normalise_question,
    records,
    render_prompt,
)
from trainer.data.benchmarks import SHIPPED, benchmark_path, data_dir
from trainer.data.records import Problem, question_id
from trainer.metric_names import task_metric
from trainer.tasks.math import MathTask

ROWS = [
    {"problem": "What is $1+1$?", "answer": "2", "solution": "So $\\boxed{2}$.", "uid": "a"},
    {"problem": "What is  $2+2$?\n", "answer": 4.0, "solution": None, "uid": "b"},
    {"problem": "Pick one.", "answer": ["3\n", "3.0"], "uid": "c"},
    {"problem": "Null answer", "answer": None, "solution": "thus $\\boxed{\\frac{1}{2}}$", "uid": "d"},
    {"problem": "Nothing at all", "answer": None, "solution": None, "uid": "e"},
    {"problem": "Empty", "answer": "", "uid": "f"},
]


def _write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _plain(rows):
    """The same records with every field a string (Arrow needs one type per column)."""
    return [{k: json.dumps(v) if not isinstance(v, str) else v for k, v in r.items()} for r in rows]


# ---- records: every format -------------------------------------------------------------------------------


def test_jsonl_and_json_files(tmp_path):
    rows = _write_jsonl(tmp_path / "d.jsonl", ROWS)
    assert load_records(rows) == ROWS
    (tmp_path / "list.json").write_text(json.dumps(ROWS))
    assert load_records(tmp_path / "list.json") == ROWS
    _write_jsonl(tmp_path / "lines.json", ROWS)  # JSON lines under a .json name
    assert load_records(str(tmp_path / "lines.json")) == ROWS
    (tmp_path / "obj.json").write_text(json.dumps({"rows": ROWS}))
    with pytest.raises(ValueError):
        load_records(tmp_path / "obj.json")
    with pytest.raises(FileNotFoundError):
        load_records(tmp_path / "missing.jsonl")


def test_parquet_file(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"problem": "p1", "answer": 27.0}, {"problem": "p2", "answer": 3.5}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    assert load_records(tmp_path / "d.parquet") == rows
    assert [p.answer for p in load_problems(tmp_path / "d.parquet", fields=FieldMap(solution=None))] == ["27", "3.5"]


def test_hf_dataset_saved_locally(tmp_path):
    """Loading by HF id is exercised on a dataset saved locally in HF format (no hub here)."""
    import datasets

    rows = [{"question": "q1", "answer": "x\n#### 1,234"}, {"question": "q2", "answer": "y\n#### 7"}]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "ds"))
    assert load_records(tmp_path / "ds") == rows
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(rows), "test": datasets.Dataset.from_list(rows[:1])}
    ).save_to_disk(str(tmp_path / "dd"))
    assert load_records(tmp_path / "dd") == rows  # train by default
    assert load_records(tmp_path / "dd", split="test") == rows[:1]
    with pytest.raises(ValueError):
        load_records(tmp_path / "dd", split="validation")
    problems = load_problems(
        tmp_path / "dd", split="test", answer_format="gsm8k", fields=FieldMap(question="question", solution="answer")
    )
    assert [(p.answer, p.solution) for p in problems] == [("1234", rows[0]["answer"])]


def test_directory_of_data_files(tmp_path, monkeypatch):
    """A folder `datasets.load_dataset(dir)` reads (data files, no save_to_disk metadata)."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")  # keep ~/.cache clean
    (tmp_path / "dir").mkdir()
    _write_jsonl(tmp_path / "dir" / "train.jsonl", _plain(ROWS[:2]))
    assert [r["problem"] for r in load_records(tmp_path / "dir")] == [r["problem"] for r in ROWS[:2]]


def test_hub_id_goes_to_load_dataset(monkeypatch, tmp_path):
    import datasets

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    (tmp_path / "datasets--someorg--some-math" / "snapshots" / "abc").mkdir(parents=True)  # cached: no probe
    calls = []

    def fake(source, split=None):
        calls.append((source, split))
        return datasets.Dataset.from_list([{"problem": "p", "answer": "1"}])

    monkeypatch.setattr(datasets, "load_dataset", fake)
    assert load_records("someorg/some-math", split="test") == [{"problem": "p", "answer": "1"}]
    assert calls == [("someorg/some-math", "test")]


# ---- bounds: a file is refused as soon as it passes one -------------------------------------------------------


@pytest.fixture
def small_bounds(monkeypatch):
    """Bounds small enough for a test to pass each with a few kilobytes."""
    monkeypatch.setattr(records, "MAX_DATA_BYTES", 4000)
    monkeypatch.setattr(records, "MAX_LINE_BYTES", 100)
    monkeypatch.setattr(records, "MAX_ROWS", 5)


def test_a_gzip_bomb_is_refused_when_it_expands_past_the_bound(tmp_path, small_bounds, monkeypatch):
    monkeypatch.setattr(records, "MAX_ROWS", 10**6)  # lines of 99 bytes: the byte bound comes first
    for name, payload in [("bomb.jsonl.gz", (b" " * 98 + b"\n") * 10**4), ("bomb.json.gz", b"[" + b" " * 10**6 + b"]")]:
        (tmp_path / name).write_bytes(gzip.compress(payload))  # ~1 kB that expands to 1 MB
        assert (tmp_path / name).stat().st_size < 4000
        with pytest.raises(ValueError, match=rf"{name}: holds more than 4,000 bytes once decompressed \(MAX_DATA"):
            load_records(tmp_path / name)


def test_a_file_over_the_byte_bound_is_refused_before_it_is_read(tmp_path, small_bounds):
    (tmp_path / "big.jsonl").write_bytes(b"\n" * 4001)
    with pytest.raises(ValueError, match=r"big.jsonl: 4,001 bytes, more than 4,000 \(MAX_DATA_BYTES\)"):
        load_records(tmp_path / "big.jsonl")


def test_a_line_over_the_bound_is_refused_after_reading_only_the_bound(tmp_path, small_bounds):
    row = json.dumps({"problem": "x" * 200, "answer": "1"}).encode()
    (tmp_path / "d.jsonl").write_bytes(b'{"problem": "p", "answer": "1"}\n\n' + row + b"\n")
    with pytest.raises(ValueError, match=r"d.jsonl: line 3 holds more than 100 bytes \(MAX_LINE_BYTES\)"):
        load_records(tmp_path / "d.jsonl")

    class Counting(io.BytesIO):
        read_lines: list[int] = []

        def readline(self, size=-1):
            line = super().readline(size)
            self.read_lines.append(len(line))
            return line

    stream = Counting(row * 30)  # one 6 kB line, no newline
    with pytest.raises(ValueError, match="line 1 holds more than 100 bytes"):
        records._json_lines(tmp_path / "d.jsonl", stream)
    assert stream.read_lines == [101]


def test_too_many_rows_are_refused_at_the_first_row_past_the_bound(tmp_path, small_bounds):
    _write_jsonl(tmp_path / "ok.jsonl", [{"n": i} for i in range(5)])
    assert len(load_records(tmp_path / "ok.jsonl")) == 5
    (tmp_path / "six.jsonl").write_text("".join(json.dumps({"n": i}) + "\n" for i in range(6)) + "not json\n")
    with pytest.raises(ValueError, match=r"six.jsonl: more than 5 lines \(MAX_ROWS\)"):
        load_records(tmp_path / "six.jsonl")
    (tmp_path / "blank.jsonl.gz").write_bytes(gzip.compress(b"\n" * 6))  # a bomb of newlines: no rows, many lines
    with pytest.raises(ValueError, match=r"blank.jsonl.gz: more than 5 lines \(MAX_ROWS\)"):
        load_records(tmp_path / "blank.jsonl.gz")
    (tmp_path / "six.json").write_text(json.dumps([{"n": i} for i in range(6)]))
    with pytest.raises(ValueError, match=r"six.json: more than 5 rows \(MAX_ROWS\)"):
        load_records(tmp_path / "six.json")


def test_a_parquet_file_over_a_bound_is_refused_from_its_metadata(tmp_path, small_bounds, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{"n": i} for i in range(6)]), tmp_path / "six.parquet")
    monkeypatch.setattr(pq, "read_table", lambda *a, **k: pytest.fail("read past the metadata"))
    with pytest.raises(ValueError, match=r"six.parquet: 6 rows, more than 5 \(MAX_ROWS\)"):
        load_records(tmp_path / "six.parquet")
    pq.write_table(pa.Table.from_pylist([{"text": "x" * 5000}]), tmp_path / "wide.parquet")
    with pytest.raises(ValueError, match=r"wide.parquet: [\d,]+ bytes uncompressed, more than 4,000 \(MAX_DATA"):
        load_records(tmp_path / "wide.parquet")


def test_a_bad_line_is_named_by_its_number(tmp_path):
    (tmp_path / "d.jsonl").write_bytes(b'{"a": 1}\n{"a": 2,}\n')
    with pytest.raises(ValueError, match=r"d.jsonl: line 2 is not JSON \(Expecting property name"):
        load_records(tmp_path / "d.jsonl")
    (tmp_path / "l.json").write_bytes(b'{"a": 1}\n\xff\n')  # JSON lines under a .json name
    with pytest.raises(ValueError, match=r"l.json: line 2 is not UTF-8 text"):
        load_records(tmp_path / "l.json")


def test_a_hub_id_neither_cached_nor_reachable_is_refused_without_importing_datasets(tmp_path):
    """In a fresh interpreter: offline, or with the hub's port closed, one line and `datasets` never imported; a
    cached copy (as `datasets` names it) is let through to `datasets`."""
    code = (
        "import sys\nfrom trainer.data.records import load_records\n"
        "try:\n    load_records('someorg/SomeMath')\nexcept ValueError as exc:\n    print(exc)\n"
        "print('datasets' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "HF_HOME": str(tmp_path)}
    env.pop("HF_HUB_CACHE", None)
    env.pop("HF_DATASETS_CACHE", None)
    env.pop("HF_DATASETS_OFFLINE", None)

    def run(**extra):
        return subprocess.run(
            [sys.executable, "-c", code], env={**env, **extra}, capture_output=True, text=True, check=True
        ).stdout.splitlines()

    said = "someorg/SomeMath: no file or folder here, nor a hub dataset in the local Hugging Face cache, and "
    assert run(HF_HUB_OFFLINE="1") == [said + "HF_HUB_OFFLINE is set", "False"]
    assert run(HF_HUB_OFFLINE="0", HF_DATASETS_OFFLINE="yes") == [said + "HF_DATASETS_OFFLINE is set", "False"]
    closed = run(HF_HUB_OFFLINE="0", HF_ENDPOINT="http://127.0.0.1:9")  # nothing listens on the discard port
    assert closed[0].startswith(said + "the hub at 127.0.0.1 cannot be reached (") and closed[1:] == ["False"]
    (tmp_path / "datasets" / "someorg___some_math" / "default" / "0.0.0").mkdir(parents=True)
    with pytest.raises(subprocess.CalledProcessError):  # datasets' own error, with datasets imported
        run(HF_HUB_OFFLINE="1")


def test_a_source_that_is_no_path_and_no_hub_id_is_refused_as_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="a/b/c: no such file or folder, and not a hub id"):
        load_records("a/b/c")


# ---- quirks ---------------------------------------------------------------------------------------------


def test_quirks_normalised(tmp_path):
    problems = load_problems(_write_jsonl(tmp_path / "d.jsonl", ROWS), fields=FieldMap(id="uid"), name="toy")
    assert [p.answer for p in problems] == ["2", "4", "3", "\\frac{1}{2}"]  # float, list, null -> boxed
    assert problems.skipped == 2  # no answer and no solution; empty answer
    assert [p.id for p in problems] == ["a", "b", "c", "d"]
    assert problems[0].solution == "So $\\boxed{2}$." and problems[1].solution is None
    assert {p.source for p in problems} == {"toy"}
    assert len(load_problems(tmp_path / "d.jsonl", limit=2)) == 2


def test_ids_hash_the_normalised_question(tmp_path):
    problems = load_problems(_write_jsonl(tmp_path / "d.jsonl", ROWS[:2]))
    assert problems[1].id == question_id("What is $2+2$?") == question_id(" What  is $2+2$? ")
    assert len(problems[0].id) == 16 and problems[0].id != problems[1].id
    assert load_problems(tmp_path / "d.jsonl")[0].id == problems[0].id  # stable across loads


def test_answer_forms(tmp_path):
    rows = [
        {"problem": str(i), "answer": a}
        for i, a in enumerate(
            [
                27.0,
                3,
                0.5,
                "$2n$",
                "$69$,$84$",
                " 7 \n",
                "\\boxed{9}",
                ["", "5\n"],
                "$x$ and $y$",
                "30^\\circ.",
                "1, 2, ...",
            ]
        )
    ]
    answers = [p.answer for p in load_problems(_write_jsonl(tmp_path / "d.jsonl", rows), fields=FieldMap())]
    assert answers == ["27", "3", "0.5", "2n", "69, 84", "7", "9", "5", "$x$ and $y$", "30^\\circ", "1, 2, ..."]


def test_bad_field_map_says_so(tmp_path):
    path = _write_jsonl(tmp_path / "d.jsonl", ROWS)
    with pytest.raises(ValueError, match="question"):
        load_problems(path, fields=FieldMap(question="prompt"))
    with pytest.raises(ValueError, match="answer"):
        load_problems(path, fields=FieldMap(answer="gold", solution=None))
    with pytest.raises(ValueError):
        load_problems(path, answer_format="boxed")


# ---- extraction -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so \\boxed{5}", "5"),
        ("\\boxed{3} no, \\boxed{4}.", "4"),  # the last one
        ("\\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{1}{\\sqrt{2}}"),  # nested braces
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # escaped braces are literal
        ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("\\fbox{7}", "7"),
        ("$\\boxed 5$.", "5"),
        ("the answer is \\boxed 12.", "12"),
        ("\\boxed{1} then \\boxed{2", "1"),  # an unclosed last box is skipped
        ("\\boxed{a \\boxedfoo b}", "a \\boxedfoo b"),  # another command, not a box
        ("\\boxed{}", None),
        ("no box", None),
        ("", None),
    ],
)
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


def test_extract_boxed_on_runaway_text_takes_linear_time():
    """5000 unclosed boxes before 50 kB: one scan (14 ms of CPU on a 2-core AMD EPYC), where a scan from each box
    to the end would step through ~3·10^8 characters (~1 min). In this thread's CPU time, which other
    threads and a busy machine hardly change."""
    import time

    start = time.thread_time()
    assert extract_boxed("\\boxed{5} " + "\\boxed{" * 5000 + "x" * 50000) == "5"
    assert time.thread_time() - start < 1


@pytest.mark.parametrize(
    "text, expected",
    [
        ("She makes 9 * 2 = $<<9*2=18>>18.\n#### 18", "18"),
        ("#### 1,234", "1234"),
        ("#### 1,234,567.", "1234567"),
        ("#### -3", "-3"),
        ("no marker 42", None),
    ],
)
def test_extract_gsm8k(text, expected):
    assert extract_gsm8k(text) == expected


@pytest.mark.parametrize(
    "text, tags, expected",
    [
        ("\\boxed{2} and #### 3", True, "2"),  # box first
        ("so #### 3,000", True, "3000"),
        ("<think>\\boxed{1}</think> <answer> 5 </answer>", True, "5"),  # the tag wins over a box while thinking
        ("<think>x</think> <answer>so \\boxed{7}</answer>", True, "7"),
        ("<think>x</think> <answer> 8", True, "8"),  # generation stopped at `</answer>`
        ("<think>\\boxed{1}</think> <answer> 5 </answer>", False, "1"),
        ("\\boxed{104.}", True, "104"),  # a sentence's period
        ("\\boxed{1, 2, ...}", True, "1, 2, ..."),
        ("<answer></answer>", True, None),
        ("nothing", True, None),
    ],
)
def test_extract_answer(text, tags, expected):
    assert extract_answer(text, answer_tags=tags) == expected


# ---- templates ------------------------------------------------------------------------------------------


def test_templates():
    q = "Find $\\{x\\}$ if $f(x)=\\frac{1}{2}$. {question}"
    assert set(TEMPLATES) == {"r1", "qwen_math", "none"}
    assert render_prompt("none", q) == q
    r1 = render_prompt("r1", q)
    assert r1.startswith("A conversation between User and Assistant.") and r1.endswith(
        f"\nUser: {q}\nAssistant: <think>"
    )
    assert "<answer> answer here </answer>" in r1
    qwen = render_prompt("qwen_math", q)
    assert qwen == (
        "<|im_start|>system\nPlease reason step by step, and put your final answer within \\boxed{}."
        f"<|im_end|>\n<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n"
    )
    with pytest.raises(ValueError):
        render_prompt("chatml", q)


# ---- dedupe ---------------------------------------------------------------------------------------------


def test_dedupe_on_whitespace_normalised_questions():
    pool = [Problem("1", "What is\n 1+1?", "2"), Problem("2", "Other", "3"), Problem("3", "New", "4")]
    kept, removed = dedupe(pool, [[Problem("x", "What is 1+1? ", "2")], [Problem("y", "Other", "3")]])
    assert [p.id for p in kept] == ["3"] and removed == 2
    assert normalise_question(" a \n\t b ") == "a b"


# ---- MathTask -------------------------------------------------------------------------------------------

PROBLEMS = [Problem(str(i), f"What is {i}+{i}?", str(2 * i)) for i in range(10)]


def test_sampling_is_deterministic_and_one_prompt_per_group():
    task = MathTask(PROBLEMS, template="r1")
    a = task.sample_groups(np.random.default_rng(3), 4, 5)
    b = task.sample_groups(np.random.default_rng(3), 4, 5)
    assert a == b and len(a) == 4 and len({g.problem_id for g in a}) == 4  # distinct within a call
    for g in a:
        p = PROBLEMS[int(g.problem_id)]
        assert g.answer == p.answer and g.prompts == (render_prompt("r1", p.question),) * 5
    assert len(task.sample_groups(np.random.default_rng(0), 25, 2)) == 25  # more groups than problems


def test_grading_right_wrong_and_missing():
    task = MathTask(PROBLEMS)
    group = task.sample_groups(np.random.default_rng(0), 1, 3)[0]
    right = task.grade(group, 0, f"Adding up: \\boxed{{{group.answer}}}.")
    wrong = task.grade(group, 1, f"Adding up: \\boxed{{{int(group.answer) + 1}}}.")
    missing = task.grade(group, 2, "I am not sure.")
    assert (right.reward, right.correct, right.info["extracted"]) == (1.0, True, 1)
    assert (wrong.reward, wrong.correct, wrong.info["extracted"]) == (0.0, False, 1)
    assert (missing.reward, missing.correct, missing.info["extracted"]) == (0.0, False, 0)
    assert task.grade(group, 0, f"\\boxed{{{group.answer}}} no wait \\boxed{{-1}}").correct is False  # last box
    assert task.step_metrics([group], [[right, wrong, missing]], [[5, 6, 7]]) == {
        task_metric("no_answer_frac"): pytest.approx(1 / 3)
    }


def test_r1_grading_reads_answer_tags():
    problems = [Problem("h", "Half of one?", "\\frac{1}{2}")]
    r1, qwen = MathTask(problems, template="r1"), MathTask(problems, template="qwen_math")
    group = r1.sample_groups(np.random.default_rng(0), 1, 1)[0]
    text = "maybe \\boxed{3}</think> <answer> 0.5 </answer>"
    assert r1.grade(group, 0, text).correct and not qwen.grade(group, 0, text).correct
    assert r1.grade(group, 0, "x</think> <answer>The answer is $\\frac{2}{4}$.").correct


def test_task_rejects_bad_settings():
    with pytest.raises(ValueError):
        MathTask(PROBLEMS, template="chatml")
    with pytest.raises(ValueError):
        MathTask([])


# ---- the real files, shipped in trainer/data/files -----------------------------------------------------


@pytest.fixture(scope="module")
def data_root() -> Path:
    """The data directory in use: the shipped files, or `$HARNESS_DATA_DIR` where it is set."""
    return data_dir()


def _sources_table() -> dict[str, tuple[int, int, str]]:
    """SOURCES.md's table: shipped file -> (rows, bytes, sha256 of the uncompressed file)."""
    rows = re.findall(
        r"^\| (\S+\.gz) \| (\d+) \| (\d+) \| \d+ \| ([0-9a-f]{64}) \|$", (SHIPPED / "SOURCES.md").read_text(), re.M
    )
    return {f: (int(n), int(size), sha) for f, n, size, sha in rows}


def test_shipped_files_match_their_checksums():
    table = _sources_table()
    shipped = {str(p.relative_to(SHIPPED)) for p in SHIPPED.rglob("*.gz")}
    assert shipped == set(table) and len(table) == 12
    assert {spec.path + ".gz" for spec in BENCHMARKS.values()} <= shipped
    for name, (rows, size, sha) in table.items():
        data = gzip.decompress((SHIPPED / name).read_bytes())
        assert (data.count(b"\n"), len(data), hashlib.sha256(data).hexdigest()) == (rows, size, sha), name


def test_benchmarks_default_to_the_shipped_files(monkeypatch):
    monkeypatch.delenv("HARNESS_DATA_DIR", raising=False)
    assert data_dir() == SHIPPED and benchmark_path("math500") == SHIPPED / "math500" / "test.jsonl.gz"
    assert len(load_benchmark("aime24")) == 30


def test_gzipped_files_read_as_the_files_they_compress(tmp_path):
    plain = _write_jsonl(tmp_path / "p.jsonl", ROWS)
    (tmp_path / "p.jsonl.gz").write_bytes(gzip.compress(plain.read_bytes(), mtime=0))
    (tmp_path / "l.json.gz").write_bytes(gzip.compress(json.dumps(ROWS).encode(), mtime=0))
    assert load_records(tmp_path / "p.jsonl.gz") == load_records(tmp_path / "l.json.gz") == load_records(plain)
    with pytest.raises(FileNotFoundError, match="no such data file"):
        load_records(tmp_path / "missing.jsonl.gz")


@pytest.mark.parametrize(
    "name, rows, skipped",
    [
        ("math500", 500, 0),
        ("aime24", 30, 0),
        ("amc23", 40, 0),
        ("gsm8k", 1319, 0),
        ("minerva", 272, 0),
        ("olympiad_bench", 675, 0),
        ("amc22_23", 83, 0),
        ("math_test5000", 5000, 0),
        ("math_train", 7470, 4),
        ("gsm8k_train", 7473, 0),
        ("drgrpo_math500", 500, 0),
        ("drgrpo_aime24", 30, 0),
    ],
)
def test_every_benchmark_loads_as_it_is(data_root, name, rows, skipped):
    problems = load_benchmark(name, data_dir=data_root)
    assert len(problems) == rows and problems.skipped == skipped
    assert all(p.answer and p.answer == p.answer.strip() and p.source == name for p in problems)


def test_real_quirks(data_root):
    assert load_benchmark("amc23", data_root)[0].answer == "27"  # 27.0
    assert load_benchmark("minerva", data_root)[0].answer == "9.6"  # ["9.6\n"]
    gsm = load_benchmark("gsm8k", data_root)
    raw = [row["answer"].split("#### ")[-1] for row in load_records(benchmark_path("gsm8k", data_root))]
    assert sum("," in a for a in raw) == 14
    assert [p.answer for p in gsm] == [a.replace(",", "") for a in raw]
    math500 = load_benchmark("math500", data_root)
    assert math500[0].id == "test/precalculus/807.json" and len({p.id for p in math500}) == 500
    # math_test5000 has no answer field: the solution's last box equals MATH-500's gold on the shared 500
    boxed = {normalise_question(p.question): p.answer for p in load_benchmark("math_test5000", data_root)}
    assert all(boxed[normalise_question(p.question)] == p.answer for p in math500)


def test_math_test5000_minus_math500_leaves_4500(data_root):
    evals = [load_benchmark(n, data_root) for n in ("math500", "aime24", "amc23", "minerva", "olympiad_bench")]
    pool, removed = dedupe(load_benchmark("math_test5000", data_root), evals)
    assert (len(pool), removed) == (4500, 500)
    train, removed = dedupe(load_benchmark("math_train", data_root), evals)
    assert removed == 0 and len(train) == 7470


def test_data_dir_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("HARNESS_DATA_DIR", str(tmp_path))
    assert data_dir() == tmp_path
    (tmp_path / "aime24").mkdir()
    _write_jsonl(tmp_path / "aime24" / "test.jsonl", [{"id": 1, "problem": "p", "answer": "5", "solution": "s"}])
    assert load_benchmark("aime24")[0] == Problem("1", "p", "5", "s", "aime24")
    with pytest.raises(FileNotFoundError, match="HARNESS_DATA_DIR"):
        load_benchmark("math500")
    with pytest.raises(KeyError):
        load_benchmark("nope")
    assert set(BENCHMARKS) >= {
        "math500",
        "aime24",
        "amc23",
        "gsm8k",
        "minerva",
        "olympiad_bench",
        "amc22_23",
        "math_test5000",
        "math_train",
        "gsm8k_train",
    }
