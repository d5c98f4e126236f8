"""inference/run.py (memworker.inference.cli): reading requests and rendered prompts, output and
error lines. The Ollama path runs against the local Ollama-protocol test server of
test_backends.py (no Ollama server exists here); the llama.cpp path (slow) runs the embedded base
through the real script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from memworker.inference.cli import RequestError, load_request, main, parse_rendered
from memworker.inference.samples import SAMPLES
from memworker.prompts import render, render_user, to_chatml
from tests.helpers import RecordingServer
from tests.test_backends import GOOD_REFLECT, ollama_reply
from tests.test_codec_strategies import INPUTS

ROOT = Path(__file__).resolve().parents[1]


def _same(task, parsed, original):
    if task == "extract":
        original = {**original, "episode_id": "prompt-file"}
    return parsed == original


@pytest.mark.parametrize("task", ["extract", "consolidate", "reflect"])
def test_rendered_prompts_parse_back_to_their_inputs(task):
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(inputs=INPUTS[task]())
    def check(inputs):
        text = render_user(task, inputs)
        try:
            found, parsed = parse_rendered(text)
        except RequestError as exc:  # only the documented ambiguity may refuse
            assert "unambiguously" in str(exc)
            return
        assert found == task
        assert render_user(task, parsed) == text
        assert _same(task, parsed, inputs)  # no generated text looks like a list header

    check()


@pytest.mark.parametrize("task,k", [(t, k) for t, items in SAMPLES.items()
                                    for k in range(len(items))])
def test_all_prompt_file_forms_give_the_same_request(task, k):
    """The JSON request gives back exactly its inputs; every rendered form (the user message,
    with a trailing newline, ChatML, chat messages bare or under "messages") gives the whole same
    request, every field, except that a rendered extract prompt carries no episode id (the
    placeholder "prompt-file"), and renders back to the same messages."""
    inputs = SAMPLES[task][k]
    messages = render(task, inputs)
    assert load_request(json.dumps({"task": task, "inputs": inputs})) == (task, inputs)
    rendered = {**inputs, "episode_id": "prompt-file"} if task == "extract" else inputs
    forms = {"user message": messages[1]["content"],
             "with a newline": messages[1]["content"] + "\n",
             "ChatML": to_chatml(messages), "chat messages": json.dumps(messages),
             "under messages": json.dumps({"messages": messages})}
    for form, text in forms.items():
        assert load_request(text) == (task, rendered), form
        assert load_request(text, task=task) == (task, rendered), form
        assert render(task, rendered) == messages, form


@pytest.mark.parametrize("text,needle", [
    ("hello", "cannot tell the task"),
    ("TASK: reflect\nsomething else", "does not follow the REFLECT template"),
    (json.dumps({"task": "summarise", "inputs": {}}), "must be one of"),
    (json.dumps([{"role": "system", "content": "x"}]), "no user message"),
    (json.dumps(42), "must be"),
])
def test_unreadable_prompt_files(text, needle):
    with pytest.raises(RequestError, match=needle):
        load_request(text)


def test_task_flag_must_agree():
    with pytest.raises(RequestError, match="contradicts"):
        load_request(json.dumps({"task": "reflect", "inputs": {}}), task="extract")


def test_cli_ollama_prints_canonical_json(tmp_path, capsys):
    prompt = tmp_path / "rendered.txt"
    prompt.write_text(render("reflect", SAMPLES["reflect"][0])[1]["content"], encoding="utf-8")
    with RecordingServer([ollama_reply(GOOD_REFLECT)]) as srv:
        code = main(["--model", "mem-extractor", "--host", srv.url, "--prompt-file", str(prompt)])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    assert json.loads(out) == {"insufficient_evidence": False, "citations": ["E2"],
                               **json.loads(GOOD_REFLECT)}
    assert srv.requests[0]["body"]["model"] == "mem-extractor"


def test_cli_errors_are_one_line_and_nonzero(tmp_path, capsys):
    request = tmp_path / "req.json"
    request.write_text(json.dumps({"task": "reflect", "inputs": SAMPLES["reflect"][0]}))
    with RecordingServer([ollama_reply("nope"), ollama_reply("still nope")]) as srv:
        code = main(["--model", "m", "--host", srv.url, "--prompt-file", str(request)])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: not one JSON object after 2 attempt(s)")

    code = main(["--model", "m", "--prompt-file", str(tmp_path / "missing.json")])
    out, err = capsys.readouterr()
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"task": "reflect", "inputs": {"question": ""}}))
    code = main(["--model", "m", "--prompt-file", str(bad)])
    out, err = capsys.readouterr()
    assert code == 2 and err.startswith("error: reflect inputs:")


@pytest.mark.slow
def test_run_script_with_embedded_gguf(tmp_path):
    request = tmp_path / "req.json"
    request.write_text(json.dumps({"task": "reflect", "inputs": SAMPLES["reflect"][2]}))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "inference" / "run.py"), "--gguf", "embedded",
         "--prompt-file", str(request), "--n-ctx", "2048", "--threads", "2"],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["insufficient_evidence"] is True and out["citations"] == []  # no evidence given
