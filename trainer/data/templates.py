"""Prompt templates of the Dr. GRPO template study: R1 (R1-Zero's), Qwen-Math (Qwen2.5-Math's chat text), none.

Templates hold a literal `{question}` slot that is filled by plain replacement, not `str.format`:
questions and templates are full of LaTeX braces (`\\boxed{}`).
"""

from __future__ import annotations

SLOT = "{question}"

TEMPLATES: dict[str, str] = {
    "r1": (
        "A conversation between User and Assistant. The User asks a question, and the Assistant solves it. "
        "The Assistant first thinks about the reasoning process in the mind and then provides the User with "
        "the answer. The reasoning process is enclosed within <think> </think> and answer is enclosed within "
        "<answer> </answer> tags, respectively, i.e., <think> reasoning process here </think> "
        "<answer> answer here </answer>.\nUser: " + SLOT + "\nAssistant: <think>"
    ),
    "qwen_math": (
        "<|im_start|>system\nPlease reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n"
        "<|im_start|>user\n" + SLOT + "<|im_end|>\n<|im_start|>assistant\n"
    ),
    "none": SLOT,
}
"""Template name -> prompt text with a `{question}` slot."""

ANSWER_TAG_TEMPLATES = frozenset({"r1"})
"""Templates that ask for the answer inside `<answer>` tags."""


def render_prompt(template: str, question: str) -> str:
    """The prompt for `question` under `template` (a name in TEMPLATES); ValueError for an unknown name."""
    try:
        text = TEMPLATES[template]
    except KeyError:
        raise ValueError(f"unknown template {template!r}; known: {sorted(TEMPLATES)}") from None
    return text.replace(SLOT, question, 1)
