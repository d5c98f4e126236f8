"""`python inference/run.py`: run one request through a backend and print the canonical JSON.

The prompt file may hold either

1. a JSON request `{"task": "extract|consolidate|reflect", "inputs": {...}}` (preferred: exact), or
2. a rendered prompt as produced by `memworker.prompts`: the user message text, the ChatML text
   (`to_chatml`), or a JSON list of chat messages. The task is read from its `TASK:` line
   (`detect_task`) and the structured inputs are parsed back from the text. The parse is
   accepted only when re-rendering the parsed inputs reproduces the user message byte for byte;
   otherwise the command fails and asks for a JSON request. (An event text containing a line
   that itself looks like an event header is ambiguous: use a JSON request for such inputs.)

The dynamic schema, grammar and verification need the structured inputs; that is why a free-form
prompt is not enough. Output: the canonical answer as one JSON line on stdout; codec diagnostics
as `note:` lines on stderr; any failure as one `error:` line on stderr with exit status 1
(2 for unusable arguments or inputs).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from memworker.contracts import TASKS
from memworker.inference import backends, codec
from memworker.inference.backends import BackendError
from memworker.inference.grammar import GrammarError
from memworker.inference.schema import InputError, check_inputs
from memworker.prompts import PromptError, detect_task, render_user, template
from memworker.registry import BaseUnavailable, embedded_gguf_path
from memworker.turns import FORMS

_ID = r"[A-Za-z][A-Za-z0-9_-]{0,31}"
_TS = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}(?::[0-9]{2})?(?:Z|[+-][0-9]{2}:[0-9]{2})"
_DATE = r"[0-9]{4}(?:-[0-9]{2}(?:-[0-9]{2}(?:T[0-9]{2}:[0-9]{2}:[0-9]{2}[+-][0-9]{2}:[0-9]{2})?)?)?"
_EVENT_HEAD = re.compile(rf"\[(\d+)\] ({_TS}) (user|assistant|tool)( \(untrusted\))?: ")
_FACT_HEAD = re.compile(rf"({_ID}): ")
_EVIDENCE_HEAD = re.compile(rf"({_ID}) \(({_TS})\): ")
_CHATML_USER = re.compile(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", re.S)


class RequestError(ValueError):
    """The prompt file cannot be turned into (task, inputs)."""


# --- reading a request ----------------------------------------------------------------------------

def _entries(block: str, head: re.Pattern[str]) -> list[tuple[re.Match[str], str]]:
    """Split a rendered list into (header match, body) entries; continuation lines (multi-line
    texts) belong to the entry above."""
    if block == "(none)":
        return []
    out: list[tuple[re.Match[str], str]] = []
    for line in block.split("\n"):
        m = head.match(line)
        if m:
            out.append((m, line[m.end():]))
        elif out:
            out[-1] = (out[-1][0], out[-1][1] + "\n" + line)
        else:
            raise RequestError(f"cannot read list entry {line[:60]!r}")
    return out


def _template_fields(task: str, user_text: str) -> dict[str, str]:
    pieces = re.split(r"\{\{(\w+)\}\}", template(task.upper()))
    pattern = "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>.*)"
                      for i, p in enumerate(pieces))
    m = re.fullmatch(pattern, user_text, re.S)
    if not m:
        raise RequestError(f"the prompt does not follow the {task.upper()} template")
    return m.groupdict()


def parse_rendered(user_text: str) -> tuple[str, dict[str, Any]]:
    """(task, inputs) from a rendered user message; verified by re-rendering."""
    try:
        task = detect_task(user_text)
    except PromptError as exc:
        raise RequestError(str(exc)) from None
    fields = _template_fields(task, user_text)
    if task == "extract":
        facts = []
        for m, body in _entries(fields["existing_facts"], _FACT_HEAD):
            since = re.fullmatch(rf"(.*) \(since ({_DATE})\)", body, re.S)
            facts.append({"id": m.group(1), "statement": since.group(1) if since else body,
                          "valid_from": since.group(2) if since else None})
        events = [{"index": int(m.group(1)), "role": m.group(3), "timestamp": m.group(2),
                   "text": body, "trusted": m.group(4) is None}
                  for m, body in _entries(fields["events"], _EVENT_HEAD)]
        inputs: dict[str, Any] = {"episode_id": "prompt-file", "events": events,
                                  "existing_facts": facts}
    elif task == "consolidate":
        inputs = {"facts": [{"id": m.group(1), "statement": body}
                            for m, body in _entries(fields["facts"], _FACT_HEAD)]}
    else:
        inputs = {"question": fields["question"], "asked_at": fields["asked_at"],
                  "evidence": [{"id": m.group(1), "timestamp": m.group(2), "text": body}
                               for m, body in _entries(fields["evidence"], _EVIDENCE_HEAD)]}
    try:
        again = render_user(task, inputs)
    except ValueError as exc:
        raise RequestError(f"inputs parsed from the prompt are invalid: {exc}") from None
    if again != user_text:
        raise RequestError("the prompt could not be parsed back unambiguously (re-rendering "
                           "differs); pass a JSON request {\"task\", \"inputs\"} instead")
    return task, inputs


def load_request(text: str, task: str | None = None) -> tuple[str, dict[str, Any]]:
    """(task, inputs) from a prompt file's text (see the module docstring)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        if text.lstrip()[:1] in ("{", "["):  # a rendered prompt starts with TASK: or ChatML
            raise RequestError(f"the prompt file is malformed JSON: {exc.msg} at line "
                               f"{exc.lineno} column {exc.colno}") from None
        doc = None
    if isinstance(doc, dict) and "inputs" in doc:
        found = doc.get("task", task)
        if found not in TASKS:
            raise RequestError(f"request task must be one of {', '.join(TASKS)}, got {found!r}")
        if task is not None and task != found:
            raise RequestError(f"--task {task} contradicts the request's task {found}")
        if not isinstance(doc["inputs"], dict):
            raise RequestError("request 'inputs' must be a JSON object")
        return found, doc["inputs"]
    if isinstance(doc, dict) and "messages" in doc:
        doc = doc["messages"]
    if isinstance(doc, list):
        users = [m.get("content") for m in doc if isinstance(m, dict) and m.get("role") == "user"]
        if not users or not isinstance(users[-1], str):
            raise RequestError("the chat messages hold no user message")
        text = users[-1]
    elif doc is not None:
        raise RequestError("a JSON prompt file must be {\"task\", \"inputs\"} or chat messages")
    else:
        m = _CHATML_USER.search(text)
        # a rendered user message never ends with a newline (files often add one)
        text = m.group(1) if m else text.rstrip("\n")
    found, inputs = parse_rendered(text)
    if task is not None and task != found:
        raise RequestError(f"--task {task} contradicts the prompt's 'TASK: {found}' line")
    return found, inputs


