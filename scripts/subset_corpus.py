"""A verified corpus folder holding chosen train rows as its train, val and test splits.

For the overfit check of docs/research/train-diagnosis.md ("Decisions, not tokens"): train a fresh
adapter on a handful of train rows until it has memorised them, then run it through the codec on the
same rows (`eval/run.py --set val`). A pipeline that cannot reproduce rows it memorised has a fault that no
amount of data fixes. Never point this at evaluation rows: it copies train-split rows only.

    python scripts/subset_corpus.py --corpus data/corpus --out /tmp/ov/corpus \
        --task extract --rows 8 --min-claims 2 --max-claims 4

Rows are taken in file order. The new manifest is the source manifest with the file hashes of the
subset (and its own hash) recomputed, so `verify_corpus` accepts it; `heldout.jsonl` is copied.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from memworker.corpus.build import verify_corpus, write_manifest
from memworker.hashing import sha256_file

SPLITS = ("train", "val", "test")


def n_claims(row: dict) -> int:
    return len(json.loads(row["messages"][-1]["content"]).get("claims", []))


def subset(corpus: Path, out: Path, task: str, rows: int, min_claims: int = 0,
           max_claims: int | None = None) -> list[str]:
    verify_corpus(corpus)
    lines = (corpus / "wire/train.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    wire = [(json.loads(line), line) for line in lines]
    canonical = {json.loads(line)["id"]: line
                 for line in (corpus / "canonical/train.jsonl").open(encoding="utf-8")}
    chosen = [(r, line) for r, line in wire if r["task"] == task
              and (task != "extract" or (n_claims(r) >= min_claims
                                         and (max_claims is None or n_claims(r) <= max_claims)))]
    chosen = chosen[:rows]
    if not chosen:
        raise SystemExit(f"no {task} train rows match in {corpus}")
    if out.exists():
        shutil.rmtree(out)
    (out / "wire").mkdir(parents=True)
    (out / "canonical").mkdir()
    ids = [r["id"] for r, _ in chosen]
    wire_text = "".join(line for _, line in chosen)
    for split in SPLITS:
        (out / f"wire/{split}.jsonl").write_text(wire_text, encoding="utf-8")
        (out / f"canonical/{split}.jsonl").write_text("".join(canonical[i] for i in ids),
                                                      encoding="utf-8")
    shutil.copy(corpus / "heldout.jsonl", out / "heldout.jsonl")
    manifest = json.loads((corpus / "manifest.json").read_text(encoding="utf-8"))
    manifest["files"] = {rel: sha256_file(out / rel) for rel in manifest["files"]}
    manifest["subset_of"] = {"corpus": str(corpus), "split": "train", "ids": ids}
    write_manifest(out, manifest)
    verify_corpus(out)
    return ids


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=Path("data/corpus"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--task", choices=("extract", "consolidate", "reflect"), default="extract")
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--min-claims", type=int, default=0, help="extract: fewest gold claims")
    ap.add_argument("--max-claims", type=int, default=None, help="extract: most gold claims")
    a = ap.parse_args(argv)
    ids = subset(a.corpus, a.out, a.task, a.rows, a.min_claims, a.max_claims)
    print(f"subset: {len(ids)} {a.task} train rows -> {a.out} (train = val = test): "
          + ", ".join(ids))
    return 0


if __name__ == "__main__":
    sys.exit(main())
