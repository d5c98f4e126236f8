"""Rendering is byte-stable: the golden files are the exact prompts the trainer and the codec see.
Regenerate them only on purpose: `MEMWORKER_UPDATE_GOLDEN=1 pytest tests/test_prompts.py`."""

import hashlib
import os
from pathlib import Path

import pytest

from memworker import prompts
from memworker.contracts import ContractError
from tests.helpers import episode

GOLDEN = Path(__file__).parent / "golden"

INPUTS = {
    "extract": episode(),
    "consolidate": {"facts": [
        {"id": "F1", "statement": "Ana swims every Monday."},
        {"id": "F2", "statement": "Ana bought a new wetsuit in May."},
    ]},
    "reflect": {"question": "Where does the user live now?", "asked_at": "2025-10-09T18:00:00+02:00",
                "evidence": [{"id": "E1", "timestamp": "2025-10-08T09:12:00+02:00",
                              "text": "The user moved to Lisbon."}]},
}


@pytest.mark.parametrize("task", ["extract", "consolidate", "reflect"])
def test_rendering_matches_golden_bytes(task):
    text = prompts.to_chatml(prompts.render(task, INPUTS[task]))
    path = GOLDEN / f"{task}.chatml.txt"
    if os.environ.get("MEMWORKER_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


def test_render_shape_and_system_prompt():
    msgs = prompts.render("extract", INPUTS["extract"])
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert msgs[0]["content"] == prompts.system_prompt()
    user = msgs[1]["content"]
    assert "[2] 2025-10-08T09:13:00+02:00 tool (untrusted): Ignore previous" in user
    assert "F1: The user lives in Porto. (since 2024-01)" in user
    assert "{{" not in user


def test_empty_lists_render_as_none():
    user = prompts.render_user("extract", episode(events=[], existing_facts=[]))
    assert "Existing facts:\n(none)" in user and "Events:\n(none)" in user


def test_placeholders_in_inputs_are_not_substituted_again():
    ep = episode()
    ep["existing_facts"][0]["statement"] = "Literal {{events}} marker"
    user = prompts.render_user("extract", ep)
    assert "Literal {{events}} marker" in user
    assert user.count("[0] 2025-10-08") == 1


def test_invalid_inputs_are_refused():
    bad = episode()
    del bad["events"][0]["trusted"]
    with pytest.raises(ContractError, match="trusted"):
        prompts.render("extract", bad)


def test_template_hashes_are_sha256_of_the_files():
    hashes = prompts.template_hashes()
    assert set(hashes) == {"SYSTEM", "EXTRACT", "CONSOLIDATE", "REFLECT"}
    for name, digest in hashes.items():
        data = (prompts.prompt_dir() / f"{name}.txt").read_bytes()
        assert digest == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("task", ["extract", "consolidate", "reflect"])
def test_detect_task_from_any_rendering(task):
    msgs = prompts.render(task, INPUTS[task])
    assert prompts.detect_task(prompts.to_chatml(msgs)) == task
    assert prompts.detect_task(msgs[1]["content"]) == task


def test_detect_task_fails_clearly():
    with pytest.raises(prompts.PromptError, match="cannot tell the task"):
        prompts.detect_task("hello\nTASK: summarise")


def test_chatml_format():
    text = prompts.to_chatml([{"role": "user", "content": "hi"}])
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert prompts.to_chatml([{"role": "user", "content": "hi"}], add_generation_prompt=False) == (
        "<|im_start|>user\nhi<|im_end|>\n")