# --- command line ---------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python inference/run.py",
        description="Run one memory-worker request through Ollama, llama.cpp or an "
                    "OpenAI-compatible server; print the verified canonical JSON.")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--model", help="Ollama model name (e.g. mem-extractor)")
    where.add_argument("--gguf", help="GGUF file to run in process with llama.cpp "
                                      "('embedded' = the embedded base model)")
    where.add_argument("--openai-url", help="base URL of an OpenAI-compatible server, "
                                            "e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--prompt-file", required=True,
                   help="JSON request {\"task\", \"inputs\"} or a rendered prompt (see docs)")
    p.add_argument("--task", choices=TASKS, help="check the task (it is read from the file)")
    p.add_argument("--host", help="Ollama host URL (default: the client's, OLLAMA_HOST)")
    p.add_argument("--openai-model", default="mem-worker", help="model name sent to the server")
    p.add_argument("--n-ctx", type=int, default=4096, help="context window (default 4096)")
    p.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default ≤ 2)")
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (0)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (0)")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="override the schema-derived max_tokens")
    p.add_argument("--extract-form", choices=FORMS, default="window",
                   help="extraction form (memworker.turns) of a student trained in it: window "
                        "(default), turns (--max-tokens then caps each turn) or walk")
    p.add_argument("--no-grammar", action="store_true",
                   help="decode without the GBNF grammar (the codec still verifies)")
    p.add_argument("--quiet", action="store_true", help="do not print codec notes")
    return p


def make_backend(args: argparse.Namespace) -> Any:
    if args.model:
        return backends.OllamaBackend(args.model, host=args.host, num_ctx=args.n_ctx)
    if args.openai_url:
        return backends.OpenAICompatBackend(args.openai_url, model=args.openai_model)
    path = embedded_gguf_path() if args.gguf == "embedded" else Path(args.gguf)
    return backends.LlamaCppBackend(path, n_ctx=args.n_ctx, n_threads=args.threads)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        text = Path(args.prompt_file).read_text(encoding="utf-8")
        task, inputs = load_request(text, args.task)
        check_inputs(task, inputs)  # bad inputs never reach (or even load) a backend
        backend = make_backend(args)
        if args.extract_form != "window" and task == "extract":
            result = codec.run_extract(backend, inputs, args.extract_form,
                                       temperature=args.temperature, seed=args.seed,
                                       use_grammar=not args.no_grammar,
                                       max_tokens=args.max_tokens)
        else:
            result = codec.run(backend, task, inputs, temperature=args.temperature,
                               seed=args.seed, use_grammar=not args.no_grammar,
                               max_tokens=args.max_tokens)
    except (OSError, UnicodeDecodeError, RequestError, InputError, BaseUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except codec.CodecError as exc:
        print(f"error: {exc.kind} after {len(exc.attempts)} attempt(s): {exc}", file=sys.stderr)
        return 1
    except (BackendError, GrammarError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not args.quiet:
        for note in result.diagnostics:
            print(f"note: {note}", file=sys.stderr)
    print(json.dumps(result.output, ensure_ascii=False))
    return 0
