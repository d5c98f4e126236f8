"""Bad input, clear errors: one timestamp validator (`memworker.temporal.parse_timestamp`, applied
to every timestamp field of every input contract by `memworker.contracts`) used by the codec, the
corpus audit and the hmem store backend; `inference/run.py` says when a prompt file is malformed
JSON; random invalid inputs never reach a backend."""

from __future__ import annotations

import copy
import json
import re

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memworker import contracts, ontology
from memworker.corpus import audit_row
from memworker.inference import codec
from memworker.inference.backends import ReplayBackend
from memworker.inference.cli import RequestError, load_request, main
from memworker.inference.hmem import MemWorkerBackend
from memworker.inference.schema import InputError, build_schema, check_inputs
from memworker.temporal import parse_timestamp
from tests.helpers import replaced
from tests.test_codec_strategies import INPUTS

EP = {"episode_id": "ep",
      "events": [{"index": 0, "role": "user", "timestamp": "2025-10-08T09:12:00+02:00",
                  "text": "I moved to Lisbon last month.", "trusted": True}],
      "existing_facts": [{"id": "F1", "statement": "The user lives in Berlin.",
                          "valid_from": "2023-04"}]}
REFLECT = {"question": "Where?", "asked_at": "2025-10-09T10:00:00+02:00",
           "evidence": [{"id": "E1", "timestamp": "2025-10-08T09:12:00+02:00",
                         "text": "The user lives in Lisbon."}]}
#: (task, inputs, path, impossible value): each matches the contract's pattern
IMPOSSIBLE = [
    ("extract", EP, ("events", 0, "timestamp"), "2025-13-45T99:00:00Z"),
    ("extract", EP, ("events", 0, "timestamp"), "2025-02-29T10:00:00+01:00"),
    ("extract", EP, ("existing_facts", 0, "valid_from"), "2023-02-30"),
    ("extract", EP, ("existing_facts", 0, "valid_from"), "2023-00"),
    ("extract", EP, ("existing_facts", 0, "valid_from"), "2023-04-31T10:00:00+02:00"),
    ("reflect", REFLECT, ("asked_at",), "2025-10-09T24:00+02:00"),
    ("reflect", REFLECT, ("evidence", 0, "timestamp"), "2024-02-30T10:00:00Z"),
    ("reflect", REFLECT, ("evidence", 0, "timestamp"), "2024-02-10T10:00:00+24:00"),
]


def test_every_timestamp_field_of_every_input_contract_is_validated():
    """Every string field of an input contract whose pattern starts with a year is listed in
    contracts.TIMESTAMP_FIELDS (so a new timestamp field cannot skip the validator)."""
    def dated(schema, path=()):
        if schema.get("type") == "array":
            yield from dated(schema["items"], (*path, "*"))
        for key, sub in schema.get("properties", {}).items():
            if sub.get("pattern", "").startswith("^[0-9]{4}"):
                yield (*path, key)
            yield from dated(sub, (*path, key))

    for task, (name, _) in contracts.TASK_SCHEMAS.items():
        found = set(dated(contracts.load_schema(name)))
        listed = {path for path, _ in contracts.TIMESTAMP_FIELDS.get(name, ())}
        assert found == listed, task
    assert sum(len(v) for v in contracts.TIMESTAMP_FIELDS.values()) == 4


@pytest.mark.parametrize("task,inputs,path,value", IMPOSSIBLE)
def test_impossible_timestamps_are_rejected_naming_the_field(task, inputs, path, value):
    bad = replaced(inputs, path, value)
    field = "/".join(map(str, path))
    name = contracts.TASK_SCHEMAS[task][0]
    # the schema's pattern alone lets it through
    assert jsonschema.Draft202012Validator(contracts.load_schema(name)).is_valid(bad)
    # the codec
    with pytest.raises(InputError, match=re.escape(f"{field}: {value!r} is not a real date")):
        check_inputs(task, bad)
    # the corpus audit
    row = {"id": "r", "family": "f", "split": "train", "task": task, "input": bad,
           "gold": {"claims": []} if task == "extract" else
           {"answer": "No.", "citations": [], "insufficient_evidence": True}}
    violations = audit_row(row)
    assert [v.code for v in violations] == ["schema_input"]
    assert field in violations[0].detail


