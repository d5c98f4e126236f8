"""Training data: hash-verified corpus rows → answer-only token rows → padded batches.

Answer-only loss: a row's prompt is `apply_chat_template(messages[:-1],
add_generation_prompt=True)` and its full text `apply_chat_template(messages)`. The prompt must
be a token prefix of the full text (checked, never assumed); the labels are -100 over that
prefix and equal the input ids from the first answer token up to and including the base's
end-of-turn token (`<|im_end|>`). Whatever the template appends after it (a newline) is dropped.
Rows longer than `max_length` are excluded and counted, never truncated.

Decision weights (`decision_weight` ≠ 1, train split only): the answer token where each value of
a decision field starts (`DECISION_FIELDS`: which span is quoted, whose subject, which predicate,
value and kind, whether it corrects, whether a list opens or stays empty) counts
`decision_weight` times in the training loss; every other answer token counts once. An extract
answer is ~570 tokens of which ~6.5 % decide whether a claim is supported (train/README.md
"Decisions, not tokens"); the mean loss hardly sees them. Validation loss stays the plain mean,
comparable across runs.
"""

from __future__ import annotations

import bisect
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from memworker import turns, wire
from memworker.corpus import load_rows
from memworker.corpus import verify_corpus as corpus_verify
from memworker.corpus.build import build_args, build_command
from memworker.hashing import sha256_bytes

IGNORE = -100
SPLITS = ("train", "val", "test")


class DataError(ValueError):
    """The corpus or a row cannot be used; the message says what to do."""


# --- corpus access ------------------------------------------------------------------------------

def corpus_build_args(folder: str | Path, domain: str, seed: int = 13) -> list[str]:
    """Arguments of the corpus stage that build the corpus `folder` of `domain`."""
    return build_args(folder, seed=seed, domain=domain)


def corpus_command(folder: str | Path, domain: str, seed: int = 13) -> str:
    return build_command(folder, seed=seed, domain=domain)


def verify_corpus(folder: str | Path, domain: str = "general") -> dict[str, Any]:
    """The corpus manifest after `memworker.corpus.verify_corpus` checked every listed file's
    sha256 (raises DataError saying how to rebuild)."""
    folder = Path(folder)
    if not (folder / "manifest.json").is_file():
        raise DataError(f"no corpus in {folder} (manifest.json missing); build it with "
                        f"`{corpus_command(folder, domain)}`")
    try:
        return corpus_verify(folder)
    except ValueError as exc:  # CorpusIntegrityError is a ValueError
        raise DataError(f"corpus {folder} does not verify: {exc}") from None


def load_wire_rows(folder: str | Path, split: str) -> list[dict[str, Any]]:
    """A split's wire rows; refuses rows whose answer is not in the wire form this code writes
    (a corpus built by an older memworker: training on it would teach an order or shape the
    grammar now refuses, and its decision weights would silently drop)."""
    rows = list(load_rows(folder, split, form="wire"))
    for row in rows:
        answer = row["messages"][-1]["content"]
        try:
            current = wire.dump_answer(row["task"], json.loads(answer))
        except (ValueError, KeyError, TypeError) as exc:
            current = f"not a wire answer ({exc})"
        if current != answer:
            raise DataError(f"{folder}: {split} row {row.get('id', '?')} is not in the current "
                            f"wire form (a corpus built by an older memworker?); rebuild it: "
                            f"`python corpus/build.py --out {folder} --seed 13` (add --domain "
                            "coding for a coding corpus)")
    return rows


def split_sha256(manifest: dict[str, Any], split: str) -> str | None:
    """sha256 of a split's wire file as the manifest records it."""
    return (manifest.get("files") or {}).get(f"wire/{split}.jsonl")


def seeded_order(rows: list[dict[str, Any]], seed: int, salt: str = "") -> list[dict[str, Any]]:
    """Rows in an order fixed by (seed, salt, row id): stable across machines and row order."""
    return sorted(rows, key=lambda r: sha256_bytes(f"{seed}:{salt}:{r['id']}".encode()))


