"""Canonical JSON bytes and sha256 provenance: of rows, files, and `SHA256SUMS` manifests.

Canonical JSON = sorted keys, UTF-8 (no ASCII escaping), no insignificant whitespace. A
`SHA256SUMS` file uses `sha256sum`'s own format (`<hex>  <relative path>`, text mode), so
`sha256sum -c SHA256SUMS` accepts what `write_sha256sums` writes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

_CHUNK = 1 << 20


class HashMismatch(ValueError):
    """A file's sha256 differs from the recorded one (or the file is missing)."""

    def __init__(self, problems: list[tuple[str, str, str | None]]):
        self.problems = problems  # (path, expected, actual or None when missing)
        lines = [
            f"{path}: expected {exp}, " + ("file is missing" if act is None else f"file is {act}")
            for path, exp, act in problems
        ]
        super().__init__("sha256 mismatch: " + "; ".join(lines))


def canonical_json(obj: Any) -> bytes:
    """Canonical bytes of a JSON value. NaN/Infinity are refused (not JSON)."""
    return json.dumps(
        obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False
    ).encode("utf-8")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_parts(*parts: object) -> bytes:
    """Raw sha256 digest of the parts' text joined by U+001F: a stable identity for seeded random
    streams and hash splits (never Python's salted hash())."""
    return hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).digest()


def sha256_json(obj: Any) -> str:
    """sha256 of a value's canonical JSON bytes (the hash of a row, a config, a receipt)."""
    return sha256_bytes(canonical_json(obj))


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def write_json(path: str | Path, doc: Any) -> Path:
    """The receipts' JSON file format (receipts, run configs, release receipts): indent 2,
    sorted keys, a trailing newline, so a rewrite keeps every untouched key's bytes."""
    p = Path(path)
    p.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", "utf-8")
    return p


def write_jsonl(path: str | Path, rows: Iterable[Any]) -> str:
    """Write rows as canonical JSON lines (each ending in '\\n'); return the file's sha256."""
    digest = hashlib.sha256()
    with open(path, "wb") as fh:
        for row in rows:
            line = canonical_json(row) + b"\n"
            fh.write(line)
            digest.update(line)
    return digest.hexdigest()


def read_jsonl(path: str | Path) -> list[Any]:
    """Rows of a JSONL file; a malformed line raises ValueError naming the file and line."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
    return rows


def write_sha256sums(root: str | Path, files: Iterable[str | Path], name: str = "SHA256SUMS") -> Path:
    """Write `root/name` listing the sha256 of each file (paths relative to root, sorted)."""
    root = Path(root)
    rels = sorted({Path(f).resolve().relative_to(root.resolve()).as_posix() for f in files})
    for rel in rels:
        if "\n" in rel or "\\" in rel:
            raise ValueError(f"cannot list {rel!r} in {name}: newline or backslash in the path")
    out = root / name
    out.write_text("".join(f"{sha256_file(root / rel)}  {rel}\n" for rel in rels), encoding="utf-8")
    return out


def read_sha256sums(path: str | Path) -> dict[str, str]:
    """{relative path: sha256} from a sha256sum-format file (text ' ' or binary '*' marker)."""
    entries: dict[str, str] = {}
    for number, line in enumerate(Path(path).read_text("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        digest, sep, rel = line[:64], line[64:66], line[66:]
        if len(digest) != 64 or sep not in ("  ", " *") or not rel or not _is_hex(digest):
            raise ValueError(f"{path}:{number}: not a sha256sum line: {line!r}")
        entries[rel] = digest.lower()
    return entries


def verify_sha256sums(path: str | Path) -> dict[str, str]:
    """Check every file listed in a SHA256SUMS file (paths relative to its folder).
    Returns the entries; raises HashMismatch listing every missing or changed file."""
    path = Path(path)
    entries = read_sha256sums(path)
    problems = []
    for rel, expected in entries.items():
        target = path.parent / rel
        actual = sha256_file(target) if target.is_file() else None
        if actual != expected:
            problems.append((rel, expected, actual))
    if problems:
        raise HashMismatch(problems)
    return entries


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdefABCDEF" for c in text)
