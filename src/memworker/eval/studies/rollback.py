"""`python eval/studies/rollback.py`: decide first, roll back — what a wire that scores a claim
early and rolls a dropped claim back would cost and keep, replayed on a proposing student's
recorded claims before anyone trains in that wire (issue 48 item 1; the design choice that
docs/research/inference-speed.md "What item 1 has to reconcile with the chosen gate" leaves
open). No model runs: the embedded SmolLM2 tokenizer counts the tokens
(`memworker.eval.studies.wire_cost`), the evaluator's grader regrades the kept claims, and the
committed verifier (`memworker.inference.verifier`) scores them.

Input: an evaluation folder whose model arm ran `--extract-form turns --propose --logprobs` with
no gate at run time, so that its samples hold every claim the student proposed with its token
log-probabilities. For every proposed claim: its log-probability score
`first(predicate)+first(value)` (the gate's, from its own tokens), the verifier's P(keep) on the
claim as written and on the claim with each quote replaced by the sentence(s) it lies in (what a
sentence-reference wire would hand the verifier), and its tokens in each wire (wire_cost's
`claim_fields`: v3 today's order; v5a predicate and value first; v5b v5a with sentence
references for quotes).

The designs replayed (each keeps some claims whole and costs each dropped claim the tokens
written up to its decision point, after which the codec rolls it back):

- `v3, gate at the end`: today's wire, every proposed claim written whole, the gate deciding after
  it (what the worker does now).
- `v5a, log-prob at the value`: the decision after the value's first token (the log-probability
  part is known there), keep when the score clears A. The verifier cannot take part: it reads
  subject, kind and quote, which come later.
- `v5b, log-prob at the value`: the same in v5b (a kept claim is shorter: its quote is a reference).
- `v5b, either at the quote`: v5b, the decision after the quote references (the verifier then has
  all it reads but time expression and supersedes), keep when the score clears A or the
  sentence-quote P(keep) clears B: the chosen either-gate, decided before a claim's tail.

Per design and threshold: claims kept, supported, support, facts covered, and the median and p90
answer tokens a window (every turn's `{"claims":[]}` and end token, plus the claims' tokens as
above). Caveats, by construction of a replay: a rolled-back claim may change what the student
writes after it (the replay assumes the recorded continuation), and the grader checks a quote as a
substring, so a sentence quote grades as its clause did (wire_cost "Quotes chosen, not copied").
The measured answer tokens of the recorded run are printed beside the replayed `v3` figure as a
check on the counting. A run in claim layout v6 (`eval/run.py --claim-layout v6`) is replayed from
its accepted claims with the codec's quotes; the claims it wrote and the codec did not accept have
no quote, so only their v6 figures are exact (the other wires count them without one).

    python eval/studies/rollback.py --out receipts/eval/natural-dev/e22-once --model n1
    python eval/studies/rollback.py --out receipts/eval/val-47/e22-once --model e22 \\
        --logprob=-0.055 --logprob=-0.2 --either=-0.055,0.93 --json /tmp/rb.json
"""

from __future__ import annotations

import argparse
import bisect
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from memworker import wire as wire_layout
from memworker.corpus import tokens as corpus_tokens
from memworker.eval.runner import SAMPLES, EvalError, grade_sample, read_samples
from memworker.eval.studies.confidence import Rows
from memworker.eval.studies.verifier_auc import _counts, _only, _totals, parse_either
from memworker.eval.studies.wire_cost import (
    claim_fields,
    codec_quote,
    quote_sentences,
    sentence_pieces,
)
from memworker.inference.gate import DEFAULT_SCORE, SCORES
from memworker.inference.verifier import DEFAULT_WEIGHTS, Verifier, VerifierError

#: the log-probability thresholds replayed when none is given (the chosen gate's -0.055 among them)
WIRES = ("v3", "v5a", "v5b", "v6")
LOGPROBS = (-0.01, -0.055, -0.1, -0.2, -0.5)
#: (A, B) either-gates replayed when none is given (the chosen one first)
EITHERS = ((-0.055, 0.93), (-0.055, 0.8), (-0.2, 0.93))
EMPTY_TURN = '{"claims":[]}'
END_TOKENS = 1  # each turn's answer closes with <|im_end|>


