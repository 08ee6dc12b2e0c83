"""Final-answer extraction from completions and reference solutions: `\\boxed{}`, GSM8K's `####`, `<answer>` tags."""

from __future__ import annotations

import re

BOX_COMMANDS = ("\\boxed", "\\fbox")
_GSM8K = re.compile(r"####\s*(.+)")
_ANSWER_OPEN, _ANSWER_CLOSE = "<answer>", "</answer>"
_OPEN_GROUP = re.compile(r" *\{")
_FINAL_PERIOD = re.compile(r"(?<!\.)\.\s*$")  # `104.` but not `1, 2, ...`


def extract_boxed(text: str) -> str | None:
    """Content of the LAST `\\boxed{...}` or `\\fbox{...}` (nested and escaped braces handled), or of
    `\\boxed 5` (the next token); unclosed boxes are passed over; None if there is no complete one."""
    if not text:
        return None
    boxes = sorted((m.start(), m.end()) for cmd in BOX_COMMANDS for m in re.finditer(re.escape(cmd), text))
    stop = len(text)
    for start, end in reversed(boxes):
        content = _box_content(text, end, stop)
        if content is not None:
            return content or None
        if _OPEN_GROUP.match(text, end):  # an unclosed group: every earlier one still open here stays open,
            stop = start  # so their scans can stop here (linear, not quadratic, on runaway text)
    return None


def _box_content(text: str, i: int, stop: int) -> str | None:
    """Argument of a box command ending at `i`: a balanced `{...}` group closing before `stop` or, after a
    space, one token."""
    if i < len(text) and text[i].isalpha():  # `\boxedfoo` is another command
        return None
    j = i
    while j < len(text) and text[j] == " ":
        j += 1
    if j < len(text) and text[j] == "{":
        depth, k = 0, j
        while k < stop:
            c = text[k]
            if c == "\\":  # `\{`, `\}` and `\\` are literal, skip the escaped character
                k += 2
                continue
            depth += (c == "{") - (c == "}")
            if depth == 0:
                return text[j + 1 : k].strip()
            k += 1
        return None
    if j > i:  # `\boxed 5`: the token up to whitespace or a math delimiter
        token = re.match(r"[^\s$]+", text[j:])
        return token.group(0).rstrip(".,;") if token else None
    return None


def extract_gsm8k(text: str) -> str | None:
    """The number after the last `####`, thousands commas removed (`#### 1,234` -> `1234`)."""
    if not text:
        return None
    hits = _GSM8K.findall(text)
    if not hits:
        return None
    answer = hits[-1].strip().replace(",", "").rstrip(".").strip()
    return answer or None


def extract_answer_tag(text: str) -> str | None:
    """Content of the last `<answer>...</answer>` (an unclosed final tag runs to the end: generation
    often stops at the `</answer>` stop string and drops it); None if absent or empty."""
    if not text or _ANSWER_OPEN not in text:
        return None
    content = text[text.rindex(_ANSWER_OPEN) + len(_ANSWER_OPEN) :]
    content = content.split(_ANSWER_CLOSE, 1)[0].strip()
    return content or None


def find_answer(text: str, *, answer_tags: bool = True) -> tuple[str | None, str]:
    """(answer, where it came from): `"tag_boxed"`, `"tag"`, `"boxed"`, `"gsm8k"` or `"none"`.

    With `answer_tags`, an `<answer>` tag wins (a box inside it, else its whole content: the R1 format
    puts the final answer there and may box other things while thinking); then the last box; then `####`.
    A sentence's final period is dropped (`\\boxed{104.}` -> `104`).
    """
    answer, source = _find(text, answer_tags)
    answer = clean_answer(answer)
    return (answer, source) if answer else (None, "none")


def clean_answer(answer: str | None) -> str | None:
    """`answer` stripped, without a sentence's final period (`104.` -> `104`; `1, 2, ...` kept); None if empty."""
    return (_FINAL_PERIOD.sub("", answer).strip() or None) if answer else None


def _find(text: str, answer_tags: bool) -> tuple[str | None, str]:
    if answer_tags:
        tag = extract_answer_tag(text)
        if tag is not None:
            boxed = extract_boxed(tag)
            return (boxed, "tag_boxed") if boxed is not None else (tag, "tag")
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed, "boxed"
    number = extract_gsm8k(text)
    if number is not None:
        return number, "gsm8k"
    return None, "none"


def extract_answer(text: str, *, answer_tags: bool = True) -> str | None:
    """The final answer of `text`: `<answer>` tag (if `answer_tags`), else last box, else `####`; or None."""
    return find_answer(text, answer_tags=answer_tags)[0]