def replay_count(n_main: int, fraction: float) -> int:
    """Replay rows so that they are at most `fraction` of all rows (main + replay): the largest
    r with r / (n_main + r) <= fraction, in exact arithmetic on the fraction as written (float
    division lost a row, e.g. 20 instead of 21 for 119 rows at 0.15)."""
    if fraction <= 0:
        return 0
    share = Fraction(repr(fraction))
    return math.floor(n_main * share / (1 - share))


# --- answer-only encoding ----------------------------------------------------------------------

@dataclass
class Encoded:
    input_ids: list[int]
    labels: list[int]
    source: int = -1  # index of the row it came from
    group: str = ""  # the row's task: rows of one task share their prompt's opening tokens
    weights: list[float] | None = None  # per-token loss weight (decision weights), or None
    #: [start, end) of each assistant turn's tokens when the chat has several (None: one answer,
    #: from prompt_len to the end)
    spans: list[tuple[int, int]] | None = None
    #: the window a read-once turn row belongs to (`memworker.turns.read_once_rows`; "" for
    #: other rows): the rows of one window are batched together, so their shared opening is the
    #: whole window and runs once
    window: str = ""

    @property
    def n_answer(self) -> int:
        return sum(1 for x in self.labels if x != IGNORE)

    @property
    def prompt_len(self) -> int:
        return first_label(self.labels)


def batch_group(enc: Encoded) -> str:
    """What `TaskBatchSampler` batches together: rows of one task, and a read-once turn row
    only with the other turns of its window."""
    return f"{enc.group}@{enc.window}" if enc.window else enc.group


def first_label(labels) -> int:
    return next(i for i, x in enumerate(labels) if x != IGNORE)


class TooLong(Exception):
    def __init__(self, length: int):
        self.length = length


def _ids(tokenizer, messages, **kw) -> list[int]:
    out = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False, **kw)
    return list(out)


def encode_chat(tokenizer, messages: list[dict[str, str]], max_length: int,
                end_of_turn: str) -> Encoded:
    """Input ids and answer-only labels of one chat whose last message is the answer. A chat
    with several assistant turns (the turns form of extraction, `memworker.turns`) is labelled
    on every assistant turn, each up to and including its end-of-turn token (`Encoded.spans`).
    Raises TooLong (row excluded) or DataError (the template cannot be masked safely)."""
    if not messages or messages[-1].get("role") != "assistant":
        raise DataError("a training row must end with the assistant's answer")
    if messages[0].get("role") != "system":
        raise DataError("a training row must start with our system prompt (the base's chat "
                        "template would inject its own)")
    eot = tokenizer.convert_tokens_to_ids(end_of_turn)
    full = _ids(tokenizer, messages)
    spans: list[tuple[int, int]] = []
    for n, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        prompt = _ids(tokenizer, messages[:n], add_generation_prompt=True)
        if full[: len(prompt)] != prompt:
            raise DataError("the chat template is not prefix-stable: the tokenized prompt is not "
                            "a prefix of the tokenized chat, so the answer cannot be masked "
                            "exactly")
        try:
            end = full.index(eot, len(prompt))
        except ValueError:
            raise DataError(f"no end-of-turn token {end_of_turn!r} after the answer") from None
        spans.append((len(prompt), end + 1))
    ids = full[: spans[-1][1]]
    if len(ids) > max_length:
        raise TooLong(len(ids))
    labels = [IGNORE] * len(ids)
    for start, end in spans:
        labels[start:end] = ids[start:end]
    return Encoded(ids, labels, spans=spans if len(spans) > 1 else None)


# --- decision tokens ----------------------------------------------------------------------------