def field_ends(fields: list[tuple[str, Any]]) -> tuple[str, dict[str, int]]:
    """A claim's text in a wire (the compact array `wire_cost.dump_claims` writes) and the
    character offset just after each field; "value@" is the offset after its first character."""
    text, ends = "[", {}
    for k, (name, value) in enumerate(fields):
        text += "," if k else ""
        if name == "value":
            ends["value@"] = len(text) + (1 if isinstance(value, str) else 0) + 1
        text += json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        ends[name] = len(text)
    return text + "]", ends


def claim_costs(fields: list[tuple[str, Any]]) -> dict[str, int]:
    """Tokens of a claim (with the comma before it, as a later claim of an answer is written)
    and the tokens written by each decision point: "value" (the value's first token written,
    where the log-probability score is known) and "quotes" (the quote references written)."""
    text, ends = field_ends(fields)
    text = "," + text
    tok = corpus_tokens.tokenizer()
    pieces = tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    stops = [b for _, b in pieces]

    def by(char: int) -> int:  # tokens needed to have written every character before `char`
        return bisect.bisect_left(stops, char) + 1

    return {"whole": len(pieces), "value": by(ends["value@"] + 1),
            "value_end": by(ends["value"] + 1),
            "quotes": by(ends["quotes"] + 1) if "quotes" in ends else len(pieces)}


def sentence_quoted(claim: dict[str, Any], texts: dict[int, str]) -> dict[str, Any]:
    """The canonical claim with each quote replaced by the sentence(s) of its event it lies in
    (one quote per sentence, each once): what a sentence-reference wire gives the codec."""
    pairs: list[tuple[int, str]] = []
    for event, quote in zip(claim["source_indices"], claim["quotes"], strict=True):
        text = texts.get(event, "")
        touched, _ = quote_sentences(quote, text)
        pieces = sentence_pieces(text)
        for n in touched:
            a, b = pieces[n - 1]
            if (event, text[a:b]) not in pairs:
                pairs.append((event, text[a:b]))
    if not pairs:
        return claim
    return {**claim, "source_indices": [e for e, _ in pairs], "quotes": [s for _, s in pairs]}


def codec_quoted(claim: dict[str, Any], texts: dict[int, str]) -> dict[str, Any]:
    """The canonical claim as wire v6 would give it: its quotes replaced by the one sentence the
    codec chooses in the latest event it cites (`spans.choose_sentence`); unchanged when that
    event offers none."""
    chosen = codec_quote(claim, texts)
    if chosen is None:
        return claim
    return {**claim, "source_indices": [chosen[0]], "quotes": [chosen[1]]}


def extra_claims(model: dict[str, Any], texts: dict[int, str], layout: str = "v3"
                 ) -> tuple[list[dict[str, Any]], set[int]]:
    """(the claims a sample's turns wrote that the codec did not accept, the accepted claims a
    turn stopped at its first repeat would never write).

    An extra claim is a repeat of an earlier claim of the window (the same predicate and value) or
    one the codec refused: its whole tokens per wire, whether it is a repeat, its tokens up to the
    end of its value per wire, and whether a turn stopped at its first repeat still writes it (the
    claims before the stop, and the repeat itself, which the codec knows at its end). The first
    repeat of a turn is a claim with the subject, predicate, value and kind of an earlier claim
    of the same turn: a greedy student that writes one has entered a loop. The accepted claims are
    the sample's wire claims, matched to the written ones in order."""
    accepted = [json.dumps(c) for c in model["wire"]["claims"]]
    # a run in claim layout v6 wrote its claims without quotes: matched in that layout
    accepted_v6 = [json.dumps(wire_layout.pack_v6(wire_layout.unpack_claim(c)))
                   for c in model["wire"]["claims"]]
    at = 0
    out: list[dict[str, Any]] = []
    lost: set[int] = set()
    said: set[tuple[str, str]] = set()
    for turn in model.get("turns") or model.get("attempts") or []:
        try:
            written = json.loads(turn.get("raw") or "")["claims"]
        except (ValueError, KeyError, TypeError):
            continue  # a refused turn: its tokens are in the measured figure only
        seen: set[str] = set()
        stopped = False
        for claim in written:
            key = json.dumps(claim)
            v6 = layout == "v6" and wire_layout.is_v6_claim(claim)
            try:
                if v6:  # as a v3 claim without quotes: its v6 tokens are exact
                    claim = wire_layout.pack_claim(wire_layout.unpack_v6(claim, []))
                costs = {w: claim_costs(claim_fields(claim, w, texts)) for w in WIRES}
                pair = (claim[3], json.dumps(claim[4]))
                same = json.dumps([claim[1], claim[3], claim[4], claim[5]])
            except (ValueError, KeyError, TypeError, IndexError):
                continue  # not a well-formed claim (the codec refused it): not counted
            first_repeat = not stopped and same in seen
            if at < len(accepted) and key == (accepted_v6 if v6 else accepted)[at]:
                if stopped:
                    lost.add(at)
                at += 1
            else:
                out.append({**{w: c["whole"] for w, c in costs.items()},
                            "repeat": pair in said, "stop_written": not stopped,
                            **{f"{w}_value_end": c["value_end"] for w, c in costs.items()}})
            said.add(pair)
            seen.add(same)
            stopped = stopped or first_repeat
    return out, lost