@pytest.mark.parametrize("task,inputs,path,good,bad", [
    ("extract", EP, ("events", 0, "timestamp"), "2024-02-29T23:59:59-11:30",
     "2023-02-29T23:59:59-11:30"),
    ("extract", EP, ("existing_facts", 0, "valid_from"), "2024-02-29", "2023-02-29"),
    ("extract", EP, ("existing_facts", 0, "valid_from"), "2023-12", "2023-00"),
    ("reflect", REFLECT, ("asked_at",), "2025-10-09T23:59+02:00", "2025-10-09T24:00+02:00"),
    ("reflect", REFLECT, ("evidence", 0, "timestamp"), "2024-02-10T10:00:00+14:00",
     "2024-02-10T10:00:00+24:00"),
])
def test_valid_timestamps_pass(task, inputs, path, good, bad):
    """A real date-time passes (a leap day, an offset, minutes only); the same field one step
    past what the calendar allows is refused, naming the field."""
    check_inputs(task, inputs)
    check_inputs(task, replaced(inputs, path, good))
    field = "/".join(map(str, path))
    with pytest.raises(InputError, match=re.escape(f"{field}: {bad!r} is not a real date")):
        check_inputs(task, replaced(inputs, path, bad))


@pytest.mark.parametrize("value,needle", [
    ("2025-13-45T99:00:00Z", "month must be in 1..12"),
    ("2024-02-30T10:00:00Z", "day is out of range"),
    ("2025-10-08T09:12:00", "naive"),
    ("yesterday", "not a real date-time"),
])
def test_the_store_backend_uses_the_same_validator(value, needle):
    worker = MemWorkerBackend(ReplayBackend([]))
    with pytest.raises(InputError, match=needle) as info:
        worker.extract([{"role": "user", "content": "hi", "timestamp": value}])
    assert "message 0 timestamp" in str(info.value)
    with pytest.raises(InputError, match=needle):
        worker.reflect("Where?", [], asked_at=value)
    with pytest.raises(InputError, match="existing_facts/0/valid_from"):
        worker.extract([{"role": "user", "content": "hi"}],
                       [{"id": "F1", "text": "x", "valid_from": "2023-02-30"}],
                       observed_at="2025-10-08T09:12:00Z")
    assert worker.backend.calls == []
    with pytest.raises(ValueError, match=needle):
        parse_timestamp(value, "x")


# --- the predicate vocabulary (wire v3): the episode's optional predicates, facts' predicate -----

def _predicate_enum(inputs):
    return build_schema("extract", inputs)["properties"]["claims"]["items"]["prefixItems"][3]


@pytest.mark.parametrize("predicates,needle", [
    ([], "extract inputs: predicates is empty (leave it out to use the default vocabulary)"),
    (["lives_in", "works_at", "lives_in"], "extract inputs: predicates lists lives_in twice"),
    (["b", "a", "b", "a"], "extract inputs: predicates lists a, b twice"),
    (["Lives_in"], "predicates/0: 'Lives_in' does not match"),
    (["lives in"], "predicates/0: 'lives in' does not match"),
    ("lives_in", "predicates: 'lives_in' is not of type 'array'"),
])
def test_the_episode_predicates_are_non_empty_and_unique(predicates, needle):
    bad = {**EP, "predicates": predicates}
    with pytest.raises(InputError, match=re.escape(needle)):
        check_inputs("extract", bad)
    backend = ReplayBackend(['{"claims":[]}'])
    with pytest.raises(InputError):
        codec.run(backend, "extract", bad)
    assert backend.calls == []
    row = {"id": "r", "family": "f", "split": "train", "task": "extract", "input": bad,
           "gold": {"claims": []}}
    assert [v.code for v in audit_row(row)] == ["schema_input"]


def test_the_episode_predicates_are_the_vocabulary():
    own = {**EP, "predicates": ["works_at", "owns_boat"]}
    check_inputs("extract", own)
    assert ontology.vocabulary(own) == ["works_at", "owns_boat"]
    assert _predicate_enum(own) == {"enum": ["works_at", "owns_boat"]}
    # without them: the default vocabulary, the facts' own predicates added once, in order
    assert ontology.vocabulary(EP) == list(ontology.PREDICATES)
    facts = replaced(EP, ("existing_facts",), [
        {**EP["existing_facts"][0], "predicate": "owns_boat"},
        {"id": "F2", "statement": "x", "valid_from": None, "predicate": "lives_in"},
        {"id": "F3", "statement": "y", "valid_from": None, "predicate": "owns_boat"},
        {"id": "F4", "statement": "z", "valid_from": None}])
    check_inputs("extract", facts)
    assert ontology.vocabulary(facts) == [*ontology.PREDICATES, "owns_boat"]
    assert _predicate_enum(facts) == {"enum": [*ontology.PREDICATES, "owns_boat"]}
    # the episode's own list wins over the facts' predicates
    assert ontology.vocabulary({**facts, "predicates": ["works_at"]}) == ["works_at"]


@pytest.mark.parametrize("predicate", ["Lives_in", "lives in", "", "9lives", "x" * 49, 3])
def test_an_existing_fact_predicate_is_well_formed(predicate):
    check_inputs("extract", replaced(EP, ("existing_facts", 0, "predicate"), "lives_in"))
    with pytest.raises(InputError, match="existing_facts/0/predicate"):
        check_inputs("extract", replaced(EP, ("existing_facts", 0, "predicate"), predicate))