#: fields whose first value token is a decision; a list-valued one also marks the token after
#: its "[" (the fork: a first item or an empty list). `kind` and `supersedes` are graded (a plan,
#: belief or retraction must say so; corrections): weighting only the others made an overfit
#: adapter lose them (train/README.md "Decision weights"). Wire v3 has no `correction` to weigh:
#: the codec derives it from `supersedes`. Wire v4 has no ids in consolidate and reflect (the
#: codec reads supports, citations and abstention from the text): what is left to weigh there is
#: the fork, an observation or none ("observations": its "[" and the token after it) and the first
#: token of the answer, where it answers or abstains ("answer"); the facts and evidence the text
#: states are spread over its words, which keep weight 1.
DECISION_FIELDS = ("claims", "quote", "name", "predicate", "value", "kind", "supersedes",
                   "observations", "answer")


def answer_offsets(tokenizer, answer_ids: list[int]) -> list[int]:
    """The character offset (in the decoded answer) where each token starts. Linear when the
    tokens decode one by one to the whole (ASCII text); otherwise by prefixes (exact)."""
    pieces = [tokenizer.decode([t], skip_special_tokens=True) for t in answer_ids]
    if "".join(pieces) == tokenizer.decode(answer_ids, skip_special_tokens=True):
        out, at = [], 0
        for piece in pieces:
            out.append(at)
            at += len(piece)
        return out
    return [len(tokenizer.decode(answer_ids[:k], skip_special_tokens=True))
            for k in range(len(answer_ids))]


def value_starts(answer: str, offsets: list[int],
                 fields: tuple[str, ...] | None = None) -> dict[int, str]:
    """{token index: field} of the token holding the first character of each field's value (after
    a string's opening quote; `memworker.wire.field_starts`): the token where the model commits
    to the value. With `fields`, only those, and for a list-valued field also the token after its
    "[" (first item or "]")."""
    starts = (turns.walk_field_starts(answer) if answer.startswith('{"events":')
              else wire.field_starts(answer))
    out = {}
    for c, name, is_list in starts:
        if fields is not None and name not in fields:
            continue
        marks = [c, c + 1] if fields is not None and is_list else [c]
        for ch in marks:
            if ch < len(answer):
                out[bisect.bisect_right(offsets, ch) - 1] = name
    return out


def decision_weights(tokenizer, enc: Encoded, answer: str | list[str],
                     weight: float) -> list[float] | None:
    """Per-token loss weights of one encoded row (see the module docstring), or None when the
    answer tokens do not decode to the answer text or the answer is not a wire answer as
    `memworker.wire.dump_answer` writes it (then the row keeps plain weights). A row of several
    assistant turns gives each turn's text (`answer` a list, one per `enc.spans`)."""
    spans = enc.spans or [(enc.prompt_len, len(enc.input_ids))]
    answers = answer if isinstance(answer, list) else [answer]
    if len(answers) != len(spans):
        return None
    weights = [0.0] * len(enc.input_ids)
    for (start, end), text in zip(spans, answers, strict=True):
        answer_ids = enc.input_ids[start:end]
        if not tokenizer.decode(answer_ids, skip_special_tokens=True).startswith(text):
            return None
        try:
            starts = value_starts(text, answer_offsets(tokenizer, answer_ids), DECISION_FIELDS)
        except ValueError:
            return None
        weights[start:end] = [1.0] * (end - start)
        for k in starts:
            weights[start + k] = weight
    return weights


@dataclass
class SplitStats:
    rows: int = 0
    excluded: Counter = field(default_factory=Counter)
    tokens: int = 0
    answer_tokens: int = 0
    max_tokens: int = 0
    longest_excluded: int = 0
    decision_tokens: int = 0  # tokens weighted as decisions (decision_weight ≠ 1)
    unweighted_rows: int = 0  # rows whose answer could not be aligned (plain weights)
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)  # see task_shares()

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "excluded": dict(sorted(self.excluded.items())),
            "tokens_total": self.tokens,
            "tokens_answer": self.answer_tokens,
            "tokens_mean": round(self.tokens / self.rows, 1) if self.rows else 0.0,
            "tokens_max": self.max_tokens,
            "longest_excluded": self.longest_excluded,
            **({"decision_tokens": self.decision_tokens, "unweighted_rows": self.unweighted_rows}
               if self.decision_tokens or self.unweighted_rows else {}),
            **({"tasks": self.tasks} if self.tasks else {}),
        }


