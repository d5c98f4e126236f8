"""The main job's last step (`python train/run.py --stage general --profile cpu`): the held-out
evaluation of the release it exported and the table it prints. The table is a pure function of
summary.json (checked on a trimmed real summary and on a fresh evaluator run with the rules arm
under three names); the evaluator's arguments, the stale-folder rule and the flags are checked
here; the whole step on a real tiny release (GGUF arms through llama.cpp, the receipt merge,
--no-eval, --no-export, a rerun that runs nothing) is in tests/test_export.py (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memworker import pipeline
from memworker.eval.cli import main as eval_main
from memworker.eval.summary import coverage_line, table_lines
from memworker.hashing import sha256_file

FIXTURE = Path(__file__).parent / "fixtures" / "heldout-summary-trimmed.json"


def test_table_of_the_first_release_summary():
    """Real figures of the first release (64 held-out rows): base, student, rules per task
    (with its count where the metric is one), then student - base and student - rules with
    their paired intervals."""
    summary = json.loads(FIXTURE.read_text())
    lines = table_lines(summary)
    assert lines[0] == ("evaluation of 64 held-out rows, max tokens 512 for every arm; "
                        "value n=rows [95 % interval]:")
    words = [" ".join(line.split()) for line in lines]
    assert words[1] == "task metric base student rules student - base student - rules"
    assert words[2] == ("extract extract_f1 0.000 n=32 [0.000, 0.000] 0.000 n=32 [0.000, 0.000] "
                        "0.317 n=32 [0.186, 0.457] +0.000 [0.000, 0.000] -0.317 [-0.464, -0.177]")
    assert words[4] == ("reflect reflect_correct 0.000 0/16 n=16 [0.000, 0.000] 0.250 4/16 n=16 "
                        "[0.062, 0.438] 0.750 12/16 n=16 [0.562, 0.938] +0.250 [0.062, 0.500] "
                        "-0.500 [-0.750, -0.188]")
    assert lines[3].startswith("consolidate consolidate_correct 0.000 0/16 n=16")
    assert len(lines) == 5  # the trimmed summary has no coverage or support: no rows for them


def test_the_table_shows_the_gates_extraction_metrics_against_the_rules():
    """Where the summary has extraction coverage and support (every evaluation since ruler 2),
    they follow extract_f1 with their counts (facts, claims) and student - rules, the release
    gate's comparison: what the main job's student does against the rules on its rows."""
    summary = json.loads(FIXTURE.read_text())
    for arm, (num, den) in {"base": (0, 43), "student": (5, 43), "rules": (3, 43)}.items():
        summary["metrics"][arm]["extract"]["metrics"]["extract_coverage"] = {
            "value": num / den, "num": num, "den": den, "n_rows": 7, "ci": [0.0, 0.2]}
    versus = next(c for c in summary["comparisons"] if c["b"] == "rules")
    versus["tasks"]["extract"]["extract_coverage"] = {"diff": 2 / 43, "ci": [0.0, 0.105]}
    words = [" ".join(line.split()) for line in table_lines(summary)]
    assert words[3] == ("extract extract_coverage 0.000 0/43 n=7 [0.000, 0.200] 0.116 5/43 n=7 "
                        "[0.000, 0.200] 0.070 3/43 n=7 [0.000, 0.200] – +0.047 [0.000, 0.105]")
    assert [w.split()[1] for w in words[2:]] == [
        "extract_f1", "extract_coverage", "consolidate_correct", "reflect_correct"]


def test_the_header_says_when_the_evaluation_is_limited():
    summary = json.loads(FIXTURE.read_text())
    summary["config"].update(limit=16, rows_in_set=64)
    summary["rows"] = 16
    assert table_lines(summary)[0].startswith(
        "evaluation of the first 16 of the 64 held-out rows (not the full evaluation)")
    summary["config"].update(limit=None)
    summary["rows"] = 64
    assert coverage_line(summary) == "all 64 held-out rows"


def test_table_of_a_fresh_evaluation(tiny_corpus, tmp_path, capsys):
    """eval/run.py for real (the rules arm as base, student and rules) on the first 4 of the
    tiny corpus's held-out rows: the table shows the summary's own figures and its n."""
    out = tmp_path / "eval"
    assert eval_main(["--arm", "base=rules", "--arm", "student=rules", "--arm", "rules",
                      "--set", "heldout", "--corpus", str(tiny_corpus), "--limit", "4",
                      "--max-tokens", "512", "--out", str(out), "--no-plots",
                      "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    total = len((tiny_corpus / "heldout.jsonl").read_text().splitlines())
    assert summary["config"]["rows_in_set"] == total > 4 and summary["rows"] == 4
    lines = table_lines(summary)
    assert lines[0].startswith(f"evaluation of the first 4 of the {total} held-out rows (not the full "
                               "evaluation), max tokens 512")
    by_row = {tuple(line.split()[:2]): line for line in lines[2:]}
    for task, metric in (("extract", "extract_f1"), ("extract", "extract_coverage"),
                         ("extract", "extract_support"), ("consolidate", "consolidate_correct"),
                         ("reflect", "reflect_correct")):
        entry = summary["metrics"]["rules"].get(task, {}).get("metrics", {}).get(metric)
        if entry is None:
            assert by_row[task, metric].split()[2:] == ["–"] * 5
            continue
        count = (f" {entry['num']}/{entry['den']}" if isinstance(entry.get("num"), int)
                 else "")
        cell = f"{entry['value']:.3f}{count} n={entry['n_rows']} [{entry['ci'][0]:.3f}, " \
               f"{entry['ci'][1]:.3f}]"
        assert by_row[task, metric].count(cell) == 3  # the same rules under three names
        assert by_row[task, metric].endswith("+0.000 [0.000, 0.000]   +0.000 [0.000, 0.000]")
    assert "extract" in summary["metrics"]["rules"]


def _args(tmp_path: Path, *extra: str):
    args = pipeline.build_parser().parse_args(
        ["--stage", "general", "--runs-dir", str(tmp_path / "runs"), "--release-dir",
         str(tmp_path / "release"), *extra])
    return args


def test_eval_plan_arguments(tmp_path):
    release = tmp_path / "release"
    release.mkdir()
    (release / "release-receipt.json").write_text(json.dumps({"student": {"gguf": "s-q8_0.gguf"}}))
    stage = {"stage": "general", "config": {"corpus": "data/corpus"}}
    argv, out, ggufs = pipeline.eval_plan(stage, _args(tmp_path, "--receipts-dir",
                                                   str(tmp_path / "receipts")))
    assert argv == ["--arm", f"base={release / 'base-q8_0.gguf'}",
                    "--arm", f"student={release / 's-q8_0.gguf'}", "--arm", "rules",
                    "--set", "heldout", "--corpus", "data/corpus", "--out", str(out),
                    "--max-tokens", str(pipeline.EVAL_MAX_TOKENS),
                    "--into-receipt", str(tmp_path / "receipts" / "release-receipt.json"),
                    "--release", str(release), "--limit", "16"]
    assert out == tmp_path / "runs" / "eval" / "heldout"
    assert ggufs == {"base": release / "base-q8_0.gguf", "student": release / "s-q8_0.gguf"}
    argv, _, _ = pipeline.eval_plan(stage, _args(tmp_path, "--receipts-dir", "", "--eval-rows",
                                                  "0"))
    assert "--limit" not in argv
    assert argv[argv.index("--into-receipt") + 1] == str(release / "release-receipt.json")


def test_flags(tmp_path, capsys):
    assert _args(tmp_path).eval_rows == 16 and not _args(tmp_path).no_eval
    assert _args(tmp_path, "--no-eval").no_eval
    with pytest.raises(SystemExit):
        pipeline.main(["--stage", "general", "--eval-rows", "-1"])
    assert "--eval-rows must be 0" in capsys.readouterr().err
    receipt = {"stage": "general"}
    assert pipeline._exports(receipt, _args(tmp_path))
    assert not pipeline._exports(receipt, _args(tmp_path, "--no-export"))
    assert not pipeline._exports({**receipt, "backend": "mlx"}, _args(tmp_path))


def _eval_folder(tmp_path, corpus, config_arms, samples: str):
    """GGUFs base and student, the main job's evaluator arguments for them, and an evaluation
    folder whose config.json is what eval/run.py records for `config_arms` (and rules) and whose
    samples.jsonl holds `samples`."""
    from memworker.eval.cli import planned_config

    ggufs = {"base": tmp_path / "b.gguf", "student": tmp_path / "s.gguf"}
    for name, path in ggufs.items():
        path.write_bytes(name.encode())
    out = tmp_path / "eval" / "heldout"

    def argv(arms):
        return [*(x for a in arms for x in ("--arm", f"{a}={ggufs[a]}")), "--arm", "rules",
                "--set", "heldout", "--corpus", str(corpus), "--out", str(out),
                "--max-tokens", str(pipeline.EVAL_MAX_TOKENS), "--limit", "16"]

    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(planned_config(argv(config_arms))[1]))
    (out / "samples.jsonl").write_text(samples)
    return ggufs, out, argv(("base", "student"))


def test_a_folder_of_other_ggufs_is_moved_aside_not_reused(tiny_corpus, tmp_path, capsys):
    ggufs, out, argv = _eval_folder(tmp_path, tiny_corpus, ("base", "student"), "".join(
        json.dumps({"id": "r1", "arm": a}) + "\n" for a in ("base", "student"))
        + '{"id": "r2", "ar')
    assert pipeline.retire_stale_eval(argv) is None  # same: it resumes
    assert (out / "config.json").is_file()
    ggufs["student"].write_bytes(b"another student")
    aside = pipeline.retire_stale_eval(argv)
    assert aside is not None and aside.name.startswith("heldout.stale-")
    assert not out.exists() and (aside / "config.json").is_file()
    said = capsys.readouterr().out
    assert "another model for arm 'student'" in said and "moved to" in said
    assert "name the arm differently" not in said  # eval's advice is what the main job does
    assert pipeline.retire_stale_eval(argv) is None  # nothing there yet


def test_a_folder_where_only_the_base_ran_resumes_with_a_new_student(tiny_corpus, tmp_path):
    """The base arm evaluated first alone (its config names only the base): adding the student
    and rules later reuses the base rows; a base of other bytes still retires the folder."""
    ggufs, out, argv = _eval_folder(tmp_path, tiny_corpus, ("base",),
                                    json.dumps({"id": "r1", "arm": "base"}) + "\n")
    assert pipeline.retire_stale_eval(argv) is None
    ggufs["base"].write_bytes(b"another base")
    assert pipeline.retire_stale_eval(argv) is not None


def test_a_folder_of_another_sampler_or_without_its_config_is_moved_aside(tiny_corpus, tmp_path,
                                                                           capsys):
    """The same check as eval/run.py's (continue_config): another token cap, or samples whose
    config.json is gone (nothing says what made them), retire the folder; a damaged
    samples.jsonl is reported to the caller, not moved."""
    from memworker.eval.runner import EvalError

    ggufs, out, argv = _eval_folder(tmp_path, tiny_corpus, ("base", "student"),
                                    json.dumps({"id": "r1", "arm": "base"}) + "\n")
    cap = argv.index("--max-tokens") + 1
    other = [*argv[:cap], "512", *argv[cap + 1:]]
    aside = pipeline.retire_stale_eval(other)
    assert aside is not None and "another sampler" in capsys.readouterr().out
    aside.rename(out)
    (out / "config.json").unlink()
    assert pipeline.retire_stale_eval(argv) is not None
    assert "no readable config.json" in capsys.readouterr().out
    (tmp_path / "b").mkdir()
    _, out, argv = _eval_folder(tmp_path / "b", tiny_corpus, ("base",),  # a bad line mid-file
                                '{"id": "r1", "ar\n' + json.dumps({"id": "r2", "arm": "base"}))
    with pytest.raises(EvalError):
        pipeline.retire_stale_eval(argv)
    assert out.exists()


def test_a_fuller_evaluation_in_the_receipt_is_not_replaced(tmp_path):
    """A release receipt that already holds a held-out evaluation of the same GGUFs on more rows
    (the full evaluation) keeps it: the main job's limited one is not merged over it."""
    ggufs = {"base": tmp_path / "b.gguf", "student": tmp_path / "s.gguf"}
    for name, path in ggufs.items():
        path.write_bytes(name.encode())
    full = {"rows": 64, "config": {"gguf": {a: {"sha256": sha256_file(p)}
                                            for a, p in ggufs.items()}}}
    (tmp_path / "release-receipt.json").write_text(json.dumps({"evaluation": {"heldout": full}}))
    assert pipeline._fuller_evaluation(tmp_path, ggufs, 16) == 64
    assert pipeline._fuller_evaluation(tmp_path, ggufs, 0) is None      # all rows: merged
    assert pipeline._fuller_evaluation(tmp_path, ggufs, 64) is None
    ggufs["student"].write_bytes(b"another student")
    assert pipeline._fuller_evaluation(tmp_path, ggufs, 16) is None     # another release
