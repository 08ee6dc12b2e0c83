"""Math data: records and problems from files or HF datasets, named benchmarks, prompt templates, answer extraction."""

from trainer.data.answers import extract_answer, extract_boxed, extract_gsm8k
from trainer.data.benchmarks import (
    BENCHMARKS,
    benchmark_path,
    data_dir,
    dedupe,
    load_benchmark,
)
from trainer.data.records import (
    FieldMap,
    Problem,
    Problems,
    load_problems,
    load_records,
    normalise_question,
)
from trainer.data.templates import TEMPLATES, render_prompt

__all__ = [
    "BENCHMARKS",
    "FieldMap",
    "Problem",
    "Problems",
    "TEMPLATES",
    "benchmark_path",
    "data_dir",
    "dedupe",
    "extract_answer",
    "extract_boxed",
    "extract_gsm8k",
    "load_benchmark",
    "load_problems",
    "load_records",
    "normalise_question",
    "render_prompt",
]
