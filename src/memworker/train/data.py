"""Training data: hash-verified corpus rows → answer-only token rows → padded batches.

Answer-only loss: a row's prompt is `apply_chat_template(messages[:-1],
add_generation_prompt=True)` and its full text `apply_chat_template(messages)`. The prompt must
be a token prefix of the full text (checked, never assumed); the labels are -100 over that
prefix and equal the input ids from the first answer token up to and including the base's
end-of-turn token (`<|im_end|>`). Whatever the template appends after it (a newline) is dropped.
Rows longer than `max_length` are excluded and counted, never truncated.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from memworker.hashing import sha256_bytes

IGNORE = -100
SPLITS = ("train", "val", "test")


class DataError(ValueError):
    """The corpus or a row cannot be used; the message says what to do."""


# --- corpus access ------------------------------------------------------------------------------

def corpus_build_args(folder: str | Path, domain: str, seed: int = 13) -> list[str]:
    """Arguments of the corpus stage that build the corpus `folder` of `domain`."""
    from memworker.corpus.build import build_args

    return build_args(folder, seed=seed, domain=domain)


def corpus_command(folder: str | Path, domain: str, seed: int = 13) -> str:
    from memworker.corpus.build import build_command

    return build_command(folder, seed=seed, domain=domain)


def verify_corpus(folder: str | Path, domain: str = "general") -> dict[str, Any]:
    """The corpus manifest after `memworker.corpus.verify_corpus` checked every listed file's
    sha256 (raises DataError saying how to rebuild)."""
    from memworker.corpus import verify_corpus as corpus_verify

    folder = Path(folder)
    if not (folder / "manifest.json").is_file():
        raise DataError(f"no corpus in {folder} (manifest.json missing); build it with "
                        f"`{corpus_command(folder, domain)}`")
    try:
        return corpus_verify(folder)
    except ValueError as exc:  # CorpusIntegrityError is a ValueError
        raise DataError(f"corpus {folder} does not verify: {exc}") from None


def load_wire_rows(folder: str | Path, split: str) -> list[dict[str, Any]]:
    from memworker.corpus import load_rows

    return list(load_rows(folder, split, form="wire"))


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

    @property
    def n_answer(self) -> int:
        return sum(1 for x in self.labels if x != IGNORE)

    @property
    def prompt_len(self) -> int:
        return first_label(self.labels)


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
    """Input ids and answer-only labels of one chat whose last message is the answer.
    Raises TooLong (row excluded) or DataError (the template cannot be masked safely)."""
    if not messages or messages[-1].get("role") != "assistant":
        raise DataError("a training row must end with the assistant's answer")
    if messages[0].get("role") != "system":
        raise DataError("a training row must start with our system prompt (the base's chat "
                        "template would inject its own)")
    prompt = _ids(tokenizer, messages[:-1], add_generation_prompt=True)
    full = _ids(tokenizer, messages)
    if full[: len(prompt)] != prompt:
        raise DataError("the chat template is not prefix-stable: the tokenized prompt is not a "
                        "prefix of the tokenized chat, so the answer cannot be masked exactly")
    eot = tokenizer.convert_tokens_to_ids(end_of_turn)
    try:
        end = full.index(eot, len(prompt))
    except ValueError:
        raise DataError(f"no end-of-turn token {end_of_turn!r} after the answer") from None
    ids = full[: end + 1]
    if len(ids) > max_length:
        raise TooLong(len(ids))
    return Encoded(ids, [IGNORE] * len(prompt) + ids[len(prompt):])


@dataclass
class SplitStats:
    rows: int = 0
    excluded: Counter = field(default_factory=Counter)
    tokens: int = 0
    answer_tokens: int = 0
    max_tokens: int = 0
    longest_excluded: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "excluded": dict(sorted(self.excluded.items())),
            "tokens_total": self.tokens,
            "tokens_answer": self.answer_tokens,
            "tokens_mean": round(self.tokens / self.rows, 1) if self.rows else 0.0,
            "tokens_max": self.max_tokens,
            "longest_excluded": self.longest_excluded,
        }


def encode_rows(tokenizer, rows: list[dict[str, Any]], max_length: int,
                end_of_turn: str) -> tuple[list[Encoded], SplitStats]:
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

    return Dataset.from_dict({
        "input_ids": [e.input_ids for e in encoded],
        "labels": [e.labels for e in encoded],
        "length": [len(e.input_ids) for e in encoded],
        "group": [e.group for e in encoded],
    })


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
        ids, labs, mask = [], [], []
        for seq, lab in zip(seqs, labels, strict=True):
            pad = longest - (len(seq) - prefix)
            ids.append(seq[prefix:] + [self.pad_id] * pad)
            labs.append(lab[prefix:] + [IGNORE] * pad)
            mask.append([1] * len(seq) + [0] * pad)
        batch = {"input_ids": torch.tensor(ids), "labels": torch.tensor(labs),
                 "attention_mask": torch.tensor(mask)}
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
        ids, labs = seqs[0][:prefix], [IGNORE] * prefix
        positions, segments = list(range(prefix)), [0] * prefix
        for row, (seq, lab) in enumerate(zip(seqs, labels, strict=True), start=1):
            if lab[prefix] != IGNORE:
                raise DataError("a packed row must open with prompt tokens (its first token "
                                "would otherwise be a loss target of the row before it)")
            ids += seq[prefix:]
            labs += lab[prefix:]
            positions += range(prefix, len(seq))
            segments += [row] * (len(seq) - prefix)
        return {"input_ids": torch.tensor([ids]), "labels": torch.tensor([labs]),
                "position_ids": torch.tensor([positions]),
                "packed_segments": torch.tensor([segments]),
                "num_tokens": torch.tensor(sum(len(s) for s in seqs)),
                "shared_tokens": torch.tensor(prefix * (len(seqs) - 1)),
                "num_rows": torch.tensor(len(seqs))}


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
        for name in sorted(set(self.groups)):
            members = [i for i, g in enumerate(self.groups) if g == name]
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
