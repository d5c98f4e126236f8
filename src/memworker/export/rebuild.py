"""Rebuild the shipped release from what a clone holds (issue 45): the student's committed
adapter and stage receipts, the embedded base, the committed release receipt. CI runs it on a
clean checkout; a user reviewing a release runs it before trusting a number in it.

    python export/rebuild.py [--out release] [--receipts-dir receipts] [--sums SHA256SUMS]

1. The release receipt's student run (`student.run_dir`, a run committed under receipts/) must
   have its adapter tracked by git with the sha256 its receipt records
   (`memworker.receipts.adapter_problems`; skipped outside a git checkout).
2. `export/run.py` merges the adapter and converts base and student to Q8_0 GGUF, with the
   worker the receipt records.
3. Both GGUFs must have the sha256 the committed SHA256SUMS names. The merge runs in floating
   point: a CPU that rounds it differently gives other bytes, and the message says so and names
   both sha256 (the committed evaluations then describe other bytes than this machine makes).
4. The committed release receipt (its evaluations, gate, lineage) and card
   (`receipts/release-card.md`) are put on the rebuilt folder with the SHA256SUMS they imply
   (by the receipt's writer: `memworker.export.receipt.restore`); every file must then have the
   committed sha256, and `export/verify.py` must pass on the folder (the release gate included).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from memworker.export import cli as export_cli
from memworker.export.receipt import restore
from memworker.export.verify import verify_release
from memworker.hashing import read_sha256sums, sha256_file
from memworker.inference.hmem import worker_flags
from memworker.receipts import RELEASE_RECEIPT, SUMS, adapter_problems


class RebuildError(RuntimeError):
    """The committed release cannot be rebuilt byte for byte here (the message says why)."""


def _in_git(root: Path) -> bool:
    return subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=root,
                          capture_output=True).returncode == 0


def rebuild(out: Path, receipts: Path, sums_path: Path, root: Path = Path(".")) -> list[str]:
    """Rebuild the committed release into `out`; returns report lines (RebuildError if not)."""
    committed = json.loads((receipts / RELEASE_RECEIPT).read_text("utf-8"))
    student = committed["student"]
    run_dir = student["run_dir"]
    if _in_git(root):
        problems = adapter_problems(root, run_dir)
        if problems:
            raise RebuildError(f"{receipts / RELEASE_RECEIPT} names {run_dir}, whose adapter is "
                               "not committed: " + "; ".join(problems))
    sums = read_sha256sums(sums_path)
    prefix = Path(next(iter(sums))).parts[0]  # "release": SHA256SUMS lists release/<file>
    started = time.perf_counter()
    argv = ["--run", run_dir, "--with-base", "--out", str(out), "--force", "--receipts-dir", "",
            "--no-publish", *worker_flags(committed.get("worker") or {})]
    if export_cli.main(argv) != 0:
        raise RebuildError(f"export failed: python export/run.py {' '.join(argv)}")
    seconds = time.perf_counter() - started
    lines = [f"rebuild: exported {run_dir} and the base in {seconds:.0f} s"]
    differ = []
    for rel in sorted(p for p in committed["artifacts"] if p.endswith(".gguf")):
        want, have = sums.get(f"{prefix}/{rel}"), sha256_file(out / rel)
        if want != have:
            differ.append(f"{rel}: committed sha256 {want}, rebuilt {have}")
    if differ:
        raise RebuildError(
            "the rebuilt GGUFs differ from the committed SHA256SUMS: " + "; ".join(differ)
            + ". The merge runs in floating point, so another CPU may round a few weights "
            "differently; the committed evaluations describe the committed bytes, not these")
    lines.append("rebuild: both GGUFs have the committed sha256")
    restore(out, receipts)  # the committed receipt and card, and the SHA256SUMS they imply
    mismatched = []
    for rel, digest in sorted(sums.items()):
        path = out / Path(rel).relative_to(prefix)
        if not path.is_file() or sha256_file(path) != digest:
            mismatched.append(f"{rel}: committed {digest}, rebuilt "
                              f"{sha256_file(path) if path.is_file() else 'missing'}")
    if mismatched:
        raise RebuildError("the rebuilt release differs from the committed SHA256SUMS: "
                           + "; ".join(mismatched))
    lines.append(f"rebuild: every file of {out} has the sha256 of {sums_path}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python export/rebuild.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="release", type=Path, help="release folder (replaced)")
    parser.add_argument("--receipts-dir", default="receipts", type=Path)
    parser.add_argument("--sums", default=SUMS, type=Path, help="the committed top-level "
                        "SHA256SUMS (default: SHA256SUMS)")
    parser.add_argument("--no-verify", action="store_true", help="skip export/verify.py")
    args = parser.parse_args(argv)
    try:
        for line in rebuild(args.out, args.receipts_dir, args.sums):
            print(line)
    except (RebuildError, OSError, KeyError, ValueError) as exc:
        print(f"rebuild: {exc}", file=sys.stderr)
        return 1
    if args.no_verify:
        return 0
    problems = verify_release(args.out, args.receipts_dir)
    if problems:
        print("rebuild: the rebuilt release does not verify: " + "; ".join(problems[:5]),
              file=sys.stderr)
        return 1
    print(f"rebuild: python export/verify.py {args.out} passes")
    return 0