def _chosen(logprobs: tuple[float, ...]) -> float:
    """The log-probability threshold the repeat-rollback rows use: the chosen gate's -0.055
    when replayed, else the first given."""
    return -0.055 if -0.055 in logprobs else logprobs[0]


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def study(rows: Rows, verifier: Verifier, logprobs: tuple[float, ...] = LOGPROBS,
          eithers: tuple[tuple[float, float], ...] = EITHERS, layout: str = "v3"
          ) -> dict[str, Any]:
    """The figures (module docstring)."""
    tok = corpus_tokens.tokenizer()
    empty = len(tok(EMPTY_TURN, add_special_tokens=False)["input_ids"]) + END_TOKENS
    windows = []   # per sample: its row, model sample, turns, measured tokens, claims
    for row, model, _, stats in rows.items:
        if stats is None or model.get("output") is None:
            continue
        if (model.get("gate") or {}).get("dropped"):
            raise EvalError(f"{model['id']}: a gate dropped claims at run time; replay a folder "
                            "run with --propose and no --claim-gate")
        texts = {e["index"]: e["text"] for e in row["input"]["events"]}
        claims = []
        for wire_claim, claim, f in zip(model["wire"]["claims"], model["output"]["claims"], stats,
                                        strict=True):
            claims.append({
                "logprob": SCORES[DEFAULT_SCORE](f),
                "p": verifier.prob(claim, row["input"]),
                "p_sentence": verifier.prob(sentence_quoted(claim, texts), row["input"]),
                "p_chosen": verifier.prob(codec_quoted(claim, texts), row["input"]),
                "v6": claim_costs(claim_fields(wire_claim, "v6", texts)),
                "v3": claim_costs(claim_fields(wire_claim, "v3", texts)),
                "v5a": claim_costs(claim_fields(wire_claim, "v5a", texts)),
                "v5b": claim_costs(claim_fields(wire_claim, "v5b", texts)),
            })
        extra, lost = extra_claims(model, texts, layout)
        calls = len(model.get("turns") or model.get("attempts") or [1])
        measured = sum(t.get("completion_tokens") or 0
                       for t in (model.get("turns") or model.get("attempts") or []))
        for n, claim in enumerate(claims):
            claim["lost"] = n in lost
        windows.append((row, model, calls, measured, claims, extra))
    if not windows:
        raise EvalError("no model sample with scored claims to replay")

    def replay(wire: str, point: str | None, keep, repeats: bool = False,
               stop: bool = False) -> dict[str, Any]:
        """`repeats`: a repeat is rolled back at the end of its value; `stop`: each turn ends
        at its first repeat (the claims after it never written, so never kept)."""
        total, tokens, kept_n = [0, 0, 0, 0], [], 0
        for row, model, calls, _, claims, extra in windows:
            mask = [bool(keep(c)) and not (stop and c["lost"]) for c in claims]
            kept_n += sum(mask)
            total = [a + b for a, b in zip(
                total, _counts(grade_sample(row, _only(model, mask))), strict=True)]
            tokens.append(calls * empty + sum(
                e[f"{wire}_value_end"] if repeats and e["repeat"] else e[wire]
                for e in extra if e["stop_written"] or not stop) + sum(
                c[wire]["whole"] if k or point is None else c[wire][point]
                for c, k in zip(claims, mask, strict=True) if not (stop and c["lost"])))
        return {"kept": kept_n, "totals": _totals(total),
                "answer_tokens": {"median": statistics.median(tokens),
                                  "p90": _quantile(tokens, 0.9)}}

    designs = []
    for a, b in eithers:
        designs.append({"design": "v3, gate at the end", "gate": f"lp>={a:g} or p>={b:g}",
                        **replay("v3", None, lambda c, a=a, b=b: c["logprob"] >= a or c["p"] >= b)})
    a, b = eithers[0]
    designs.append({"design": "v3, gate at the end, a turn stopped at its first repeat",
                    "gate": f"lp>={a:g} or p>={b:g}",
                    **replay("v3", None, lambda c: c["logprob"] >= a or c["p"] >= b,
                             stop=True)})
    for a in logprobs:
        designs.append({"design": "v3, gate at the end", "gate": f"lp>={a:g}",
                        **replay("v3", None, lambda c, a=a: c["logprob"] >= a)})
    for wire in ("v5a", "v5b"):
        for a in logprobs:
            designs.append({"design": f"{wire}, log-prob at the value", "gate": f"lp>={a:g}",
                            **replay(wire, "value", lambda c, a=a: c["logprob"] >= a)})
        designs.append({"design": f"{wire}, log-prob at the value, repeats rolled back",
                        "gate": f"lp>={logprobs[0]:g}" if len(logprobs) == 1 else
                        f"lp>={_chosen(logprobs):g}",
                        **replay(wire, "value", lambda c: c["logprob"] >= _chosen(logprobs),
                                 repeats=True)})
    for a, b in eithers:
        designs.append({"design": "v5b, either at the quote", "gate": f"lp>={a:g} or p>={b:g}",
                        **replay("v5b", "quotes",
                                 lambda c, a=a, b=b: c["logprob"] >= a or c["p_sentence"] >= b)})
    a, b = eithers[0]
    designs.append({"design": "v5b, either at the quote, a turn stopped at its first repeat",
                    "gate": f"lp>={a:g} or p>={b:g}",
                    **replay("v5b", "quotes", lambda c: c["logprob"] >= a or c["p_sentence"] >= b,
                             repeats=True, stop=True)})
    designs.append({"design": "v5b, either at the quote, repeats rolled back",
                    "gate": f"lp>={a:g} or p>={b:g}",
                    **replay("v5b", "quotes", lambda c: c["logprob"] >= a or c["p_sentence"] >= b,
                             repeats=True)})
    for a, b in eithers:
        designs.append({"design": "v6 (the codec quotes), gate at the end",
                        "gate": f"lp>={a:g} or p>={b:g}",
                        **replay("v6", None,
                                 lambda c, a=a, b=b: c["logprob"] >= a or c["p_chosen"] >= b)})
    a, b = eithers[0]
    designs.append({"design": "v6 (the codec quotes), gate at the end, repeats rolled back",
                    "gate": f"lp>={a:g} or p>={b:g}",
                    **replay("v6", None, lambda c: c["logprob"] >= a or c["p_chosen"] >= b,
                             repeats=True)})
    every = replay("v3", None, lambda c: True)
    measured = [w[3] for w in windows]
    claims = [c for w in windows for c in w[4]]
    extras = [e for w in windows for e in w[5]]
    lost = sum(c["lost"] for c in claims)
    return {
        "windows": len(windows), "claims": len(claims), "extra_claims": len(extras),
        "lost_to_a_stop": lost,
        "extra_tokens_median": {wire: statistics.median(e[wire] for e in extras)
                                if extras else 0 for wire in WIRES},
        "calls_median": statistics.median(w[2] for w in windows),
        "measured_answer_tokens": {"median": statistics.median(measured),
                                   "p90": _quantile(measured, 0.9)},
        "every_claim_v3": every,
        "claim_tokens_median": {
            w: {k: statistics.median(c[w][k] for c in claims) for k in ("whole", "value", "quotes")}
            for w in WIRES},
        "designs": designs,
    }


