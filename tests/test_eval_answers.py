"""`python eval/answers.py`: anyone's extract answers graded by the evaluator's grader (issue 46
item 4), and every bad input refused with its line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memworker.corpus.natural import build_natural
from memworker.eval import answers

SOURCE = Path(__file__).resolve().parents[1] / "corpus" / "natural-dev"


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    out = tmp_path_factory.mktemp("natural-dev") / "data"
    build_natural(SOURCE, out, count_tokens=False)
    rows = [json.loads(line) for line in (out / "canonical" / "test.jsonl").read_text("utf-8")
            .splitlines()]
    return out, rows


def _write(tmp_path, lines) -> Path:
    path = tmp_path / "answers.jsonl"
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines),
                    "utf-8")
    return path


def _run(frozen, tmp_path, lines, *extra):
    data, _ = frozen
    path = _write(tmp_path, lines)
    return answers.main(["--set", "natural-dev", "--corpus", str(data), "--answers", str(path),
                         "--out", str(tmp_path / "out"), *extra])


def test_the_gold_scores_in_full_and_the_report_is_written(frozen, tmp_path, capsys):
    _, rows = frozen
    extract = [r for r in rows if r["task"] == "extract"]
    lines = [{"id": r["id"], "output": r["gold"]} for r in extract[:20]]
    assert _run(frozen, tmp_path, lines, "--name", "gold") == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text("utf-8"))
    block = summary["metrics"]["gold"]["extract"]["metrics"]
    assert block["extract_support"]["value"] == 1.0
    assert block["extract_coverage_in_vocab"]["value"] == 1.0
    assert summary["config"]["answers"]["rows_answered"] == 20 and summary["ruler"]
    report = (tmp_path / "out" / "report.md").read_text("utf-8")
    assert "20 of 146 extract rows answered" in report
    assert "extract_support 1.000" in capsys.readouterr().out


def test_empty_answers_and_missing_rows_counted_as_failed(frozen, tmp_path):
    _, rows = frozen
    first = next(r for r in rows if r["task"] == "extract" and r["gold"]["claims"])
    assert _run(frozen, tmp_path, [{"id": first["id"], "output": {"claims": []}}],
                "--missing", "failed") == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text("utf-8"))
    support = summary["metrics"]["answers"]["extract"]["metrics"]["extract_support"]
    assert support["n_rows"] == 146 and support["num"] == 0


def test_paired_against_a_committed_style_folder(frozen, tmp_path):
    _, rows = frozen
    extract = [r for r in rows if r["task"] == "extract"][:10]
    assert _run(frozen, tmp_path, [{"id": r["id"], "output": r["gold"]} for r in extract],
                "--name", "gold") == 0
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "config.json").write_text(json.dumps({"set": "natural-dev"}))
    samples = [json.loads(x) for x in (tmp_path / "out" / "samples.jsonl").read_text(
        "utf-8").splitlines()]
    with open(theirs / "samples.jsonl", "w") as fh:
        for s in samples:
            fh.write(json.dumps({**s, "arm": "empty", "output": {"claims": []}}) + "\n")
    assert _run(frozen, tmp_path, [{"id": r["id"], "output": r["gold"]} for r in extract],
                "--name", "gold", "--against", f"{theirs}:empty") == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text("utf-8"))
    (pair,) = summary["comparisons"]
    assert pair["label"] == "gold - empty" and pair["rows"] == 10


def _claim(row, **change):
    claim = dict(row["gold"]["claims"][0])
    claim.update(change)
    return {"claims": [claim]}


@pytest.mark.parametrize(("case", "message"), [
    ("not json", "line 1: not JSON"),
    ("extra field", "line 1: expected an object with exactly the fields id and output"),
    ("unknown id", "line 1: id: 'no-such-row' is not a row of this set"),
    ("duplicate", "line 2: id: '{id}' is answered twice (first on line 1)"),
    ("another task", "is a reflect row; an answers file holds extract rows only"),
    ("malformed claim", "line 1: output/claims/0/kind: "),
    ("quote not in events", "line 1: output/claims/0/quotes/0: 'not said anywhere' is not in "
                            "the text of event"),
    ("event not in row", "line 1: output/claims/0/source_indices/0: event 150 is not in row"),
])
def test_bad_input_is_refused_with_line_and_field(frozen, tmp_path, capsys, case, message):
    _, rows = frozen
    row = next(r for r in rows if r["task"] == "extract" and r["gold"]["claims"])
    reflect = next(r for r in rows if r["task"] == "reflect")
    good = {"id": row["id"], "output": row["gold"]}
    lines = {
        "not json": ["{not json"],
        "extra field": [{**good, "arm": "x"}],
        "unknown id": [{"id": "no-such-row", "output": row["gold"]}],
        "duplicate": [good, good],
        "another task": [{"id": reflect["id"], "output": row["gold"]}],
        "malformed claim": [{"id": row["id"], "output": _claim(row, kind="guess")}],
        "quote not in events": [{"id": row["id"], "output": _claim(
            row, quotes=["not said anywhere"], source_indices=[row["gold"]["claims"][0][
                "source_indices"][0]])}],
        "event not in row": [{"id": row["id"], "output": _claim(
            row, quotes=["x"], source_indices=[150])}],
    }[case]
    assert _run(frozen, tmp_path, lines) == 2
    err = capsys.readouterr().err
    assert err.startswith("answers: ") and message.format(id=row["id"]) in err, err
    assert not (tmp_path / "out" / "summary.json").exists()  # nothing graded silently
