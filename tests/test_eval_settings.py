"""Evaluation settings are declared once (harness/config/evaluation.py): a run's eval section and `harness eval`."""

import pytest

from harness.cli import _from_options, build_parser
from harness.config.evaluation import EvalConfig, EvalSampling, EvalSettings


def test_the_eval_command_keeps_its_defaults():
    args = build_parser().parse_args(["eval", "--model", "m"])
    assert _from_options(EvalSettings, args).model_dump() == {
        "model": "m",
        "benchmarks": ["math500", "aime24", "amc23", "gsm8k"],
        "k": 1,
        "temperature": 0.6,
        "top_p": 1.0,
        "max_new_tokens": 3000,
        "limit": None,
        "template": "qwen_math",
        "seed": 0,
        "device": "auto",
        "dtype": "auto",
    }


def test_flags_reach_the_settings():
    argv = ["eval", "--model", "m", "--benchmarks", "gsm8k, amc23", "--k", "4", "--top-p", "0.9", "--limit", "3"]
    s = _from_options(EvalSettings, build_parser().parse_args([*argv, "--max-new-tokens", "8", "--template", "r1"]))
    assert (s.benchmarks, s.k, s.top_p, s.limit, s.max_new_tokens, s.template) == (
        ["gsm8k", "amc23"],
        4,
        0.9,
        3,
        8,
        "r1",
    )


def test_a_runs_eval_section_keeps_its_defaults():
    assert EvalConfig().model_dump() == {
        "every": 0,
        "benchmarks": ["math500"],
        "k": 1,
        "temperature": 0.6,
        "top_p": 1.0,
        "max_new_tokens": None,
        "limit": None,
    }
    assert list(EvalConfig.model_fields)[:-1] == list(EvalSampling.model_fields)  # the shared fields, declared once


def test_help_comes_from_the_fields(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["eval", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--k K Samples per problem (avg@k, pass@k, maj@k) (default: 1)" in text
    assert "--template {r1,qwen_math,none} Prompt template (default: qwen_math)" in text


def test_the_template_choices_are_the_templates_there_are():
    from typing import get_args

    from trainer.config import Template
    from trainer.data.templates import TEMPLATES

    assert set(get_args(Template)) == set(TEMPLATES)
