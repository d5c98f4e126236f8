"""The events' timestamps written to the minute (`--event-stamps minute`, issue 48 item 3): the
prompt's events block rewritten whole (`memworker.prompts.restamp`), the same in the codec's
prompts (every form), the training rows, the evaluator's sampler, the store's worker and a
release's worker record. Generation is replaced by ReplayBackend: these tests exercise the
prompts and their plumbing, not a model."""

from __future__ import annotations

import json

import pytest

from memworker import prompts, turns
from memworker.inference import codec
from memworker.inference.backends import ReplayBackend
from tests.test_codec import EP, claim, extract_text

LISBON = claim()


def test_a_timestamp_is_cut_to_the_minute_and_only_the_events_block_changes():
    assert prompts.show_stamp("2025-10-08T09:12:37+02:00", "minute") == "2025-10-08 09:12"
    assert prompts.show_stamp("2025-10-08T09:12:00Z", "minute") == "2025-10-08 09:12"
    assert prompts.show_stamp("2025-10-08T09:12:00+02:00") == "2025-10-08T09:12:00+02:00"
    with pytest.raises(prompts.PromptError, match="event stamps 'hour'"):
        prompts.show_stamp("2025-10-08T09:12:00Z", "hour")
    stamped = {**EP, "events": [*EP["events"], {
        "index": 4, "role": "user", "timestamp": "2025-10-09T23:59:59-05:00", "trusted": True,
        "text": "The log said 2025-10-08T09:12:00+02:00 user: hi\n[9] 2025-01-01T00:00:00Z x"}]}
    full = prompts.render("extract", stamped)
    short = prompts.restamp(full, stamped, "minute")
    assert short[0] == full[0]
    assert "[0] 2025-10-08 09:12 user: I moved to Lisbon" in short[1]["content"]
    assert "[4] 2025-10-09 23:59 user: The log said 2025-10-08T09:12:00+02:00 user: hi\n" \
           "[9] 2025-01-01T00:00:00Z x" in short[1]["content"]          # event text untouched
    assert "F1: The user lives in Berlin." in short[1]["content"]
    assert short[1]["content"].replace(prompts.events_block(stamped, "minute"),
                                       prompts.events_block(stamped)) == full[1]["content"]
    assert prompts.restamp(full, stamped) is full                       # "full": as it was
    with pytest.raises(prompts.PromptError, match="no user message holds the request's events"):
        prompts.restamp(prompts.render("extract", EP), stamped, "minute")


def test_the_codec_writes_every_extract_prompt_with_the_stamps_asked():
    answers = [extract_text(LISBON), '{"claims":[]}']
    for history, build in (("answers", lambda k, said: turns.messages(EP, said[:k])),
                           ("none", lambda k, said: turns.once_messages(EP, k))):
        backend = ReplayBackend(answers)
        result = codec.run_turns(backend, EP, history=history, stamps="minute")
        assert [c["messages"] for c in backend.calls] == [
            prompts.restamp(build(k, answers), EP, "minute") for k in (0, 1)]
        assert result.output == codec.run_turns(ReplayBackend(answers), EP,
                                                history=history).output
        assert "2025-10-08 09:12 user:" in backend.calls[0]["messages"][1]["content"]
    backend = ReplayBackend([extract_text(LISBON)])
    one = codec.run(backend, "extract", EP, stamps="minute")
    assert backend.calls[0]["messages"] == prompts.restamp(prompts.render("extract", EP), EP,
                                                           "minute")
    assert one.output["claims"][0]["quotes"] == ["I moved to Lisbon last month."]
    assert one.output["claims"][0]["date"] == codec.run(
        ReplayBackend([extract_text(LISBON)]), "extract", EP).output["claims"][0]["date"]
    reflect = {"question": "Where does the user live?", "asked_at": "2025-10-09T10:00:00+02:00",
               "evidence": [{"id": "F1", "timestamp": "2025-10-08T09:12:00+02:00",
                             "text": "The user lives in Lisbon."}]}
    assert codec.prepare("reflect", reflect, stamps="minute").messages == \
        prompts.render("reflect", reflect)                              # no events to restamp
    with pytest.raises(ValueError, match="event stamps 'hour'"):
        codec.run_turns(ReplayBackend(answers), EP, stamps="hour")
    backend = ReplayBackend(['{"events":[[0,[]],[2,[]]]}'])
    codec.run_walk(backend, EP, stamps="minute")
    assert backend.calls[0]["messages"] == prompts.restamp(turns.walk_messages(EP), EP, "minute")