def test_run_py_says_when_the_prompt_file_is_malformed_json(tmp_path, capsys):
    with pytest.raises(RequestError, match="malformed JSON: Expecting ',' delimiter at line 1"):
        load_request('{"task": "extract" "inputs": {}}')
    with pytest.raises(RequestError, match="malformed JSON"):
        load_request('[{"role": "user", "content": "TASK: extract"},]')
    bad = tmp_path / "bad.json"
    bad.write_text('{"task": "reflect", "inputs": {"question": "x",}}\n')
    assert main(["--gguf", str(tmp_path / "none.gguf"), "--prompt-file", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the prompt file is malformed JSON") and err.count("\n") == 1


def test_run_py_rejects_an_impossible_timestamp_before_loading_a_model(tmp_path, capsys):
    request = tmp_path / "req.json"
    bad = replaced(EP, ("events", 0, "timestamp"), "2025-13-45T99:00:00Z")
    request.write_text(json.dumps({"task": "extract", "inputs": bad}))
    # the GGUF does not exist: reaching the backend would fail differently
    assert main(["--gguf", str(tmp_path / "none.gguf"), "--prompt-file", str(request)]) == 2
    err = capsys.readouterr().err
    assert "events/0/timestamp: '2025-13-45T99:00:00Z' is not a real date-time" in err


# --- property: random invalid inputs never reach a backend -----------------------------------

BAD_STAMPS = st.one_of(
    st.builds("{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:00Z".format, st.integers(1, 9999),
              st.integers(13, 99), st.integers(1, 28), st.integers(0, 23), st.integers(0, 59)),
    st.builds("{:04d}-02-{:02d}T10:00:00+00:00".format, st.integers(1, 9999).filter(
        lambda y: y % 4 != 0), st.integers(29, 99)),
    st.builds("2025-01-01T{:02d}:{:02d}:00+02:00".format, st.integers(24, 99),
              st.integers(0, 99)),
    st.builds("2025-01-01T10:{:02d}:00+02:00".format, st.integers(60, 99)),
    st.builds("2025-01-01T10:00:00{}{:02d}:{:02d}".format, st.sampled_from("+-"),
              st.integers(24, 99), st.integers(0, 59)),
    st.just("2025-01-01T10:00:00"), st.just("2025-01-01"), st.text(max_size=12),
)


@st.composite
def invalid_requests(draw):
    """(task, inputs) violating the input contract in one random way."""
    task = draw(st.sampled_from(["extract", "consolidate", "reflect"]))
    inputs = draw(INPUTS[task]())
    kind = draw(st.sampled_from(["timestamp", "missing", "extra", "type", "duplicate",
                                 "predicates"]))
    if kind == "predicates" and task == "extract":
        vocabulary = draw(st.lists(st.sampled_from(["lives_in", "works_at"]), max_size=2))
        inputs["predicates"] = vocabulary + vocabulary[:1]  # empty, or a predicate twice
        return task, inputs
    if kind == "timestamp" and task != "consolidate":
        stamps = [p for p, _ in contracts.TIMESTAMP_FIELDS[contracts.TASK_SCHEMAS[task][0]]]
        items = [(("asked_at",), inputs)] if task == "reflect" else []
        items += [((path[-1],), item) for path in stamps if path[1:2] == ("*",)
                  for item in inputs[path[0]]]
        if items:
            (key,), target = draw(st.sampled_from(items))
            partial_date = re.compile(r"[0-9]{4}(?:-[0-9]{2}(?:-[0-9]{2})?)?")
            target[key] = draw(BAD_STAMPS.filter(
                lambda v: key != "valid_from" or not partial_date.fullmatch(v)))
            return task, inputs
    if kind == "duplicate":
        listed = {"extract": "events", "consolidate": "facts", "reflect": "evidence"}[task]
        if inputs[listed]:
            inputs[listed].append(copy.deepcopy(inputs[listed][0]))
            return task, inputs
    if kind == "extra":
        inputs[draw(st.sampled_from(["note", "Question", "x"]))] = 1
        return task, inputs
    if kind == "type":
        key = draw(st.sampled_from(sorted(inputs)))
        inputs[key] = draw(st.sampled_from([None, 3, [], "x", {}]).filter(
            lambda v, old=inputs[key]: type(v) is not type(old)))
    else:  # a required key: the optional predicates may be left out
        required = contracts.load_schema(contracts.TASK_SCHEMAS[task][0])["required"]
        del inputs[draw(st.sampled_from(sorted(required)))]
    return task, inputs


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(request=invalid_requests())
def test_random_invalid_inputs_never_reach_a_backend(request):
    task, inputs = request
    backend = ReplayBackend(['{"claims": []}'])
    with pytest.raises(InputError):
        codec.run(backend, task, inputs)
    assert backend.calls == []
