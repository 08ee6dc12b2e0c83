"""Problems from local files, local HF datasets or HF hub ids, with a field mapping and the data's quirks normalised.

Quirks handled by `load_problems` (see trainer/data/files/SOURCES.md):

- answers as floats (`27.0` -> `"27"`) or ints -> strings;
- answers as lists (Minerva, OlympiadBench): the elements are alternative spellings of ONE answer
  (`["0.01\\n", "0.02\\n"]`, `["4.4e7\\n", "4.4 \\times 10^7\\n"]`), so the first non-empty one is kept, stripped;
  joining them would make a different answer;
- answers stored boxed (`\\boxed{5}`) -> the box's content;
- answers wrapped in math delimiters (`$2n$`, `$69$,$84$`) -> the inner text (`2n`, `69, 84`);
- a final period (`30^\\circ.`) is dropped, as in extracted answers;
- a null or empty answer (or none at all, as in math_test5000) -> the last `\\boxed{}` of the solution when
  there is one, else the record is skipped and counted in `Problems.skipped`;
- `answer_format="gsm8k"`: the answer is the text after `#### ` with thousands commas removed.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

from trainer.data.answers import clean_answer, extract_boxed, extract_gsm8k
from trainer.data.hub import dataset_cached, hub_unreachable, is_repo_id

log = logging.getLogger(__name__)
_DOLLARS = re.compile(r"\s*\$([^$]+)\$(?:\s*,\s*\$([^$]+)\$)*\s*\.?\s*")
_CHUNK = 1 << 20

MAX_DATA_BYTES = 256 << 20
"""The most bytes a data file may hold, or expand to when gzipped: 256 MiB, 60 times the largest shipped file
(gsm8k's train, 4.2 MB) and above any math RL prompt set we know. As Python rows a file takes about twice its bytes
when its rows are text, up to 24 times when they are many tiny values: at most ~6 GiB, in harness's process and
again in each job's."""
MAX_LINE_BYTES = 1 << 20
"""The most bytes one line of JSON lines may hold, its newline included: 1 MiB, 90 times the longest shipped row
(11 kB, in aime24)."""
MAX_ROWS = 1_000_000
"""The most rows a dataset may have (for JSON lines: lines, blank ones included): 130 times the largest shipped set
(gsm8k's train, 7,473 rows), and about what 4,000 steps of 256 prompts see once."""


@dataclass(frozen=True)
class Problem:
    """One question with its gold answer."""

    id: str
    question: str
    answer: str
    solution: str | None = None
    source: str = ""


@dataclass(frozen=True)
class FieldMap:
    """Which record fields hold the question, the answer, a worked solution and an id (None: absent)."""

    question: str = "problem"
    answer: str = "answer"
    solution: str | None = "solution"
    id: str | None = None


class Problems(list):
    """A list of Problem that also says how many records were skipped for want of an answer."""

    def __init__(self, problems=(), skipped: int = 0):
        super().__init__(problems)
        self.skipped = skipped


def normalise_question(text: str) -> str:
    """Whitespace-normalised question text (runs of whitespace -> one space, ends stripped): the dedupe key."""
    return " ".join(str(text).split())


def question_id(question: str) -> str:
    """Stable id from the normalised question: the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(normalise_question(question).encode("utf-8")).hexdigest()[:16]


def load_records(source: str | Path, split: str | None = None) -> list[dict[str, Any]]:
    """Rows of a `.jsonl`, `.json` (a list, or JSON lines), `.parquet` file, a local HF dataset directory
    (`save_to_disk` output, or anything `datasets.load_dataset(dir)` reads) or an HF hub id.
    A `.jsonl.gz` / `.json.gz` file is read as the file it compresses, as a stream.

    `split` picks the split of a dataset with several (default: the only one, else `train`/`test` if present).
    A file is read within `MAX_DATA_BYTES`, `MAX_LINE_BYTES` and `MAX_ROWS`, refused (one-line `ValueError`) as
    soon as it passes one; a hub id neither cached nor reachable is refused before `datasets` is imported.
    """
    path = Path(source)
    if path.is_file():
        gzipped = path.suffix.lower() == ".gz"
        suffix = Path(path.stem).suffix.lower() if gzipped else path.suffix.lower()
        if suffix == ".parquet" and not gzipped:
            return _parquet_rows(path)
        if not gzipped and (size := path.stat().st_size) > MAX_DATA_BYTES:
            raise ValueError(f"{path}: {size:,} bytes, more than {MAX_DATA_BYTES:,} (MAX_DATA_BYTES)")
        with gzip.open(path, "rb") if gzipped else open(path, "rb") as stream:
            if suffix != ".json":
                return _json_lines(path, stream)
            data = _bounded_read(path, stream)
        try:
            rows = json.loads(data)
        except ValueError:
            rows = None  # JSON lines under a .json name (or not JSON: the lines say where)
        if isinstance(rows, dict):
            raise ValueError(f"{path}: expected a JSON list of records, got an object")
        if not isinstance(rows, list):
            return _json_lines(path, io.BytesIO(data))
        if len(rows) > MAX_ROWS:
            raise ValueError(f"{path}: more than {MAX_ROWS:,} rows (MAX_ROWS)")
        return rows
    if not path.is_dir() and path.suffix.lower() in {".jsonl", ".json", ".parquet", ".gz"}:
        raise FileNotFoundError(f"no such data file: {path}")  # before importing datasets, which takes a second
    if not path.is_dir():
        _check_hub_id(str(source))
    import datasets

    if path.is_dir():
        if (path / "dataset_info.json").exists() or (path / "dataset_dict.json").exists():
            return _rows(datasets.load_from_disk(str(path)), split, str(path))
        return _rows(datasets.load_dataset(str(path), split=split), split, str(path))
    return _rows(datasets.load_dataset(str(source), split=split), split, str(source))


def _bounded_read(path: Path, stream: BinaryIO) -> bytearray:
    """All of `stream`, read in chunks and refused past `MAX_DATA_BYTES` (a gzip bomb never expands further)."""
    data = bytearray()
    while chunk := stream.read(min(_CHUNK, MAX_DATA_BYTES + 1 - len(data))):
        data += chunk
        if len(data) > MAX_DATA_BYTES:
            raise ValueError(f"{path}: holds more than {MAX_DATA_BYTES:,} bytes{_expanded(path)} (MAX_DATA_BYTES)")
    return data


def _json_lines(path: Path, stream: BinaryIO) -> list[Any]:
    """The rows of JSON lines in `stream`, blank lines skipped. A line is refused as soon as `MAX_LINE_BYTES` of it
    are read, the file at its first line past `MAX_ROWS` (a blank one too: a bomb of newlines stops there) or
    `MAX_DATA_BYTES`."""
    rows: list[Any] = []
    size = 0
    for number, line in enumerate(iter(lambda: stream.readline(MAX_LINE_BYTES + 1), b""), 1):
        size += len(line)
        if len(line) > MAX_LINE_BYTES:
            raise ValueError(f"{path}: line {number} holds more than {MAX_LINE_BYTES:,} bytes (MAX_LINE_BYTES)")
        if size > MAX_DATA_BYTES:
            raise ValueError(f"{path}: holds more than {MAX_DATA_BYTES:,} bytes{_expanded(path)} (MAX_DATA_BYTES)")
        if number > MAX_ROWS:
            raise ValueError(f"{path}: more than {MAX_ROWS:,} lines (MAX_ROWS)")
        if line.isspace():
            continue
        try:
            rows.append(json.loads(line.decode("utf-8")))
        except UnicodeDecodeError:
            raise ValueError(f"{path}: line {number} is not UTF-8 text") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: line {number} is not JSON ({exc.msg} at column {exc.colno})") from None
    return rows


def _expanded(path: Path) -> str:
    return " once decompressed" if path.suffix.lower() == ".gz" else ""


def _parquet_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a parquet file, whose row count and uncompressed size are read from its metadata first."""
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(path).metadata
    if meta.num_rows > MAX_ROWS:
        raise ValueError(f"{path}: {meta.num_rows:,} rows, more than {MAX_ROWS:,} (MAX_ROWS)")
    size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    if size > MAX_DATA_BYTES:
        raise ValueError(f"{path}: {size:,} bytes uncompressed, more than {MAX_DATA_BYTES:,} (MAX_DATA_BYTES)")
    return pq.read_table(path).to_pylist()


def _check_hub_id(source: str) -> None:
    """Refuse, in one line and without `datasets`, a source that is no local path and no hub dataset to be had."""
    if not is_repo_id(source):
        raise FileNotFoundError(f"{source}: no such file or folder, and not a hub id")
    if dataset_cached(source):
        return
    if why := hub_unreachable(("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")):
        raise ValueError(
            f"{source}: no file or folder here, nor a hub dataset in the local Hugging Face cache, and {why}"
        )


def _rows(data: Any, split: str | None, where: str) -> list[dict[str, Any]]:
    """Rows of a Dataset, or of one split of a DatasetDict, refused past `MAX_ROWS` or `MAX_DATA_BYTES`."""
    if isinstance(data, dict):  # a DatasetDict
        names = list(data.keys())
        if split is None:
            split = names[0] if len(names) == 1 else next((s for s in ("train", "test") if s in names), None)
        if split not in names:
            raise ValueError(f"{where}: choose a split among {names} (got {split!r})")
        data = data[split]
    if data.num_rows > MAX_ROWS:
        raise ValueError(f"{where}: {data.num_rows:,} rows, more than {MAX_ROWS:,} (MAX_ROWS)")
    if data.data.nbytes > MAX_DATA_BYTES:
        raise ValueError(f"{where}: {data.data.nbytes:,} bytes in Arrow, more than {MAX_DATA_BYTES:,} (MAX_DATA_BYTES)")
    return data.to_list()


def normalise_answer(value: Any) -> str | None:
    """A record's answer as a string (None when missing or empty); see the module doc for the rules."""
    if isinstance(value, (list, tuple)):
        value = next((v for v in value if normalise_answer(v) is not None), None)
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return str(int(value)) if value.is_integer() else repr(value)
    text = str(value).strip()
    if "\\boxed" in text or "\\fbox" in text:
        text = extract_boxed(text) or ""
    whole = _DOLLARS.fullmatch(text)
    if whole:
        text = ", ".join(part.strip() for part in re.findall(r"\$([^$]+)\$", text))
    return text or None


def load_problems(
    source: str | Path,
    *,
    fields: FieldMap = FieldMap(),
    split: str | None = None,
    answer_format: Literal["plain", "gsm8k"] = "plain",
    limit: int | None = None,
    name: str | None = None,
) -> Problems:
    """Problems from `source` (see `load_records`), first `limit` usable ones; `Problem.source` = `name` or
    `source`. Records without a usable answer are skipped and counted in the result's `skipped`.
    Ids: the `fields.id` value as a string, else `question_id` of the question."""
    if answer_format not in ("plain", "gsm8k"):
        raise ValueError(f"answer_format must be 'plain' or 'gsm8k', got {answer_format!r}")
    records = load_records(source, split)
    out, skipped = Problems(), 0
    for i, row in enumerate(records):
        if limit is not None and len(out) >= limit:
            break
        if fields.question not in row:
            raise ValueError(f"{source}: record {i} has no question field {fields.question!r}; fields: {sorted(row)}")
        question = str(row[fields.question])
        solution = row.get(fields.solution) if fields.solution else None
        solution = str(solution) if solution not in (None, "") else None
        raw = row.get(fields.answer)
        if answer_format == "gsm8k":
            answer = extract_gsm8k(str(raw)) if raw is not None else None
        else:
            answer = normalise_answer(raw)
        if answer is None and solution is not None:
            answer = extract_boxed(solution)
        answer = clean_answer(answer)
        if answer is None:
            skipped += 1
            continue
        pid = str(row[fields.id]) if fields.id and row.get(fields.id) is not None else question_id(question)
        out.append(Problem(id=pid, question=question, answer=answer, solution=solution, source=name or str(source)))
    if records and not out:
        raise ValueError(
            f"{source}: none of {len(records)} records has an answer in {fields.answer!r} "
            f"or a boxed solution in {fields.solution!r}"
        )
    if skipped:
        log.info("%s: skipped %d records without an answer", name or source, skipped)
    out.skipped = skipped
    return out
