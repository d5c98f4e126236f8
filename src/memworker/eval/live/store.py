"""A small SQLite reference store that follows the hmem row contract, for live acceptance.

It calls the memory worker only through `memworker.inference.hmem.MemWorkerBackend` (any
generation backend behind it, or the rules baseline through `RulesBackend`):

- `add_episode(session, messages, at)`: raw episodes, one row per message (its own transaction;
  not a worker call). Credential-shaped strings are redacted with `memworker.safety.redact`
  before they are written: the raw text goes to the worker, never to disk.
- `extract(session)`: the worker's `extract` over the session's messages with the user's active
  memories as existing facts -> one memory row per candidate (+ entities, links); a candidate that
  supersedes an active memory stamps that row's `valid_to` and `superseded_by`.
- `consolidate()`: the worker's `consolidate` over the user's active non-observation memories
  -> observation rows (kind "observation") linked to their >= 2 supporting memories.
- `reflect(question, at)`: retrieval over stored memories (active and history, ranked by shared
  words; each item's timestamp is its `valid_from`) -> the worker's `reflect` -> a reflection row.

Invariants (enforced by the schema, not by convention):

- ADD-only: triggers abort any DELETE and any UPDATE of memories other than the one supersession
  stamp (`valid_to` and `superseded_by` set once, on an active row); episodes, entities, links and
  reflections are never updated or deleted.
- WAL journal mode.
- One transaction per worker call: `BEGIN IMMEDIATE` before the store reads what it sends to the
  worker, `COMMIT` after the rows are written; a worker error (a `CodecError` for invalid or
  truncated output, a backend error, anything raised) rolls back and re-raises, so the store's
  rows, and its files' bytes, are what they were before the call.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from memworker.hashing import sha256_bytes
from memworker.safety import redact
from memworker.textnorm import norm, stem

SCHEMA = """
CREATE TABLE IF NOT EXISTS episodes (
    id TEXT PRIMARY KEY, user_id TEXT NOT NULL, session TEXT NOT NULL, position INTEGER NOT NULL,
    role TEXT NOT NULL, text TEXT NOT NULL, timestamp TEXT NOT NULL, trusted INTEGER NOT NULL,
    created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS memories (
    id TEXT PRIMARY KEY, user_id TEXT NOT NULL, text TEXT NOT NULL, category TEXT NOT NULL,
    importance INTEGER NOT NULL, event_date TEXT, date_precision TEXT,
    valid_from TEXT NOT NULL, valid_to TEXT, superseded_by TEXT,
    source_ids TEXT NOT NULL, content_hash TEXT NOT NULL,
    kind TEXT NOT NULL, subject TEXT, predicate TEXT, value TEXT,
    worker_call INTEGER NOT NULL, created_at TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS memories_active ON memories (user_id, valid_to);
CREATE TABLE IF NOT EXISTS entities (
    id INTEGER PRIMARY KEY, user_id TEXT NOT NULL, name TEXT NOT NULL, type TEXT NOT NULL,
    memory_id TEXT NOT NULL REFERENCES memories (id));
CREATE TABLE IF NOT EXISTS links (
    memory_id TEXT NOT NULL REFERENCES memories (id), relation TEXT NOT NULL,
    target_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS reflections (
    id INTEGER PRIMARY KEY, user_id TEXT NOT NULL, question TEXT NOT NULL, asked_at TEXT NOT NULL,
    answer TEXT NOT NULL, citations TEXT NOT NULL, insufficient_evidence INTEGER NOT NULL,
    evidence_ids TEXT NOT NULL, worker_call INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS worker_calls (
    id INTEGER PRIMARY KEY, task TEXT NOT NULL, user_id TEXT NOT NULL, at TEXT NOT NULL,
    attempts INTEGER NOT NULL, diagnostics TEXT NOT NULL);
CREATE TRIGGER IF NOT EXISTS memories_no_delete BEFORE DELETE ON memories
    BEGIN SELECT RAISE(ABORT, 'memories are add-only: rows are never deleted'); END;
CREATE TRIGGER IF NOT EXISTS memories_only_supersede BEFORE UPDATE ON memories
    WHEN OLD.valid_to IS NOT NULL OR NEW.valid_to IS NULL OR NEW.superseded_by IS NULL
      OR NEW.id IS NOT OLD.id OR NEW.user_id IS NOT OLD.user_id OR NEW.text IS NOT OLD.text
      OR NEW.category IS NOT OLD.category OR NEW.importance IS NOT OLD.importance
      OR NEW.event_date IS NOT OLD.event_date OR NEW.date_precision IS NOT OLD.date_precision
      OR NEW.valid_from IS NOT OLD.valid_from OR NEW.source_ids IS NOT OLD.source_ids
      OR NEW.content_hash IS NOT OLD.content_hash OR NEW.kind IS NOT OLD.kind
      OR NEW.subject IS NOT OLD.subject OR NEW.predicate IS NOT OLD.predicate
      OR NEW.value IS NOT OLD.value OR NEW.worker_call IS NOT OLD.worker_call
      OR NEW.created_at IS NOT OLD.created_at
    BEGIN SELECT RAISE(ABORT, 'memories are add-only: only valid_to and superseded_by of an
                              active row may be set, once'); END;
"""
_FROZEN = ("episodes", "entities", "links", "reflections", "worker_calls")
TEXT_TABLES = ("episodes", "memories", "entities", "links", "reflections", "worker_calls")
EXISTING_LIMIT = 30      # the episode contract allows at most 30 existing facts
EVIDENCE_LIMIT = 8       # memories retrieved for one reflection
_STOP = {"the", "a", "an", "is", "are", "was", "were", "to", "of", "in", "on", "at", "and", "or",
         "does", "do", "did", "what", "which", "who", "where", "when", "how", "s", "it", "that",
         "this", "for", "with", "by", "their", "they", "has", "have", "had", "user", "now"}


class StoreError(RuntimeError):
    """The store was used in a way its contract forbids; the message says what to do."""


def content_hash(user_id: str, text: str) -> str:
    """sha256 of the user id and the normalised memory text (dedupes restatements)."""
    return sha256_bytes(f"{user_id}\n{norm(text)}".encode())


def _words(text: str) -> set[str]:
    return {stem(w) for w in norm(text).split() if w not in _STOP}


def _stamp(value: str | datetime) -> str:
    return value.isoformat(timespec="seconds") if isinstance(value, datetime) else str(value)


class LiveStore:
    """The reference store for one user (`user_id`) in the SQLite file `path`."""

    def __init__(self, path: str | Path, worker: Any, *, user_id: str = "u1"):
        self.path = Path(path)
        self.worker = worker
        self.user_id = user_id
        self.db = sqlite3.connect(self.path, isolation_level=None)  # explicit transactions
        self.db.row_factory = sqlite3.Row
        mode = self.db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode != "wal":
            raise StoreError(f"{self.path}: SQLite refused WAL mode (got {mode!r}); use a local "
                             "file system path")
        self.db.execute("PRAGMA foreign_keys=ON")
        self.db.executescript(SCHEMA + "".join(
            f"CREATE TRIGGER IF NOT EXISTS {t}_frozen_u BEFORE UPDATE ON {t} BEGIN SELECT "
            f"RAISE(ABORT, '{t} are add-only'); END;\n"
            f"CREATE TRIGGER IF NOT EXISTS {t}_frozen_d BEFORE DELETE ON {t} BEGIN SELECT "
            f"RAISE(ABORT, '{t} are add-only'); END;\n" for t in _FROZEN))

    def close(self) -> None:
        self.db.close()

    # --- reads ----------------------------------------------------------------------------------
    def rows(self, table: str) -> list[dict[str, Any]]:
        if table not in TEXT_TABLES:
            raise StoreError(f"unknown table {table!r}; tables: {', '.join(TEXT_TABLES)}")
        order = "rowid"
        return [dict(r) for r in self.db.execute(f"SELECT * FROM {table} ORDER BY {order}")]

    def memories(self, *, active: bool | None = None, as_of: str | None = None
                 ) -> list[dict[str, Any]]:
        """The user's memories: all (history included), only active ones (`valid_to` NULL), or
        those valid at `as_of` (valid_from <= as_of < valid_to; ISO strings of one offset)."""
        sql = "SELECT * FROM memories WHERE user_id = ?"
        args: list[Any] = [self.user_id]
        if active is True:
            sql += " AND valid_to IS NULL"
        elif active is False:
            sql += " AND valid_to IS NOT NULL"
        if as_of is not None:
            sql += " AND valid_from <= ? AND (valid_to IS NULL OR valid_to > ?)"
            args += [as_of, as_of]
        rows = [dict(r) for r in self.db.execute(sql + " ORDER BY rowid", args)]
        for row in rows:
            row["source_ids"] = json.loads(row["source_ids"])
        return rows

    def links(self, memory_id: str) -> list[dict[str, Any]]:
        return [dict(r) for r in self.db.execute(
            "SELECT relation, target_id FROM links WHERE memory_id = ? ORDER BY rowid",
            (memory_id,))]

    def session_messages(self, session: str) -> list[dict[str, Any]]:
        return [{"id": r["id"], "role": r["role"], "content": r["text"],
                 "timestamp": r["timestamp"], "trusted": bool(r["trusted"])}
                for r in self.db.execute("SELECT * FROM episodes WHERE user_id = ? AND session = ?"
                                         " ORDER BY position", (self.user_id, session))]

    def _next_id(self, prefix: str, table: str) -> str:
        n = self.db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
        return f"{prefix}{n + 1}"

    # --- writes ---------------------------------------------------------------------------------
    def add_episode(self, session: str, messages: Iterable[Mapping[str, Any]],
                    at: str | datetime) -> list[str]:
        """Store a session's raw messages (credentials redacted); returns their ids. Message ids
        are `<session>-<n>`. A message may carry its own "timestamp" and "trusted" flag."""
        ids = []
        stamp = _stamp(at)
        with self._transaction():
            start = self.db.execute("SELECT COUNT(*) FROM episodes WHERE session = ?",
                                    (session,)).fetchone()[0]
            for n, msg in enumerate(messages, start=start):
                text = msg.get("content", msg.get("text"))
                if not isinstance(text, str) or msg.get("role") not in ("user", "assistant",
                                                                         "tool"):
                    raise StoreError(f"session {session} message {n}: needs a role (user, "
                                     "assistant or tool) and a text 'content'")
                eid = f"{session}-{n}"
                self.db.execute(
                    "INSERT INTO episodes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (eid, self.user_id, session, n, msg["role"], redact(text),
                     _stamp(msg.get("timestamp", stamp)),
                     int(bool(msg.get("trusted", msg["role"] != "tool"))), stamp))
                ids.append(eid)
        return ids

    def extract(self, session: str, messages: list[Mapping[str, Any]], at: str | datetime
                ) -> list[str]:
        """One worker call: extract over the session's messages (their raw text, as the caller
        received it: `messages` are the ones given to `add_episode`, in order). Returns the ids
        of the memories written."""
        stamp = _stamp(at)
        with self._transaction():
            stored = self.session_messages(session)
            if len(stored) != len(messages):
                raise StoreError(f"session {session}: add_episode() it first ({len(stored)} "
                                 f"messages stored, {len(messages)} given)")
            window = [{**dict(m), "id": s["id"], "timestamp": s["timestamp"],
                       "trusted": s["trusted"]} for m, s in zip(messages, stored, strict=True)]
            existing = [{"id": m["id"], "text": m["text"], "valid_from": m["valid_from"][:10]}
                        for m in self.memories(active=True)][-EXISTING_LIMIT:]
            candidates = self.worker.extract(window, existing, observed_at=stamp)
            call = self._log_call("extract", stamp)
            by_id = {m["id"]: m["timestamp"] for m in window}
            written = []
            for cand in candidates:
                cited = [by_id[s] for s in cand["source_ids"] if s in by_id]
                valid_from = max(cited) if cited else stamp
                mid = self._insert_memory(cand, kind=cand["kind"], valid_from=valid_from,
                                          call=call, at=stamp)
                if mid is None:
                    continue
                written.append(mid)
                for old in cand["supersedes"]:
                    self._supersede(old, mid, valid_from)
        return written

    def consolidate(self, at: str | datetime) -> list[str]:
        """One worker call: observations over the active non-observation memories."""
        stamp = _stamp(at)
        with self._transaction():
            facts = [{"id": m["id"], "text": m["text"]} for m in self.memories(active=True)
                     if m["kind"] != "observation"][-30:]
            if len(facts) < 2:
                return []
            candidates = self.worker.consolidate(facts)
            call = self._log_call("consolidate", stamp)
            known = {f["id"] for f in facts}
            written = []
            for cand in candidates:
                if len(set(cand["source_ids"])) < 2 or not set(cand["source_ids"]) <= known:
                    raise StoreError(f"observation {cand['text']!r} must cite >= 2 stored facts, "
                                     f"got {cand['source_ids']}")
                mid = self._insert_memory(cand, kind="observation", valid_from=stamp, call=call,
                                          at=stamp)
                if mid is not None:
                    written.append(mid)
        return written

    def retrieve(self, question: str, limit: int = EVIDENCE_LIMIT) -> list[dict[str, Any]]:
        """Memories (active and history) sharing a content word with the question, most shared
        words first, then newest; each as reflect evidence {"id", "text", "timestamp"}: the
        memory's text (plus "(date: <event_date>)" when it has one) and its `valid_from`."""
        words = _words(question)
        scored = []
        for n, m in enumerate(self.memories()):
            shared = len(words & _words(m["text"]))
            if shared:
                scored.append((-shared, -n, m))
        scored.sort(key=lambda s: (s[0], s[1]))
        return [{"id": m["id"], "timestamp": m["valid_from"],
                 "text": m["text"] + (f" (date: {m['event_date']})" if m["event_date"] else "")}
                for _, _, m in scored[:limit]]

    def reflect(self, question: str, at: str | datetime) -> dict[str, Any]:
        """One worker call: the answer over retrieved memories, stored as a reflection row.
        Returns the answer plus the evidence sent ("evidence")."""
        stamp = _stamp(at)
        with self._transaction():
            evidence = self.retrieve(question)
            answer = self.worker.reflect(question, evidence, asked_at=stamp)
            call = self._log_call("reflect", stamp)
            self.db.execute(
                "INSERT INTO reflections (user_id, question, asked_at, answer, citations, "
                "insufficient_evidence, evidence_ids, worker_call) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (self.user_id, question, stamp, answer["text"], json.dumps(answer["citations"]),
                 int(answer["insufficient_evidence"]),
                 json.dumps([e["id"] for e in evidence]), call))
        return {**answer, "evidence": evidence}

    # --- internals ------------------------------------------------------------------------------
    def _transaction(self) -> _Transaction:
        return _Transaction(self.db)

    def _log_call(self, task: str, at: str) -> int:
        last = getattr(self.worker, "last", None)
        attempts = len(last.attempts) if last is not None else 1
        diagnostics = [redact(d) for d in (last.diagnostics if last is not None else [])]
        cur = self.db.execute("INSERT INTO worker_calls (task, user_id, at, attempts, diagnostics)"
                              " VALUES (?, ?, ?, ?, ?)",
                              (task, self.user_id, at, attempts, json.dumps(diagnostics)))
        return int(cur.lastrowid)

    def _insert_memory(self, cand: Mapping[str, Any], *, kind: str, valid_from: str, call: int,
                       at: str) -> str | None:
        """Insert one candidate; None when an active memory already holds the same content."""
        chash = content_hash(self.user_id, cand["text"])
        dup = self.db.execute("SELECT id FROM memories WHERE user_id = ? AND content_hash = ? AND "
                              "valid_to IS NULL", (self.user_id, chash)).fetchone()
        if dup is not None:
            return None
        mid = self._next_id("M", "memories")
        subject = cand["entities"][0]["name"] if cand.get("entities") else None
        self.db.execute(
            "INSERT INTO memories VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, ?, ?, ?, ?, ?, ?, ?, "
            "?)",
            (mid, self.user_id, cand["text"], cand["category"], cand["importance"],
             cand.get("event_date"), cand.get("date_precision"), valid_from,
             json.dumps(list(cand["source_ids"])), chash, kind, subject, cand.get("predicate"),
             cand.get("value"), call, at))
        for ent in cand.get("entities", []):
            self.db.execute("INSERT INTO entities (user_id, name, type, memory_id) VALUES "
                            "(?, ?, ?, ?)", (self.user_id, ent["name"], ent["type"], mid))
        for link in cand.get("links", []):
            self.db.execute("INSERT INTO links VALUES (?, ?, ?)", (mid, link["relation"],
                                                                  link["id"]))
        return mid

    def _supersede(self, old: str, new: str, when: str) -> None:
        row = self.db.execute("SELECT valid_to FROM memories WHERE id = ? AND user_id = ?",
                              (old, self.user_id)).fetchone()
        if row is None:
            raise StoreError(f"candidate supersedes {old}, which is not a memory of "
                             f"{self.user_id}")
        if row["valid_to"] is not None:
            return  # already history (two claims of one call superseding the same fact)
        self.db.execute("UPDATE memories SET valid_to = ?, superseded_by = ? WHERE id = ?",
                        (when, new, old))


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK and re-raise on any exception."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.db.execute("COMMIT" if exc_type is None else "ROLLBACK")
        return False
