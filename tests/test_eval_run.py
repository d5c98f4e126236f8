"""eval/run.py end to end with the rules arm on a tiny corpus: samples, resume after an
interruption, summary, report, plots, receipt merge."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memworker.contracts import TASKS
from memworker.eval import runner
from memworker.eval.cli import main, planned_config
from memworker.eval.summary import merge_into_receipt
from memworker.inference.rules import RulesBackend

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("text,arm", [
    ("rules", runner.Arm("rules", "rules", "")),
    ("r2=rules", runner.Arm("r2", "rules", "")),
    ("base=release/base-q8_0.gguf", runner.Arm("base", "gguf", "release/base-q8_0.gguf")),
    ("s=ollama:mem-worker", runner.Arm("s", "ollama", "mem-worker")),
    ("srv=http://127.0.0.1:8000/v1", runner.Arm("srv", "openai", "http://127.0.0.1:8000/v1")),
])
def test_parse_arm(text, arm):
    assert runner.parse_arm(text) == arm


SPEC_FORMS = ("expected NAME=SPEC (SPEC: a .gguf path, ollama:MODEL, http://host:port/v1 or "
              "rules), or just `rules`")


@pytest.mark.parametrize("text,why", [
    ("base", SPEC_FORMS),                 # no `=`
    ("=x.gguf", SPEC_FORMS),              # no name
    ("b=", SPEC_FORMS),                   # no spec
    ("b=model.bin", "'model.bin' is not a .gguf path, ollama:MODEL, an http(s) URL or rules"),
    ("a b=rules", "the name may use letters, digits, '-', '_' and '.'"),
    ("a/b=rules", "the name may use letters, digits, '-', '_' and '.'"),
])
def test_parse_arm_refuses_unclear_specs(text, why):
    """The error names the --arm value it refuses and says what is wrong with it."""
    with pytest.raises(runner.EvalError) as caught:
        runner.parse_arm(text)
    assert str(caught.value) == f"--arm {text!r}: {why}"


def test_missing_corpus_says_how_to_build_it(tmp_path, capsys):
    assert main(["--arm", "rules", "--corpus", str(tmp_path / "nope"), "--out",
                 str(tmp_path / "o")]) == 2
    assert "python corpus/build.py" in capsys.readouterr().err


class Interrupting:
    """The rules backend, interrupted (as by Ctrl-C) when row number `at` starts."""

    name = "rules"

    def __init__(self, at: int):
        self.rules, self.calls, self.at = RulesBackend(), 0, at

    def bind(self, task, inputs):
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt
        return self.rules.bind(task, inputs)


def test_run_interrupt_resume_summary_and_receipt(tiny_corpus, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    rows = runner.load_eval_rows(tiny_corpus, "test")
    arm = runner.parse_arm("rules")
    with pytest.raises(KeyboardInterrupt):
        runner.run_arm(arm, rows, out, runner.Sampler(), progress=False, backend=Interrupting(4))
    samples = runner.read_samples(out / runner.SAMPLES)
    assert [s["id"] for s in samples] == [r["id"] for r in rows[:3]]
    with open(out / runner.SAMPLES, "ab") as fh:   # killed in the middle of writing a line
        fh.write(b'{"arm":"rules","id":"')

    receipt = tmp_path / "release-receipt.json"
    original = {"model": {"sha256": "ab" * 32}, "files": ["x", "y"], "evaluation": {"old": 1}}
    receipt.write_text(json.dumps(original, indent=2, sort_keys=True) + "\n", "utf-8")
    argv = ["--arm", "rules", "--arm", "again=rules", "--set", "test", "--corpus",
            str(tiny_corpus), "--out", str(out), "--resamples", "200",
            "--into-receipt", str(receipt)]
    # samples whose config.json is missing: nothing says what made them, so they are not joined
    assert main(argv) == 2 and not (out / "config.json").exists()
    # the configuration eval/run.py records before running its first arm
    (out / "config.json").write_text(json.dumps(planned_config(argv)[1]))
    assert main(argv) == 0

    samples = runner.read_samples(out / runner.SAMPLES)
    for name in ("rules", "again"):
        ids = [s["id"] for s in samples if s["arm"] == name]
        assert sorted(ids) == sorted(r["id"] for r in rows), name   # each row exactly once
    s0 = samples[0]
    assert len(s0["prompt_sha256"]) == 64 and s0["attempts"][0]["raw"].startswith("{")
    assert s0["verdicts"]["schema"] == "first_try"

    summary = json.loads((out / "summary.json").read_text())
    assert summary["arms"] == ["rules", "again"]
    assert summary["config"]["prompt_sha256"] and summary["config"]["sampler"]["temperature"] == 0
    comp = summary["comparisons"][0]
    assert comp["label"] == "again - rules"
    diff = comp["tasks"]["reflect"]["reflect_correct"]
    assert diff["diff"] == 0 and diff["mcnemar"]["p"] == 1.0 and diff["ci"] == [0.0, 0.0]
    assert diff["n_rows"] == sum(r["task"] == "reflect" for r in rows)
    ex = summary["metrics"]["rules"]["extract"]["metrics"]["extract_coverage"]
    assert ex["n_rows"] >= 1 and ex["ci"] is not None and 0 <= ex["value"] <= 1
    assert summary["speed"]["rules"]["rows"] == len(rows)
    assert summary["speed"]["rules"]["this_invocation"]["rows_run"] == len(rows) - 3
    report = (out / "report.md").read_text()
    assert "## Paired differences" in report and "again - rules" in report
    for png in ("tasks.png", "temporal.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"

    merged = json.loads(receipt.read_text())
    assert merged["evaluation"]["old"] == 1 and merged["evaluation"]["test"]["rows"] == len(rows)
    rest = {k: v for k, v in merged.items() if k != "evaluation"}
    assert json.dumps(rest, indent=2, sort_keys=True) == json.dumps(
        {k: v for k, v in original.items() if k != "evaluation"}, indent=2, sort_keys=True)
    assert receipt.read_text().startswith('{\n  "evaluation": {')

    # a second run has nothing left to do and reports the same metrics
    assert main(["--arm", "rules", "--set", "test", "--corpus", str(tiny_corpus), "--out",
                 str(out), "--resamples", "200", "--no-plots", "--no-progress"]) == 0
    again = json.loads((out / "summary.json").read_text())
    assert again["metrics"]["rules"] == summary["metrics"]["rules"]
    lines = (out / runner.SAMPLES).read_bytes()
    assert main(["--arm", "rules", "--arm", "never=rules", "--set", "test", "--corpus",
                 str(tiny_corpus), "--out", str(out), "--resamples", "200", "--no-plots",
                 "--no-run"]) == 0
    assert (out / runner.SAMPLES).read_bytes() == lines   # nothing ran
    partial = json.loads((out / "summary.json").read_text())
    assert partial["schema"]["never"]["rows"] == 0 and partial["comparisons"][0]["rows"] == 0
    assert f"`never` 0/{len(rows)}" in (out / "report.md").read_text()


def test_reading_samples_never_writes_and_the_evaluator_repairs_a_cut_line(tmp_path):
    """`read_samples` leaves a last line cut off by an interruption out and the file as it is;
    `repair_samples` (where `run_arm` resumes appending) rewrites it without that line."""
    path = tmp_path / runner.SAMPLES
    whole = b'{"arm":"a","id":"r1"}\n'
    path.write_bytes(whole + b'{"arm":"a","id":"')
    assert runner.read_samples(path) == [{"arm": "a", "id": "r1"}]
    assert path.read_bytes() == whole + b'{"arm":"a","id":"'
    assert runner.repair_samples(path) == [{"arm": "a", "id": "r1"}]
    assert path.read_bytes() == whole
    path.write_bytes(whole[:-1])  # an unterminated last line is ended
    assert runner.read_samples(path) == [{"arm": "a", "id": "r1"}] and path.read_bytes() == whole[:-1]
    runner.repair_samples(path)
    assert path.read_bytes() == whole
    path.write_bytes(b"{cut\n" + whole)  # a line before the last is damage, not an interruption
    for read in (runner.read_samples, runner.repair_samples):
        with pytest.raises(runner.EvalError, match="line 1 is not JSON"):
            read(path)
    assert runner.read_samples(tmp_path / "none.jsonl") == []


def test_samples_join_only_the_configuration_and_models_they_were_made_with(tiny_corpus,
                                                                             tmp_path, capsys):
    """A release's evaluation can span sessions (scripts/release.sh keeps each set's samples in
    receipts/eval/<set>): a later invocation adds arms and rows, but never mixes in samples made
    with another sampler or another model under the same arm name."""
    from memworker.eval.cli import continue_config

    out = tmp_path / "run"
    common = ["--set", "test", "--corpus", str(tiny_corpus), "--out", str(out), "--resamples",
              "50", "--no-plots", "--no-progress"]
    assert main(["--arm", "rules", "--limit", "2", *common]) == 0
    # more rows and another arm join the same folder; the first arm stays recorded
    assert main(["--arm", "again=rules", "--limit", "3", *common]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["arms"] == {"rules": "rules", "again": "rules"}
    # another sampler (a different cap) is refused before anything runs
    lines = (out / runner.SAMPLES).read_bytes()
    assert main(["--arm", "rules", "--max-tokens", "99", *common]) == 2
    assert "another sampler" in capsys.readouterr().err
    assert (out / runner.SAMPLES).read_bytes() == lines

    # an arm whose model bytes changed is refused; a new arm name or a fresh folder is not
    before = {**config, "arms": {**config["arms"], "student": "release/s.gguf"},
              "gguf": {"student": {"path": "release/s.gguf", "sha256": "aa" * 32}}}
    (out / "config.json").write_text(json.dumps(before), "utf-8")
    with open(out / runner.SAMPLES, "ab") as fh:
        fh.write(json.dumps({"arm": "student", "id": "x"}).encode() + b"\n")
    now = {**config, "arms": {"student": "release/s.gguf"},
           "gguf": {"student": {"path": "release/s.gguf", "sha256": "bb" * 32}}}
    with pytest.raises(runner.ConfigMismatch, match="another model for arm 'student'") as info:
        continue_config(out, now)
    assert info.value.advice.startswith("name the arm differently")  # the fact and the advice
    assert str(info.value) == f"{info.value.what}: {info.value.advice}"  # apart, and whole
    same = {**now, "gguf": {"student": {"path": "release/s.gguf", "sha256": "aa" * 32}}}
    assert continue_config(out, same)["arms"] == before["arms"]
    other = {**now, "arms": {"student2": "release/s.gguf"}}
    assert set(continue_config(out, other)["arms"]) == {"rules", "again", "student", "student2"}
    assert continue_config(tmp_path / "empty", now) == now


def test_receipt_must_exist(tmp_path):
    with pytest.raises(FileNotFoundError, match="build the release receipt"):
        merge_into_receipt(tmp_path / "none.json", "heldout", {})


def test_entry_script_shows_usage():
    """`eval/run.py --help` prints the usage (exit 0) naming the options a run needs, --arm and
    --out required, --set with its choices; without them it exits 2 saying which are missing."""
    script = [sys.executable, str(ROOT / "eval" / "run.py")]
    done = subprocess.run([*script, "--help"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    # argparse wraps lines to the terminal width; the usage line is the first paragraph
    usage, _, rest = (" ".join(part.split()) for part in done.stdout.partition("\n\n"))
    assert usage.startswith("usage: eval/run.py [-h] --arm NAME=SPEC ")   # required
    assert " --out OUT " in usage and "[--out OUT]" not in usage           # required
    for option in (f"[--set {{{','.join(runner.SETS)}}}]", "[--corpus CORPUS]",
                   "[--limit LIMIT]", f"[--task {{{','.join(TASKS)}}}]",
                   "[--into-receipt RECEIPT.json]", "[--no-run]", "[--max-tokens MAX_TOKENS]"):
        assert option in usage, option
    assert ("--arm NAME=SPEC an arm (repeat): NAME=path.gguf, NAME=ollama:MODEL, "
            "NAME=http://host:port/v1, or rules") in rest
    missing = subprocess.run(script, capture_output=True, text=True, cwd=ROOT)
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.startswith("usage: eval/run.py ")
    assert missing.stderr.rstrip().endswith(
        "eval/run.py: error: the following arguments are required: --arm, --out")


def test_max_tokens_cap_applies_to_every_attempt(tiny_corpus):
    from memworker.inference.backends import ReplayBackend

    row = runner.load_eval_rows(tiny_corpus, "test")[0]
    replay = ReplayBackend(["not json", ("{", "length")])
    sample = runner.run_row(replay, row, runner.Sampler(max_tokens_cap=7))
    assert [c["max_tokens"] for c in replay.calls] == [7, 7] and sample["max_tokens"] == 7
    assert sample["status"] == "failed" and [a["raw"] for a in sample["attempts"]] == \
        ["not json", "{"]
    assert sample["error"]["type"] == "OutputTruncatedError"
    assert sample["verdicts"]["metrics"]["schema_accepted"] == [0, 1]
    uncapped = runner.run_row(ReplayBackend(["{}"] * 2), row, runner.Sampler())
    assert uncapped["max_tokens"] > 7


def test_task_runs_only_that_tasks_rows(tiny_corpus, tmp_path, capsys):
    """`--task consolidate --task reflect`: only those rows run, are summarised and recorded;
    an unknown task is refused by the parser."""
    out = tmp_path / "run"
    common = ["--arm", "rules", "--set", "test", "--corpus", str(tiny_corpus), "--out", str(out),
              "--resamples", "50", "--no-plots", "--no-progress"]
    assert main([*common, "--task", "reflect", "--task", "consolidate", "--limit", "3"]) == 0
    samples = runner.read_samples(out / runner.SAMPLES)
    assert len(samples) == 3 and {s["task"] for s in samples} <= {"consolidate", "reflect"}
    config = json.loads((out / "config.json").read_text())
    assert config["tasks"] == ["consolidate", "reflect"] and config["limit"] == 3
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rows"] == 3 and set(summary["rows_per_task"]) <= {"consolidate", "reflect"}
    with pytest.raises(SystemExit):
        main([*common, "--task", "summarise"])
    assert "invalid choice: 'summarise'" in capsys.readouterr().err


def test_an_extract_row_in_the_turns_form_is_graded_as_one_answer(tiny_corpus):
    """`--extract-form turns`: a model arm answers one turn per event with user words; the sample holds
    every turn's generation, one summary attempt (the merged answer) and is graded like the
    one-call answer with the same claims."""
    from memworker import turns, wire
    from memworker.inference.backends import ReplayBackend

    row = next(r for r in runner.load_eval_rows(tiny_corpus, "test")
               if r["task"] == "extract" and r["gold"]["claims"])
    gold = wire.to_wire("extract", row["gold"])
    asked = turns.turn_events(row["input"]["events"])
    texts = [wire.dump_answer("extract", a) for a in turns.split_claims(gold, asked)]
    sample = runner.run_row(ReplayBackend(texts), row, runner.Sampler(extract_form="turns"),
                            form="turns")
    whole = runner.run_row(ReplayBackend([wire.dump_answer("extract", gold)]), row,
                           runner.Sampler())
    assert [t["raw"] for t in sample["turns"]] == texts and sample["status"] == "first_try"
    assert len(sample["attempts"]) == 1 and "turns" not in whole
    assert sample["extract_form"] == "turns" and sample["schema_sha256"] is None
    assert sample["prompt_sha256"] == runner.prompt_sha256(turns.messages(row["input"]))
    assert sample["output"] == whole["output"]
    assert sample["verdicts"]["metrics"] == whole["verdicts"]["metrics"]
    assert sample["verdicts"]["metrics"]["extract_support"][0] == len(row["gold"]["claims"])
    # --turn-quotes own: the same gold (one event per claim here) is accepted the same way
    own = runner.run_row(ReplayBackend(texts), row,
                         runner.Sampler(extract_form="turns", turn_quotes="own"), form="turns")
    assert own["output"] == sample["output"]


def test_turn_quotes_needs_the_turns_form_and_is_recorded_only_when_set(tiny_corpus, tmp_path,
                                                                         capsys):
    common = ["--arm", "rules", "--set", "test", "--corpus", str(tiny_corpus), "--resamples", "50",
              "--no-plots", "--no-progress", "--task", "reflect", "--limit", "1"]
    assert main([*common, "--out", str(tmp_path / "a"), "--turn-quotes", "own"]) == 2
    assert "--turn-quotes applies to --extract-form turns or sentences only" in capsys.readouterr().err
    assert not (tmp_path / "a").exists()
    assert main([*common, "--out", str(tmp_path / "b"), "--extract-form", "turns",
                 "--turn-quotes", "own"]) == 0
    sampler = json.loads((tmp_path / "b" / "config.json").read_text())["sampler"]
    assert sampler["extract_form"] == "turns" and sampler["turn_quotes"] == "own"
    assert main([*common, "--out", str(tmp_path / "c")]) == 0
    assert "turn_quotes" not in json.loads((tmp_path / "c" / "config.json").read_text())["sampler"]
