"""Evidence files: a sweep's claims judged from a few kilobytes of JSON give the store's verdicts to the last digit,
and a file that is not one is refused in one line."""

from __future__ import annotations

import json

import pytest
from test_claims import PLANTED, _planted

from harness.cli import main


def _verdict_lines(out: str) -> list[str]:
    ids = {c["id"] for c in PLANTED}
    return [line for line in out.splitlines() if line.split(":")[0] in ids]


def test_a_sweep_judged_from_its_evidence_file_gives_the_stores_verdicts(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/m.db"
    _planted(uri, PLANTED)
    assert main(["claims", "planted", "--tracking-uri", uri]) == 1
    from_store = _verdict_lines(capsys.readouterr().out)
    kept = tmp_path / "evidence" / "planted.json"
    assert main(["evidence", "planted", "--tracking-uri", uri, "--out", str(kept)]) == 0
    assert "10 runs, 4 claims" in capsys.readouterr().out
    assert kept.stat().st_size < 16 * 1024
    (tmp_path / "m.db").unlink()  # the store is gone: the file alone is judged
    assert main(["claims", str(kept)]) == 1
    assert _verdict_lines(capsys.readouterr().out) == from_store and len(from_store) == 4
    written = json.loads(kept.read_text())
    run = written["runs"][0]
    assert {"job_id", "arm", "seed", "machine", "values", "git_commit"} <= set(run)
    assert "train/length_incorrect_mean @ last-2" in run["values"]
    assert main(["report", str(kept), "--out", str(tmp_path / "report")]) == 0
    assert "| longer | reproduced |" in (tmp_path / "report" / "report.md").read_text()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{", "not a harness evidence file"),
        ('{"format": NaN}', "NaN is not JSON"),
        ('{"format": "harness evidence 1"}', "not a harness evidence file"),
        ("[1, 2]", "not a harness evidence file"),
    ],
)
def test_a_file_that_is_not_evidence_is_one_line_exit_3(text, why, tmp_path, capsys):
    path = tmp_path / "x.json"
    path.write_text(text)
    assert main(["claims", str(path)]) == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and why in err


def test_an_edited_sweep_file_or_a_huge_file_is_refused(tmp_path, capsys):
    from harness.runs.evidence_file import MAX_BYTES

    uri = f"sqlite:///{tmp_path}/m.db"
    _planted(uri, PLANTED)
    kept = tmp_path / "planted.json"
    assert main(["evidence", "planted", "--tracking-uri", uri, "--out", str(kept)]) == 0
    written = json.loads(kept.read_text())
    written["sweep_file"] += "# edited\n"
    kept.write_text(json.dumps(written))
    capsys.readouterr()
    assert main(["claims", str(kept)]) == 3
    assert "does not match its sha256" in capsys.readouterr().err
    with kept.open("w") as f:
        f.truncate(MAX_BYTES + 1)
    assert main(["claims", str(kept)]) == 3
    assert "an evidence file is kilobytes" in capsys.readouterr().err