def answer_weight(enc: Encoded) -> float:
    """The summed loss weight of a row's answer tokens (each counts 1 without weights)."""
    if enc.weights is None:
        return float(enc.n_answer)
    return float(sum(w for w, y in zip(enc.weights, enc.labels, strict=True) if y != IGNORE))


def task_shares(encoded: list[Encoded], shares: dict[str, float]) -> dict[str, dict[str, Any]]:
    """Make each task's share of the training loss explicit: per task (the rows' `group`), its
    rows, answer tokens, summed answer-token weight and natural share of all weight; with
    `shares` ({task: share}, summing to 1), every answer-token weight of task t is multiplied
    by share_t / natural_t, so the tasks' weights sum to those shares and the total weight (so
    the loss scale) is unchanged. Under loss_scale "epoch" a step's loss is its summed weighted
    cross-entropy over a constant, so these are the tasks' shares of the epoch's gradient
    signal. Raises DataError when `shares` does not name exactly the tasks of the rows."""
    weight: Counter = Counter()
    rows: Counter = Counter()
    tokens: Counter = Counter()
    for enc in encoded:
        weight[enc.group] += answer_weight(enc)
        rows[enc.group] += 1
        tokens[enc.group] += enc.n_answer
    total = sum(weight.values())
    if shares and set(shares) != set(weight):
        raise DataError(f"task_shares names {sorted(shares)} but the train rows hold the tasks "
                        f"{sorted(weight)}: name each of them once")
    multiplier = {t: (shares[t] * total / weight[t] if shares else 1.0) for t in weight}
    if shares:
        for enc in encoded:
            m = multiplier[enc.group]
            base = enc.weights if enc.weights is not None else [
                0.0 if y == IGNORE else 1.0 for y in enc.labels]
            enc.weights = [w * m for w in base]
    return {t: {"rows": rows[t], "answer_tokens": tokens[t],
                "answer_weight": round(weight[t], 1),
                "natural_share": round(weight[t] / total, 4) if total else 0.0,
                "share": round(shares.get(t, weight[t] / total if total else 0.0), 4),
                "multiplier": round(multiplier[t], 4)} for t in sorted(weight)}


def encode_rows(tokenizer, rows: list[dict[str, Any]], max_length: int,
                end_of_turn: str, decision_weight: float = 1.0
                ) -> tuple[list[Encoded], SplitStats]:
    encoded, stats = [], SplitStats()
    for index, row in enumerate(rows):
        try:
            enc = encode_chat(tokenizer, row["messages"], max_length, end_of_turn)
        except TooLong as exc:
            stats.excluded["too_long"] += 1
            stats.longest_excluded = max(stats.longest_excluded, exc.length)
            continue
        except DataError as exc:
            raise DataError(f"row {row.get('id', '?')}: {exc}") from None
        enc.source, enc.group = index, str(row.get("task", ""))
        enc.window = str(row.get("window", ""))
        if decision_weight != 1.0:
            answers = [m["content"] for m in row["messages"] if m["role"] == "assistant"]
            enc.weights = decision_weights(tokenizer, enc, answers if len(answers) > 1
                                           else answers[0], decision_weight)
            if enc.weights is None:
                stats.unweighted_rows += 1
                enc.weights = [0.0 if y == IGNORE else 1.0 for y in enc.labels]
            else:
                stats.decision_tokens += sum(w == decision_weight for w in enc.weights)
        encoded.append(enc)
        stats.rows += 1
        stats.tokens += len(enc.input_ids)
        stats.answer_tokens += enc.n_answer
        stats.max_tokens = max(stats.max_tokens, len(enc.input_ids))
    return encoded, stats


