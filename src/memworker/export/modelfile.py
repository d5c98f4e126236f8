"""The Ollama Modelfile of a release: `FROM` the GGUF, a ChatML `TEMPLATE` that renders exactly
the training chat format (`memworker.prompts.to_chatml`), our `SYSTEM` prompt, greedy decoding,
the context size, explicit stop tokens and the licence.

The template uses a small subset of Go's text/template (`range $i, $_ := .Messages`, `.Role`,
`.Content`, `if and (eq (len (slice $.Messages $i)) 1) (ne .Role "assistant")`): after the last
message, unless it is the assistant's, it opens the assistant turn. So a [system, user] request
renders as the training prompt with its generation prompt, and a whole training conversation
[system, user, assistant] renders as the training text. Ollama puts the Modelfile's `SYSTEM`
first in `.Messages` when a request brings no system message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memworker.prompts import system_prompt

NUM_CTX = 4096  # the codec's llama.cpp context (inference.backends.LlamaCppBackend default)

TEMPLATE = (
    "{{ range $i, $_ := .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n"
    '{{ if and (eq (len (slice $.Messages $i)) 1) (ne .Role "assistant") }}'
    "<|im_start|>assistant\n{{ end }}{{ end }}"
)


def _quoted(text: str, what: str) -> str:
    if '"""' in text:
        raise ValueError(f"the {what} contains '\"\"\"', which a Modelfile cannot quote")
    return f'"""{text}"""'


#: how a student is run when its release says nothing: one answer per window, every claim kept
DEFAULT_WORKER = {"extract_form": "window", "claim_gate": None}


def worker_line(worker: dict[str, Any] | None) -> str | None:
    """The Modelfile's comment naming how the release's student must be run, when that is not
    the default (a form and a gate the codec applies; Ollama's own settings cannot carry them)."""
    worker = {**DEFAULT_WORKER, **(worker or {})}
    if worker == DEFAULT_WORKER:
        return None
    return (f"# memworker worker: {worker_words(worker, ';')} (applied by memworker's codec: "
            "MemWorkerBackend.from_release, or extract_form= and claim_gate="
            + (" and propose=" if worker.get("propose") else "")
            + (" and turn_history=" if worker.get("turn_history", "answers") != "answers"
               else "")
            + (" and event_stamps=" if worker.get("event_stamps", "full") != "full" else "")
            + (" and turn_quotes=" if worker.get("turn_quotes", "upto") != "upto" else "")
            + (" and claim_layout=" if worker.get("claim_layout", "v3") != "v3" else "")
            + (" and with_rules=" if worker.get("with_rules", "none") != "none" else "")
            + (" and reflect_rules=" if worker.get("reflect_rules", "none") != "none" else "")
            + (" and consolidate_rules=" if worker.get("consolidate_rules", "none") != "none"
               else "")
            + (" and turn_gate=" if worker.get("turn_gate") is not None else "")
            + (" and turn_gate_tail=" if worker.get("turn_gate_tail", "read") != "read" else "")
            + "; Ollama alone applies neither)")


def worker_words(worker: dict[str, Any], sep: str = " and") -> str:
    """'extract form F and claim gate G' (', proposing' when the worker proposes, ', turns read
    once' when each turn reads the window alone)."""
    gate = worker.get("claim_gate") or "none"
    return (f"extract form {worker.get('extract_form', 'window')}{sep} claim gate {gate}"
            + (f"{sep} proposing" if worker.get("propose") else "")
            + (f"{sep} turns read once" if worker.get("turn_history", "answers") != "answers"
               else "")
            + (f"{sep} event timestamps {worker['event_stamps']}"
               if worker.get("event_stamps", "full") != "full" else "")
            + (f"{sep} each turn quoting its own event"
               if worker.get("turn_quotes", "upto") != "upto" else "")
            + (f"{sep} claims in layout {worker['claim_layout']} (the codec quotes the turn's "
               "sentence)" if worker.get("claim_layout", "v3") != "v3" else "")
            + (f"{sep} the rules' claims kept beside the student's"
               if worker.get("with_rules", "none") != "none" else "")
            + (f"{sep} reflection falling back to the rules' where the student abstains"
               if worker.get("reflect_rules", "none") != "none" else "")
            + (f"{sep} consolidation by the rules"
               if worker.get("consolidate_rules", "none") != "none" else "")
            + (f"{sep} turns asked where the turn gate gives P(fact) >= {worker['turn_gate']:g}"
               if worker.get("turn_gate") is not None else "")
            + (f"{sep} the window read up to the last asked turn's event"
               if worker.get("turn_gate_tail", "read") != "read" else "")
            + (f"{sep} the unasked turns left out of the conversation"
               if worker.get("turn_gate_tail", "read") == "omit" else ""))


def render(gguf_from: str, *, end_of_turn: str, license_text: str, num_ctx: int = NUM_CTX,
           system: str | None = None, worker: dict[str, Any] | None = None) -> str:
    """Modelfile text. `gguf_from` is the path written after FROM (relative to the Modelfile);
    `worker`: the release's extraction form and claim gate (a comment line when not the
    default)."""
    system = system_prompt() if system is None else system
    stops = [end_of_turn] + [t for t in ("<|im_start|>",) if t != end_of_turn]
    note = worker_line(worker)
    lines = [
        "# memworker release: ollama create mem-extractor -f Modelfile",
        *([note] if note else []),
        f"FROM {gguf_from}",
        f"TEMPLATE {_quoted(TEMPLATE, 'template')}",
        f"SYSTEM {_quoted(system, 'system prompt')}",
        "PARAMETER temperature 0",
        "PARAMETER seed 0",
        "PARAMETER repeat_penalty 1",
        f"PARAMETER num_ctx {num_ctx}",
        *[f'PARAMETER stop "{s}"' for s in stops],
        f"LICENSE {_quoted(license_text, 'licence')}",
    ]
    return "\n".join(lines) + "\n"


def write(path: Path, gguf_from: str, **kwargs) -> Path:
    path.write_text(render(gguf_from, **kwargs), "utf-8")
    return path


def parse(text: str) -> dict[str, list[str]]:
    """{instruction: [arguments]} of a Modelfile as written by `render` (triple-quoted values may
    span lines); enough for the tests and `verify` to read back what was written."""
    out: dict[str, list[str]] = {}
    rest = text
    while rest:
        line, _, after = rest.partition("\n")
        if not line.strip() or line.startswith("#"):
            rest = after
            continue
        name, _, value = line.partition(" ")
        if value.startswith('"""'):
            body = value[3:] + "\n" + after
            end = body.index('"""')
            value, rest = body[:end], body[end + 3:].partition("\n")[2]
        else:
            rest = after
        out.setdefault(name.upper(), []).append(value)
    return out
