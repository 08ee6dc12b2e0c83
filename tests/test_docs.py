"""The README and docs/: every relative link and image resolves, the README stays short, and docs/config.md is what
the settings models generate."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.config.reference import main as reference_main
from harness.config.reference import render

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 300
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, with inline code spans removed."""
    out, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(_CODE_SPAN.sub("", line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation dropped but for hyphens, underscores and spaces (markup
    too: backticks, emphasis, a link's brackets), each space a hyphen."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return "".join(c for c in text if c.isalnum() or c in "-_ ").replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings; a repeated one gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match:
            base = slug(match.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    """Every link and image target in a Markdown file's prose (code blocks and code spans left out)."""
    return [m.group(1) for line in _prose_lines(path.read_text(encoding="utf-8")) for m in _LINK.finditer(line)]


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """The relative links of `path` that do not resolve: a missing file or folder, a file outside `root`, or an
    anchor that is no heading of its target. Web and mail links are not followed."""
    path, problems = path.resolve(), []
    for target in links(path):
        if re.match(r"^(https?:|mailto:)", target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.is_relative_to(root.resolve()):
            problems.append(f"{path.name}: {target} points outside the repository")
        elif not dest.exists():
            problems.append(f"{path.name}: {target} does not exist")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            problems.append(f"{path.name}: {target}: no heading #{anchor} in {dest.name}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_image_resolves(page):
    assert broken_links(page) == []


def test_the_checker_finds_broken_links(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Its `section`: two\n")
    (tmp_path / "pic.png").write_bytes(b"")
    page = tmp_path / "README.md"
    page.write_text(
        "# Top\n\n"
        "[ok](docs/a.md) [ok](docs/a.md#its-section-two) [ok](#top) ![ok](pic.png) [web](https://example.com/x)\n"
        "[gone](docs/b.md) ![gone](docs/pic.png) [no heading](docs/a.md#nothing) [no heading](#bottom)\n"
        "[out](../elsewhere.md)\n"
        "`[code](nowhere.md)`\n\n```\n[code](nowhere.md)\n```\n"
    )
    assert broken_links(page, root=tmp_path) == [
        "README.md: docs/b.md does not exist",
        "README.md: docs/pic.png does not exist",
        "README.md: docs/a.md#nothing: no heading #nothing in a.md",
        "README.md: #bottom: no heading #bottom in README.md",
        "README.md: ../elsewhere.md points outside the repository",
    ]


def test_slugs_follow_github():
    assert slug("The objective (`trainer/objective/`)") == "the-objective-trainerobjective"
    assert slug("On the toy with a slipping tutor (2026-11-26)") == "on-the-toy-with-a-slipping-tutor-2026-11-26"
    assert slug("Claims: what a verdict rests on") == "claims-what-a-verdict-rests-on"
    assert slug("`space.<key>`: Dimension") == "spacekey-dimension"


def test_the_readme_is_short():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= README_MAX_LINES


def test_the_readme_links_every_docs_page():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(ROOT / "README.md")}
    pages = set((ROOT / "docs").glob("*.md"))
    assert pages and pages <= linked, sorted(p.name for p in pages - linked)


def test_nothing_points_outside_the_repository():
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"\bGUIDE\b|\bissue #?\d+", text, re.IGNORECASE), page.name


def test_the_config_reference_is_current():
    assert (ROOT / "docs" / "config.md").read_text(encoding="utf-8") == render(), (
        "docs/config.md is stale: run python -m harness.config.reference"
    )


def test_the_config_reference_names_each_key_with_its_docstring():
    from trainer.objective.settings import ObjectiveSettings

    text = render()
    described = " ".join(ObjectiveSettings.model_fields["clip_high"].description.split())
    assert f"| `objective.clip_high` | `float ≥ 0` | required | {described} |" in text
    assert "| `model.toy.task.slip_prob` |" in text and "| `claims[].contrast.from` |" in text
    assert "| `space.<key>.type` |" in text and "| `executor.retries` | `int ≥ 0` | `0` |" in text


def test_check_fails_on_a_stale_reference(tmp_path, capsys):
    out = tmp_path / "config.md"
    assert reference_main(["--out", str(out), "--check"]) == 1  # missing
    assert reference_main(["--out", str(out)]) == 0
    assert reference_main(["--out", str(out), "--check"]) == 0
    out.write_text(out.read_text() + "\n")
    assert reference_main(["--out", str(out), "--check"]) == 1
    assert "stale" in capsys.readouterr().err
