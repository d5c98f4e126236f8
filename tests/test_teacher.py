"""The corpus teacher goes through the one OpenAI-compatible client (OpenAICompatBackend): base
URL ending in /v1, our own grammar (never response_format), its identity and settings in the
manifest; an unreachable or failing teacher is a build error. A local OpenAI-protocol server
stands in for the endpoint here; test_corpus_slow.py runs a real llama_cpp.server."""

from __future__ import annotations

import json
import re

import pytest

from memworker.corpus import build_corpus
from memworker.corpus.cli import main
from memworker.corpus.teacher import SYSTEM, TeacherError, answer_schema
from memworker.hashing import sha256_bytes, sha256_json
from memworker.inference.grammar import schema_to_gbnf
from tests.helpers import RecordingServer, free_port

MODELS = {"/v1/models": {"object": "list", "data": [{"id": "teacher-7b.Q8_0.gguf"}]}}


def reply(texts):
    return 200, {"choices": [{"message": {"role": "assistant",
                                          "content": json.dumps({"texts": texts})},
                              "finish_reason": "stop"}],
                 "usage": {"prompt_tokens": 9, "completion_tokens": 4}}


def test_teacher_requests_use_the_shared_client_and_are_recorded(tmp_path):
    with RecordingServer([reply([]), reply([])], get=MODELS) as srv:
        m = build_corpus(tmp_path / "c", seed=3, episodes=24, count_tokens=False,
                         teacher=srv.url + "/v1", teacher_model="teacher-7b",
                         teacher_max_rows=2)
    assert [r["path"] for r in srv.requests] == ["/v1/chat/completions"] * 2
    for request in srv.requests:
        body = request["body"]
        assert "response_format" not in body and body["model"] == "teacher-7b"
        assert body["temperature"] == 0 and body["seed"] == 3
        assert body["messages"][0] == {"role": "system", "content": SYSTEM}
        n = int(re.search(r'\{"texts": \[(\d+) strings', body["messages"][1]["content"])[1])
        assert body["grammar"] == schema_to_gbnf(answer_schema(n))  # our grammar, exactly
    report = m["teacher"]
    assert report["served_models"] == ["teacher-7b.Q8_0.gguf"]
    assert report["settings"] == {"temperature": 0.0, "seed": 3, "max_tokens": 600,
                                  "system_sha256": sha256_bytes(SYSTEM.encode()),
                                  "answer_schema_sha256": sha256_json(answer_schema(0))}
    assert report["rows_sent"] == 2 and report["url"] == srv.url + "/v1"


def test_an_unreachable_teacher_is_a_build_error(tmp_path, capsys):
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(TeacherError, match="teacher unreachable: cannot reach"):
        build_corpus(tmp_path / "d", seed=3, episodes=24, count_tokens=False, teacher=dead,
                     teacher_model="x", teacher_max_rows=2)
    assert not (tmp_path / "d").exists()
    code = main(["--out", str(tmp_path / "e"), "--episodes", "24", "--no-tokens", "--quiet",
                 "--teacher", dead, "--teacher-model", "x"])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("error: teacher unreachable") and err.count("\n") == 1
    assert not (tmp_path / "e").exists()


def test_a_failing_teacher_request_is_a_build_error(tmp_path):
    failing = RecordingServer([reply([]), (500, {"error": "out of memory"})], get=MODELS)
    with failing as srv, pytest.raises(TeacherError, match="HTTP 500"):
        build_corpus(tmp_path / "f", seed=3, episodes=24, count_tokens=False,
                     teacher=srv.url + "/v1", teacher_model="t", teacher_max_rows=3)
    assert len(srv.requests) == 2 and not (tmp_path / "f").exists()