def to_dataset(encoded: list[Encoded]):
    """A `datasets.Dataset` with input_ids, labels, length (for length-grouped batching) and
    group (the task, for shared-prefix batching)."""
    from datasets import Dataset

    columns = {
        "input_ids": [e.input_ids for e in encoded],
        "labels": [e.labels for e in encoded],
        "length": [len(e.input_ids) for e in encoded],
        "group": [e.group for e in encoded],
    }
    if any(e.weights is not None for e in encoded):
        columns["weights"] = [e.weights for e in encoded]
    return Dataset.from_dict(columns)


def common_prefix(seqs: list[list[int]]) -> int:
    first = seqs[0]
    n = min(len(s) for s in seqs)
    for i in range(n):
        if any(s[i] != first[i] for s in seqs):
            return i
    return n


@dataclass
class PadCollator:
    """Right-pads a batch to its longest row; pad labels are -100, the attention mask 0.

    With `share_prefix`, a batch of several rows whose prompts open with the same tokens (rows of
    one task: system prompt + task instructions) is split into `prefix_ids` (1, P), run once, and
    per-row suffixes (`input_ids`, `labels`). P stops at least one token before the first answer
    token of every row, so every loss target lies in the suffixes. `attention_mask` then spans
    prefix + suffix (B, P + S), and its sum still counts every token of every row."""

    pad_id: int
    multiple_of: int = 1
    share_prefix: bool = False
    min_prefix: int = 16

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        seqs = [list(f["input_ids"]) for f in features]
        labels = [list(f["labels"]) for f in features]
        prefix = shared_opening(seqs, labels, self.min_prefix) if self.share_prefix else 0
        longest = max(len(s) for s in seqs) - prefix
        longest = -(-longest // self.multiple_of) * self.multiple_of
        weights = [list(f["weights"]) for f in features] if "weights" in features[0] else None
        ids, labs, mask, ws = [], [], [], []
        for row, (seq, lab) in enumerate(zip(seqs, labels, strict=True)):
            pad = longest - (len(seq) - prefix)
            ids.append(seq[prefix:] + [self.pad_id] * pad)
            labs.append(lab[prefix:] + [IGNORE] * pad)
            mask.append([1] * len(seq) + [0] * pad)
            if weights is not None:
                ws.append(weights[row][prefix:] + [0.0] * pad)
        batch = {"input_ids": torch.tensor(ids), "labels": torch.tensor(labs),
                 "attention_mask": torch.tensor(mask)}
        if weights is not None:
            batch["loss_weights"] = torch.tensor(ws, dtype=torch.float32)
        if prefix:
            batch["prefix_ids"] = torch.tensor([seqs[0][:prefix]])
        return batch


def shared_opening(seqs: list[list[int]], labels: list[list[int]], min_prefix: int) -> int:
    """Tokens all rows of a batch open with, stopping at least one token before the first answer
    token of every row (so every loss target stays in the rows' own parts); 0 when shorter than
    `min_prefix` or for a single row."""
    if len(seqs) < 2:
        return 0
    prefix = min(common_prefix(seqs), min(first_label(x) for x in labels) - 1)
    return prefix if prefix >= min_prefix else 0


@dataclass
class PackCollator:
    """Packs a batch's rows into ONE sequence (1, T) with no padding: `packed_segments` gives
    each token its row (1, 2, ...) and `position_ids` restart at every row, so that
    loop.packed_mask lets a token attend only to earlier tokens of its own row, exactly what it
    sees when the row runs alone. With `share_prefix`, the rows' common opening (see
    `shared_opening`) appears once, as segment 0, which every row attends to; each row's own
    tokens then continue at position P. A single row comes back as PadCollator would return it.
    `num_tokens` counts every token of every row (the shared opening once per row),
    `shared_tokens` the opening tokens not recomputed, `num_rows` the rows."""

    share_prefix: bool = False
    min_prefix: int = 16
    pad_id: int = 0  # only for a batch of one row (nothing to pad)

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        if len(features) == 1:
            return PadCollator(self.pad_id)(features)
        seqs = [list(f["input_ids"]) for f in features]
        labels = [list(f["labels"]) for f in features]
        prefix = shared_opening(seqs, labels, self.min_prefix) if self.share_prefix else 0
        weighted = "weights" in features[0]
        ids, labs, ws = seqs[0][:prefix], [IGNORE] * prefix, [0.0] * prefix
        positions, segments = list(range(prefix)), [0] * prefix
        for row, (seq, lab) in enumerate(zip(seqs, labels, strict=True), start=1):
            if lab[prefix] != IGNORE:
                raise DataError("a packed row must open with prompt tokens (its first token "
                                "would otherwise be a loss target of the row before it)")
            ids += seq[prefix:]
            labs += lab[prefix:]
            if weighted:
                ws += list(features[row - 1]["weights"])[prefix:]
            positions += range(prefix, len(seq))
            segments += [row] * (len(seq) - prefix)
        batch = {"input_ids": torch.tensor([ids]), "labels": torch.tensor([labs]),
                 "position_ids": torch.tensor([positions]),
                 "packed_segments": torch.tensor([segments]),
                 "num_tokens": torch.tensor(sum(len(s) for s in seqs)),
                 "shared_tokens": torch.tensor(prefix * (len(seqs) - 1)),
                 "num_rows": torch.tensor(len(seqs))}
        if weighted:
            batch["loss_weights"] = torch.tensor([ws], dtype=torch.float32)
        return batch


class TaskBatchSampler:
    """Batches (lists of row indices) in which every batch holds rows of one group (task) and of
    similar length, so that PadCollator(share_prefix=True) can run their common opening once.
    A batch has at most `batch_size` rows and, when `max_tokens` > 0, at most `max_tokens`
    padded tokens (rows x longest row; with `packed`, the sum of the rows' lengths; a longer row
    forms a batch alone): memory per step then stays bounded whatever the row lengths. Batch order is shuffled. Everything is
    deterministic in (seed, epoch), so a resumed run replays the same batches."""

    def __init__(self, groups: list[str], lengths: list[int], batch_size: int, seed: int,
                 max_tokens: int = 0, packed: bool = False):
        self.groups, self.lengths, self.packed = groups, lengths, packed
        self.batch_size, self.max_tokens, self.seed = batch_size, max_tokens, seed
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self._batches = self._plan()

    def __len__(self) -> int:
        return len(self._batches)

    def __iter__(self):
        return iter([list(b) for b in self._batches])

    def _fits(self, batch: list[int], row: int) -> bool:
        if len(batch) >= self.batch_size:
            return False
        if self.packed:
            size = sum(self.lengths[i] for i in [*batch, row])
        else:
            size = max(self.lengths[i] for i in [*batch, row]) * (len(batch) + 1)
        return not self.max_tokens or size <= self.max_tokens

    def _plan(self) -> list[list[int]]:
        import torch

        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        batches = []
        members_of: dict[str, list[int]] = {}
        for i, g in enumerate(self.groups):   # one pass: read-once rows make a group a window
            members_of.setdefault(g, []).append(i)
        for name in sorted(members_of):
            members = members_of[name]
            order = [members[j] for j in torch.randperm(len(members), generator=gen).tolist()]
            mega = self.batch_size * 16  # sort by length within chunks, keep some randomness
            for start in range(0, len(order), mega):
                batch: list[int] = []
                for row in sorted(order[start:start + mega], key=lambda i: -self.lengths[i]):
                    if batch and not self._fits(batch, row):
                        batches.append(batch)
                        batch = []
                    batch.append(row)
                if batch:
                    batches.append(batch)
        return [batches[j] for j in torch.randperm(len(batches), generator=gen).tolist()]