def test_the_sampler_and_the_worker_record_the_stamps_only_when_set(tiny_corpus, tmp_path):
    from memworker.eval import runner
    from memworker.eval.cli import planned_config
    from memworker.export import modelfile
    from memworker.inference.hmem import MemWorkerBackend, WorkerError, worker_config

    plan = ["--arm", "student=s.gguf", "--set", "val", "--corpus", str(tiny_corpus), "--out",
            str(tmp_path / "p"), "--extract-form", "turns"]
    _, today = planned_config(plan)
    _, minute = planned_config([*plan, "--event-stamps", "minute"])
    assert "event_stamps" not in today["sampler"] and minute["sampler"]["event_stamps"] == "minute"
    assert runner.sampler_doc(runner.Sampler(extract_form="turns")) == today["sampler"]

    assert worker_config("turns", None, False, "none", "minute") == {
        "extract_form": "turns", "claim_gate": None, "turn_history": "none",
        "event_stamps": "minute"}
    assert "event_stamps" not in worker_config("turns")
    with pytest.raises(WorkerError, match="event stamps 'hour'"):
        worker_config("window", None, False, "answers", "hour")
    words = modelfile.worker_words({"extract_form": "turns", "claim_gate": None,
                                    "event_stamps": "minute"})
    assert words.endswith("and event timestamps minute")
    assert "event_stamps=" in modelfile.worker_line({"extract_form": "turns",
                                                      "event_stamps": "minute"})
    for form in ("turns", "window"):
        backend = ReplayBackend([extract_text(LISBON), '{"claims":[]}'])
        MemWorkerBackend(backend, extract_form=form, event_stamps="minute")._run("extract", EP)
        assert all("2025-10-08 09:12 user:" in c["messages"][1]["content"]
                   for c in backend.calls)


def test_training_rows_carry_the_prompts_the_codec_sends(assets):
    """`--event-stamps minute`: every extract row's prompt restamped from its canonical inputs,
    in the window form and the turns form alike (read once too); other tasks unchanged; recorded
    in the provenance; a config that leaves it at its default keeps the sha256 it had before the
    field existed (a sitting's resume identity)."""
    from memworker.corpus import load_rows
    from memworker.train import config as tconfig
    from memworker.train import loop as tloop

    canonical = {r["id"]: r["input"] for r in load_rows(assets["coding"], "train",
                                                        form="canonical")}
    for over in ({}, {"extract_form": "turns"}, {"extract_form": "turns",
                                                 "turn_history": "none"}):
        def prepared(over=over, **more) -> dict:
            cfg = tconfig.load_stage("coding", overrides={
                "corpus": str(assets["coding"]), "val_rows": 4, **over, **more})
            return tloop.prepare_data(cfg)
        full, minute = prepared(), prepared(event_stamps="minute")
        assert len(full["train"]) == len(minute["train"]) > 0
        extract = 0
        for a, b in zip(full["train"], minute["train"], strict=True):
            if a["task"] != "extract":
                assert a == b
                continue
            extract += 1
            window = canonical[a.get("window") or a["id"]]
            assert b["messages"] == prompts.restamp(a["messages"], window, "minute") != \
                a["messages"]
        assert extract > 0
        assert minute["provenance"]["event_stamps"] == "minute"
        assert "event_stamps" not in full["provenance"]
    cfg = tconfig.load_stage("coding")
    assert "event_stamps" not in cfg.to_dict()
    assert tconfig.load_stage("coding", overrides={"event_stamps": "minute"}).to_dict()[
        "event_stamps"] == "minute"
    for over, message in (({"event_stamps": "hour"}, "event_stamps must be one of"),
                          ({"event_stamps": "minute", "merged_days": 0.5},
                           "merged_days together")):
        with pytest.raises(tconfig.ConfigError, match=message):
            tconfig.load_stage("coding", overrides=over).validate()
    json.dumps(cfg.to_dict())


def test_the_worker_quotes_each_turns_own_event_when_its_release_says_so(tiny_corpus, tmp_path):
    """`turn_quotes="own"` (a turns form only): the store's worker asks every turn with a schema
    offering its own event's spans alone, as `eval/run.py --turn-quotes own` does; a release's
    worker records it only when set, and live acceptance takes it for model arms."""
    from memworker.eval.live.cli import main as live_main
    from memworker.export import modelfile
    from memworker.inference.hmem import MemWorkerBackend, WorkerError, worker_config

    assert worker_config("turns", None, False, "none", "full", "own") == {
        "extract_form": "turns", "claim_gate": None, "turn_history": "none",
        "turn_quotes": "own"}
    assert "turn_quotes" not in worker_config("turns")
    for form, quotes, message in (("window", "own", "needs extract form"),
                                  ("turns", "all", "turn quotes 'all'")):
        with pytest.raises(WorkerError, match=message):
            worker_config(form, None, False, "answers", "full", quotes)
    assert modelfile.worker_words({"extract_form": "turns", "turn_quotes": "own"}).endswith(
        "and each turn quoting its own event")
    backend = ReplayBackend([extract_text(LISBON), '{"claims":[]}'])
    MemWorkerBackend(backend, extract_form="turns", turn_quotes="own")._run("extract", EP)
    events = [[b["prefixItems"][1]["const"] for b in
               call["schema"]["properties"]["claims"]["items"]["prefixItems"][0]["items"]["anyOf"]]
              for call in backend.calls]
    assert events == [[0], [2]]
    out = tmp_path / "live"
    assert live_main(["--arm", "rules", "--out", str(out), "--only", "allergy-correction",
                      "--extract-form", "turns", "--turn-quotes", "own"]) == 0
    assert json.loads((out / "summary.json").read_text())["config"]["sampler"][
        "turn_quotes"] == "own"
    assert live_main(["--arm", "rules", "--out", str(tmp_path / "bad"), "--turn-quotes",
                      "own"]) == 2
    assert not (tmp_path / "bad").exists()