def _fmt(t: dict[str, Any]) -> str:
    support = f"{t['support']:.3f}" if t["support"] is not None else "-"
    return f"{t['supported']}/{t['claims']} = {support} | {t['covered']}/{t['required']}"


def report(f: dict[str, Any]) -> list[str]:
    e = f["every_claim_v3"]
    lines = [f"{f['windows']} windows, {f['claims']} proposed claims accepted by the codec and "
             f"{f['extra_claims']} more written (repeats or refused; written whole in every "
             "design but those rolling repeats back), a median "
             f"{f['calls_median']:g} calls a window; answer tokens measured in the run: median "
             f"{f['measured_answer_tokens']['median']:g}, p90 {f['measured_answer_tokens']['p90']:g}"
             f"; replayed, v3, every claim whole: median {e['answer_tokens']['median']:g}, p90 "
             f"{e['answer_tokens']['p90']:g} (every claim kept: {_fmt(e['totals'])})", "",
             "| wire | tokens a claim, median | by the value's first token | by the quote refs |",
             "|---|---|---|---|"]
    lines += [f"| {w} | {c['whole']:g} | {c['value']:g} | {c['quotes']:g} |"
              for w, c in f["claim_tokens_median"].items()]
    lines += ["", "| design | keep when | kept | supported / claims = support | covered / facts "
              "| answer tokens a window, median (p90) |", "|---|---|---|---|---|---|"]
    lines += [f"| {d['design']} | {d['gate']} | {d['kept']} | {_fmt(d['totals'])} | "
              f"{d['answer_tokens']['median']:g} ({d['answer_tokens']['p90']:g}) |"
              for d in f["designs"]]
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="eval/studies/rollback.py",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path,
                   help="an evaluation folder (its model arm run with --propose and --logprobs, "
                        "no --claim-gate)")
    p.add_argument("--model", required=True, help="the model arm's name")
    p.add_argument("--rules", default="rules", help="the folder's rules arm (rules)")
    p.add_argument("--weights", type=Path, default=DEFAULT_WEIGHTS,
                   help="the verifier's weights (default: the committed verifier.json)")
    p.add_argument("--logprob", type=float, action="append",
                   help="a log-probability threshold A to replay (repeatable; default "
                        f"{', '.join(f'{a:g}' for a in LOGPROBS)})")
    p.add_argument("--either", action="append", default=[], metavar="A,B",
                   help="an either-gate to replay: keep when the score is at least A or P(keep) "
                        "at least B (repeatable; default "
                        f"{'; '.join(f'{a:g},{b:g}' for a, b in EITHERS)})")
    p.add_argument("--rows-of", type=Path, metavar="FOLDER",
                   help="only the rows another evaluation folder ran (e.g. a whole-split folder "
                        "replayed on the first N rows a read-once folder ran)")
    p.add_argument("--json", type=Path, help="also write the figures here (JSON)")
    args = p.parse_args(argv)
    try:
        verifier = Verifier.load(args.weights)
        rows = Rows(args.out, args.model, args.rules)
        if args.rows_of is not None:
            ids = {s["id"] for s in read_samples(args.rows_of / SAMPLES)}
            rows.items = [item for item in rows.items if item[0]["id"] in ids]
        config = json.loads((args.out / "config.json").read_text("utf-8"))
        layout = (config.get("sampler") or {}).get("claim_layout", "v3")
        figures = study(rows, verifier, tuple(args.logprob or LOGPROBS),
                        parse_either(args.either) or EITHERS, layout)
    except (EvalError, VerifierError, OSError, KeyError, ValueError) as exc:
        print(f"eval/studies/rollback.py: error: {exc}", file=sys.stderr)
        return 2
    figures = {"folder": str(args.out), "model": args.model, **figures}
    print("\n".join(report(figures)))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
