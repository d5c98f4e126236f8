"""Structural figures of the generator's rows (issue 11): conversation shape, fixed
acknowledgements, relationship claims, label-bug counts and pre-repair audit violations.

    PYTHONPATH=src python corpus/generator_stats.py [--seed 13] [--episodes 1300] [--tokens]

Reads rows straight from `generate_rows` (before any audit, repair or exclusion) of the
`memworker` on PYTHONPATH, so the same script measures an older checkout too.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from datetime import date
from statistics import mean

from memworker import temporal
from memworker.corpus import audit
from memworker.corpus.build import generate_rows

#: the 11 fixed replies of generator 1.0 (acknowledgements and greetings)
OLD_ACKS = {"Got it.", "Noted, thanks.", "Thanks for letting me know.", "Okay!", "Sounds good.",
            "Understood.", "Thanks for the update.", "Makes sense.", "Hi! What's up?",
            "Hello! How can I help?", "Hey, good to hear from you."}
_FIRST = re.compile(r"\b(?:my|I|me|our|I'm|mine)\b")
_WD = re.compile(r"\b(next|last)\s+(Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)\b")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--episodes", type=int, default=1300)
    ap.add_argument("--domain", default="general")
    ap.add_argument("--tokens", action="store_true", help="count events tokens (SmolLM2)")
    ap.add_argument("--skeletons", action="store_true",
                    help="share of test sentences whose masked skeleton occurs in train (an "
                         "approximation: pool values, names, relations, time expressions and "
                         "digits masked)")
    args = ap.parse_args(argv)
    rows, splits = generate_rows(args.domain, args.seed, args.episodes)
    ext = [r for r in rows if r["task"] == "extract"]
    user_turns = [e["text"] for r in ext for e in r["input"]["events"] if e["role"] == "user"]
    asst = [e["text"] for r in ext for e in r["input"]["events"] if e["role"] == "assistant"]
    sessions = [len({e["timestamp"][:10] for e in r["input"]["events"]}) for r in ext]
    claims = [c for r in ext for c in r["gold"]["claims"]]
    leaks = sum(1 for c in claims if _FIRST.search(c["statement"]))
    leaks_cons = sum(1 for r in rows if r["task"] == "consolidate"
                     for f in r["input"]["facts"] if _FIRST.search(f["statement"]))
    leaks_ans = sum(1 for r in rows if r["task"] == "reflect" and _FIRST.search(r["gold"]["answer"]))
    far = dated = 0
    for r in ext:
        for c in r["gold"]["claims"]:
            if not c["date"] or c["date_precision"] != "day":
                continue
            dated += 1
            m = _WD.search(c["time_expression"] or "")
            if m:
                ev = r["input"]["events"][max(c["source_indices"])]
                d = (date.fromisoformat(c["date"]) - date.fromisoformat(ev["timestamp"][:10])).days
                if abs(d) > 7 or d == 0:
                    far += 1
    pre = audit.audit_rows(rows, splits)
    codes = Counter(v.code for vs in pre.values() for v in vs)
    refl = [r for r in rows if r["task"] == "reflect"]
    out = {
        "rows": len(rows), "episodes": len({r["episode"] for r in rows}),
        "families": len({r["family"] for r in rows}),
        "events_per_extract_mean": round(mean(len(r["input"]["events"]) for r in ext), 2),
        "events_per_extract_min_max": [min(len(r["input"]["events"]) for r in ext),
                                       max(len(r["input"]["events"]) for r in ext)],
        "words_per_user_turn_mean": round(mean(len(t.split()) for t in user_turns), 2),
        "sessions_per_episode_mean": round(mean(sessions), 2),
        "single_session_share": round(sum(1 for s in sessions if s == 1) / len(sessions), 3),
        "assistant_fixed_ack_share": round(sum(1 for t in asst if t in OLD_ACKS) / len(asst), 3)
        if asst else 0.0,
        "assistant_distinct_texts": len(set(asst)),
        "claims_per_extract_mean": round(len(claims) / len(ext), 2),
        "claim_kinds": dict(sorted(Counter(c["kind"] for c in claims).items())),
        "relationship_claims": sum(1 for c in claims if c["kind"] == "relationship"),
        "quotes_that_are_not_whole_events": sum(
            1 for r in ext for c in r["gold"]["claims"] for i, q in zip(
                c["source_indices"], c["quotes"], strict=True)
            if q != r["input"]["events"][i]["text"]),
        "empty_extract_share": round(sum(1 for r in ext if not r["gold"]["claims"]) / len(ext), 3),
        "insufficient_reflect_share": round(
            sum(1 for r in refl if r["gold"]["insufficient_evidence"]) / len(refl), 3),
        "reflect_citations_ge2_share": round(
            sum(1 for r in refl if len(r["gold"]["citations"]) >= 2) / len(refl), 3),
        "reflect_noon_timestamps": sum(1 for r in refl for e in r["input"]["evidence"]
                                       if e["timestamp"][11:19] == "12:00:00"),
        "label_bugs": {"first_person_in_claim_statements": leaks,
                       "first_person_in_consolidate_facts": leaks_cons,
                       "first_person_in_reflect_answers": leaks_ans,
                       "next_last_weekday_outside_1_7_days": far, "dated_claims": dated},
        "pre_repair_rows_with_violations": len(pre),
        "pre_repair_violations": dict(sorted(codes.items())),
    }
    if args.tokens:
        from memworker.corpus import tokens
        tok = tokens.tokenizer()
        counts = [len(tok("\n".join(e["text"] for e in r["input"]["events"]),
                          add_special_tokens=False)["input_ids"]) for r in ext]
        out["events_text_tokens_mean"] = round(mean(counts), 1)
        out["events_text_tokens_max"] = max(counts)
    if args.skeletons:
        out["test_sentences_with_train_skeleton"] = skeleton_overlap(rows)
    print(json.dumps(out, indent=1))
    return 0


def skeleton_overlap(rows: list[dict]) -> dict:
    """Test event sentences (user and assistant) whose masked form occurs in train."""
    from memworker.corpus.coding import CODING, CODING_POOLS
    from memworker.corpus.domains import GENERAL, POOLS
    from memworker.corpus.pools import FEMALE, MALE, PETS

    vals = {v for p in (*POOLS.values(), *CODING_POOLS.values()) for v in p}
    vals |= set(FEMALE) | set(MALE) | set(PETS)
    for d in (*GENERAL, CODING):
        vals |= {x for a in d.activities for x in (a.base, a.past)}
        vals |= {x.value for x in d.dated} | {x for p in d.prefs for x in (p.like, p.unless)}
        vals |= {x.topic for x in d.decisions} | set(d.relations) | set(d.pets)
        vals |= set(d.accounts)
    rx = re.compile("|".join(re.escape(v) for v in sorted(vals, key=len, reverse=True)))
    split_s = re.compile(r"(?<=[.!?])\s+")

    def mask(s: str) -> str:
        for e in temporal.find_expressions(s):
            s = s.replace(e, "<D>")
        return re.sub(r"\d+", "0", rx.sub("<V>", s)).lower()

    train: set[str] = set()
    test: list[str] = []
    for r in rows:
        if r["task"] != "extract" or r["split"] == "val":
            continue
        for e in r["input"]["events"]:
            if e["role"] == "tool":
                continue
            for s in split_s.split(e["text"]):
                (train.add if r["split"] == "train" else test.append)(mask(s))
    hits = sum(1 for m in test if m in train)
    return {"test_sentences": len(test), "in_train": hits,
            "share": round(hits / len(test), 4) if test else 0.0}


if __name__ == "__main__":
    raise SystemExit(main())
