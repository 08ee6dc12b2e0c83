"""Settings of reading a dataset: which of its columns hold what (shared by the math and custom tasks)."""

from __future__ import annotations

from pydantic import BaseModel

from trainer.config import STRICT


class FieldsConfig(BaseModel):
    """Which record fields hold what (a dataset's own column names)."""

    model_config = STRICT

    question: str = "problem"
    """The problem text (a custom task with a `template` reads its slots instead)."""
    answer: str = "answer"
    """The gold answer (math with answer_format gsm8k: the text whose '#### ' line holds it)."""
    solution: str | None = "solution"
    """A worked solution, used for a missing answer's last \\boxed{} (null = none; math only)."""
    id: str | None = None
    """A stable id field (null = a hash of the normalised question, or of the prompt)."""
