"""One stage run: data → model → TRL SFTTrainer (answer-only loss) → adapter → receipt.

The loss is the mean cross-entropy over answer tokens (the labels that are not -100), normalised
over the whole accumulated batch (and across processes under `accelerate launch`). With
`answer_logits_only` the vocabulary projection runs only at the positions whose next token is an
answer token (`logits_to_keep` as a boolean mask): the same loss and gradients, less compute.
Interrupted runs resume from the last checkpoint in `<run>/checkpoints`; a run given a sitting
budget (`RunRequest.deadline`) stops with a checkpoint at the first optimizer step at or after it
and raises `sitting.SittingEnded` (memworker.train.sitting: training across sittings).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional
from transformers import TrainerCallback
from transformers.trainer_utils import get_last_checkpoint
from trl import SFTConfig, SFTTrainer

from memworker import packing, prompts, receipts, turns, wire
from memworker.corpus import load_rows
from memworker.hashing import write_json
from memworker.inference import turn_gate
from memworker.prompts import PromptError, restamp
from memworker.registry import PreparedBase
from memworker.train import data as tdata
from memworker.train import lineage, report
from memworker.train import model as tmodel
from memworker.train import sitting as tsitting
from memworker.train.config import StageConfig, left_out_tasks, parse_task_shares


class RunError(ValueError):
    """The run cannot start or continue as asked; the message says what to do."""


@dataclass
class RunPaths:
    run_dir: Path
    parent_dir: Path | None = None
    receipts_dir: Path | None = None

    @property
    def checkpoints(self) -> Path:
        return self.run_dir / "checkpoints"


@dataclass
class RunRequest:
    cfg: StageConfig
    paths: RunPaths
    args: dict[str, Any] = field(default_factory=dict)  # the command line, for the receipt
    fresh: bool = False
    parent_hint: str = ""  # the command that (re)builds the parent stage
    callbacks: list[TrainerCallback] = field(default_factory=list)  # tests: interrupt a run
    deadline: float | None = None  # time.time() at which this sitting's budget ends (None: none)
    budget_minutes: float | None = None  # the budget as given (--sitting-minutes), for the record


class AnswerOnlySFTTrainer(SFTTrainer):
    """TRL's `SFTTrainer`, fed our already-tokenised rows (input_ids + labels masked to the
    answer and its end-of-turn token; `skip_prepare_dataset`, so TRL neither re-templates nor
    re-tokenises), with three extensions TRL does not host:

    - the loss is computed here (`answer_loss`): vocabulary logits only at the positions whose
      target is an answer token. TRL's fused LM head scores only those positions on CUDA/XPU
      (Triton), but on CPU it projects every position through the 49,152-word head;
    - one-task batches whose common prompt opening runs once (`prefix_ids`, a KV cache the rows
      attend to), or rows packed into one sequence with a block-diagonal mask (`packed_segments`);
    - batches from a `batch_sampler` (one task each, bounded tokens).

    The loss is the mean cross-entropy over the answer tokens of the whole accumulated batch
    (and of every process under `accelerate launch`), as before the move to TRL."""

    loss_is_scaled_for_ga = True

    def __init__(self, *args: Any, answer_logits_only: bool = True,
                 batch_sampler: Any = None, step_tokens: float = 0.0, **kwargs: Any):
        os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")  # TRL pings the hub otherwise
        model = kwargs["model"] if "model" in kwargs else args[0]
        dtypes = {n: p.dtype for n, p in model.named_parameters() if p.requires_grad}
        super().__init__(*args, **kwargs)
        # TRL casts a quantised base's adapter weights to bf16 (QLoRA paper); keep ours as loaded
        # (fp32 on CPU, where bf16 matmuls are slow without native support: FACTS.md)
        for name, param in self.model.named_parameters():
            if name in dtypes and param.dtype != dtypes[name]:
                param.data = param.data.to(dtypes[name])
        self.answer_logits_only = answer_logits_only
        self.batch_sampler = batch_sampler
        self.step_tokens = step_tokens  # > 0: loss_scale "epoch" (see StageConfig.loss_scale)
        self.rows_seen = 0

    def get_train_dataloader(self):
        """Batches from `batch_sampler` (one task each, bounded tokens) when given."""
        if self.batch_sampler is None:
            return super().get_train_dataloader()
        from torch.utils.data import DataLoader

        loader = DataLoader(self.train_dataset, batch_sampler=self.batch_sampler,
                            collate_fn=self.data_collator, num_workers=0)
        return self.accelerator.prepare(loader)

    def create_model_card(self, *args: Any, **kwargs: Any) -> None:
        """No README.md in the checkpoints: the run's receipt is its card."""

    def _track_num_input_tokens(self, inputs):
        """Every token of every row: a packed batch has no 2-D attention mask to sum."""
        if "num_tokens" in inputs and self.args.include_num_input_tokens_seen != "no":
            count = torch.as_tensor(inputs["num_tokens"], device=self.args.device,
                                    dtype=torch.int64)
            self.state.num_input_tokens_seen += self.accelerator.gather(count).sum().item()
            return
        super()._track_num_input_tokens(inputs)

    shared_prefix_tokens = 0  # prompt tokens not recomputed thanks to shared prefixes (this process)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if model.training:
            self.rows_seen += int(inputs.get("num_rows", inputs["labels"].shape[0]))
        if "prefix_ids" in inputs:
            self.shared_prefix_tokens += inputs["prefix_ids"].shape[1] * (
                inputs["labels"].shape[0] - 1)
        if "shared_tokens" in inputs:
            self.shared_prefix_tokens += int(inputs["shared_tokens"])
        loss, outputs = answer_loss(model, inputs, self.answer_logits_only)
        self._record_metrics(model, outputs, inputs)
        if not model.training or num_items_in_batch is None:
            # validation (and any call without a count): the mean over this batch's answer
            # tokens. Validation batches hold one row, so eval_loss is the mean over rows of
            # each row's answer-token loss on any number of processes.
            loss = loss / inputs["labels"][:, 1:].ne(tdata.IGNORE).sum().clamp(min=1)
            if model.training:
                loss = loss / self.current_gradient_accumulation_steps
        elif self.step_tokens:  # every answer token weighs the same in every step
            loss = loss / self.step_tokens
        else:  # training: normalised over the whole accumulated (and multi-process) batch
            loss = loss / num_items_in_batch
            if self.args.average_tokens_across_devices and self.accelerator.num_processes > 1:
                loss = loss * self.accelerator.num_processes  # DDP averages gradients
        return (loss, outputs) if return_outputs else loss

    def _record_metrics(self, model, outputs, inputs) -> None:
        """TRL's `mean_token_accuracy` (this process): argmax = target over the answer tokens."""
        if not self.answer_logits_only:
            return
        targets = inputs["labels"][:, 1:]
        with torch.no_grad():
            hits = outputs.logits.argmax(-1).eq(targets[targets.ne(tdata.IGNORE)])
        mode = "train" if model.training else "eval"
        self._metrics[mode]["mean_token_accuracy"].append(hits.float().mean().item()
                                                          if hits.numel() else 0.0)


def answer_loss(model, inputs: dict[str, torch.Tensor], logits_only: bool):
    """(summed cross-entropy over answer tokens, model outputs). Position t predicts token t+1;
    `keep[b, t]` marks the positions whose target is an answer token. A batch with `prefix_ids`
    (see data.PadCollator) runs that shared prefix once, then the suffixes on its KV cache; a
    packed batch (`packed_segments`, see data.PackCollator) is one sequence whose rows attend
    only to themselves (and to the shared opening, segment 0). In training, a batch with
    `loss_weights` (decision weights) sums each token's cross-entropy times its weight; the
    normalisation stays the count of answer tokens."""
    labels = inputs["labels"]
    targets = labels[:, 1:]
    keep = torch.zeros_like(labels, dtype=torch.bool)
    keep[:, :-1] = targets.ne(tdata.IGNORE)
    kw = {"input_ids": inputs["input_ids"], "attention_mask": inputs.get("attention_mask")}
    if "prefix_ids" in inputs:
        kw.update(_prefix_cache(model, inputs["prefix_ids"], labels.shape))
    if "packed_segments" in inputs:
        kw.update(packed_mask(model, inputs["packed_segments"], inputs["position_ids"]))
    if logits_only:
        outputs = model(**kw, logits_to_keep=keep)
        logits = outputs.logits  # (answer positions, vocab)
    else:
        outputs = model(**kw)
        logits = outputs.logits[keep]
    answer_targets = targets[keep[:, :-1]]
    if "loss_weights" in inputs and model.training:  # decision weights (data.decision_weights)
        per_token = functional.cross_entropy(logits.float(), answer_targets, reduction="none")
        loss = (per_token * inputs["loss_weights"][:, 1:][keep[:, :-1]]).sum()
    else:
        loss = functional.cross_entropy(logits.float(), answer_targets, reduction="sum")
    return loss, outputs


#: transformers releases (major.minor) the shared-prefix KV path is tested with: it builds a
#: DynamicCache and expands its per-layer keys/values, which transformers may change between
#: releases. constraints.txt pins the exact version CI ran.
SHARE_PREFIX_TESTED_TRANSFORMERS = ("5.24",)


def check_share_prefix_support(cfg: StageConfig) -> None:
    """Refuse the shared-prefix KV path on a transformers release it is not tested with."""
    import transformers

    version = transformers.__version__
    if cfg.share_prefix and cfg.batch_size > 1 and \
            ".".join(version.split(".")[:2]) not in SHARE_PREFIX_TESTED_TRANSFORMERS:
        raise RunError(f"share_prefix (the shared-prompt KV-cache path) is tested with "
                       f"transformers {', '.join(SHARE_PREFIX_TESTED_TRANSFORMERS)}.x, this is "
                       f"{version}: install the pinned one (pip install -c constraints.txt "
                       "transformers) or train with --no-share-prefix")


def _prefix_cache(model, prefix_ids: torch.Tensor, shape: torch.Size) -> dict[str, Any]:
    """Run the shared prefix once (with gradients) and expand its KV cache to the batch: the
    suffix forward then sees exactly what it would in the full rows, and the gradients of all
    rows flow back through the one prefix computation."""
    from transformers import DynamicCache

    config = getattr(model, "module", model).config
    cache = DynamicCache(config=config)
    model(input_ids=prefix_ids, cache=cache, use_cache=True, logits_to_keep=1)
    batch, suffix = shape
    for layer in cache.layers:
        layer.keys = layer.keys.expand(batch, -1, -1, -1)
        layer.values = layer.values.expand(batch, -1, -1, -1)
    start = prefix_ids.shape[1]
    positions = torch.arange(start, start + suffix, device=prefix_ids.device)
    return {"cache": cache, "use_cache": True, "position_ids": positions.expand(batch, -1)}


def packed_mask(model, segments: torch.Tensor, positions: torch.Tensor) -> dict[str, Any]:
    """The 4-D attention mask of a packed sequence (1, T): token q sees token k <= q when both
    belong to the same row, or when k is in the shared opening (segment 0, present only with
    share_prefix). transformers uses a 4-D mask as given; position ids restart per row."""
    seg = segments[0]
    length = seg.shape[0]
    causal = torch.ones(length, length, dtype=torch.bool, device=seg.device).tril()
    allowed = causal & (seg[:, None].eq(seg[None, :]) | seg[None, :].eq(0))
    config = getattr(model, "module", model).config
    if getattr(config, "_attn_implementation", "sdpa") == "eager":  # eager adds a float mask
        dtype = next(model.parameters()).dtype
        dtype = dtype if dtype.is_floating_point else torch.float32
        mask = torch.zeros(length, length, dtype=dtype, device=seg.device)
        mask = mask.masked_fill(~allowed, torch.finfo(dtype).min)
    else:
        mask = allowed
    return {"attention_mask": mask[None, None], "position_ids": positions}


def _load_split(folder: Path, split: str, seed: int, limit: int = 0) -> list[dict]:
    rows = tdata.seeded_order(tdata.load_wire_rows(folder, split), seed, split)
    return rows[:limit] if limit else rows


def _forming(cfg: StageConfig) -> bool:
    """Whether rows are joined with their canonical inputs (`_form_rows`): another extraction
    form than the window's, or the events' timestamps written otherwise."""
    return cfg.extract_form != "window" or cfg.event_stamps != "full"


def _form_rows(folder: Path, split: str, rows: list[dict], form: str,
               excluded: list[str] | None = None, stamps: str = "full",
               ask_at: float | None = None, unasked: list[str] | None = None) -> list[dict]:
    """Extract rows in an extraction form (`memworker.turns`), joined with their canonical
    inputs; a window without user words (nothing to ask, empty gold) is left out. With
    `excluded`, a window whose gold claim has no turn to be asked in (it quotes, last, an event
    after every user event: the hand-written sets have a few) is left out and its id appended;
    without it, that is an error (the generated corpora have none). `stamps`: how the extract
    prompts write the events' timestamps (`memworker.prompts.restamp`, as the codec writes them).
    `ask_at` (turns form): each window as the worker with the committed turn gate at that
    threshold and `turn_gate_tail="omit"` asks it (`turns.training_messages(ask=)`); a window
    with no turn asked is left out and its id appended to `unasked`."""
    inputs = {r["id"]: r["input"] for r in load_rows(folder, split, form="canonical")}
    out = []
    for row in rows:
        if row["task"] == "extract" and row["id"] not in inputs:
            raise RunError(f"{folder}: {split} row {row['id']} has no canonical row")
        ask = (turn_gate.asks(inputs[row["id"]], ask_at)
               if ask_at is not None and row["task"] == "extract" else None)
        try:
            turned = turns.to_form_row(row, inputs.get(row["id"], {}), form, ask)
        except turns.NoTurnError as exc:
            if excluded is None:
                raise RunError(f"{folder}: {split}: {exc}") from None
            excluded.append(row["id"])
            continue
        except turns.TurnsError as exc:
            raise RunError(f"{folder}: {split}: {exc}") from None
        if turned is not None and stamps != "full" and turned["task"] == "extract":
            shown = (inputs[row["id"]] if ask is None
                     else turns.shown_asked(inputs[row["id"]], ask, form))
            try:
                turned = {**turned, "messages": restamp(turned["messages"], shown, stamps)}
            except PromptError as exc:
                raise RunError(f"{folder}: {split} row {row['id']}: {exc}") from None
        if turned is not None:
            out.append(turned)
        elif ask and unasked is not None:   # turns to ask, none asked (not: no turn at all)
            unasked.append(row["id"])
    return out


KEEP_KIND = "memworker-extract-keep"   # memworker.eval.studies.keep_facts.KIND


def _read_keep(cfg: StageConfig) -> tuple[dict[str, Any], str] | None:
    """`cfg.extract_keep`'s keep file, checked for its kind and shape, and the sha256 of the
    bytes it was parsed from; None without one."""
    if not cfg.extract_keep:
        return None
    path = Path(cfg.extract_keep)
    try:
        data = path.read_bytes()
        keep = json.loads(data.decode("utf-8"))
    except FileNotFoundError:
        raise RunError(f"stage {cfg.name}: extract_keep {path} does not exist; build it with "
                       "`python eval/studies/keep_facts.py`") from None
    except (OSError, ValueError) as exc:
        raise RunError(f"stage {cfg.name}: extract_keep {path} is not JSON ({exc})") from None
    if not (isinstance(keep, dict) and keep.get("kind") == KEEP_KIND
            and isinstance(keep.get("corpora"), dict)):
        raise RunError(f"stage {cfg.name}: extract_keep {path} is not a keep file (kind "
                       f"{KEEP_KIND!r} with corpora); build it with "
                       "`python eval/studies/keep_facts.py`")
    return keep, tdata.sha256_bytes(data)


def _kept_rows(cfg: StageConfig, folder: Path, manifest_sha256: str, rows: list[dict],
               keep: dict[str, Any], provenance: dict[str, Any]) -> list[dict]:
    """`rows` (a train split's wire rows) with each extract window the keep file lists for this
    corpus (by its manifest's sha256, `manifest_sha256`) answered with the listed gold facts only, in their order,
    and the extract windows it does not list left out; the other tasks' rows unchanged; a corpus
    the file does not name, unchanged. A listed id that is no train extract window of the corpus
    is refused (a keep file built from another split). The counts go to
    `provenance["keep"][str(folder)]`."""
    listed = keep["corpora"].get(manifest_sha256)
    if listed is None:   # a corpus the file does not name: every window, all its gold
        provenance.setdefault("keep", {})[str(folder)] = {"listed": False}
        return rows
    ids = {r["id"] for r in rows if r["task"] == "extract"}
    stray = sorted(set(listed) - ids)
    if stray:
        raise RunError(f"stage {cfg.name}: extract_keep {cfg.extract_keep} lists {len(stray)} "
                       f"window(s) that are no train extract row of {folder}, e.g. {stray[0]}")
    out, facts, dropped = [], 0, 0
    for r in rows:
        if r["task"] != "extract":
            out.append(r)
            continue
        if r["id"] not in listed:
            continue
        answer = json.loads(r["messages"][-1]["content"])
        chosen = listed[r["id"]]
        if (not isinstance(chosen, list)
                or not all(isinstance(i, int) and 0 <= i < len(answer["claims"])
                           for i in chosen)
                or len(set(chosen)) != len(chosen)):
            raise RunError(f"stage {cfg.name}: extract_keep {cfg.extract_keep}: window "
                           f"{r['id']} lists {chosen!r}, not distinct fact indices below "
                           f"{len(answer['claims'])}")
        keep_set = set(chosen)
        claims = [c for i, c in enumerate(answer["claims"]) if i in keep_set]
        facts += len(claims)
        dropped += len(answer["claims"]) - len(claims)
        content = wire.dump_answer("extract", {**answer, "claims": claims})
        out.append({**r, "messages": [*r["messages"][:-1],
                                      {**r["messages"][-1], "content": content}]})
    provenance.setdefault("keep", {})[str(folder)] = {
        "listed": True, "windows": len(listed), "windows_left_out": len(ids) - len(listed),
        "facts": facts, "facts_dropped": dropped}
    return out


def _merged_rows(folder: Path, cfg: StageConfig) -> list[dict]:
    """The train split's extract windows in `cfg.merged_days`' share, each day's user messages
    merged into one (`memworker.packing`), in the stage's form; windows that do not merge, and
    those a task share of 0 leaves out, give none."""
    if "extract" in left_out_tasks(cfg.task_shares):
        return []
    out = []
    for row in load_rows(folder, "train", form="canonical"):
        if row["task"] == "extract" and packing.chosen(row["id"], cfg.merged_days):
            merged = packing.training_row(row, cfg.extract_form)
            if merged is not None:
                out.append(merged)
    return out


def _read_back(folder: Path, split: str, rows: list[dict], left: dict[str, int]) -> list[dict]:
    """`rows` without the consolidate and reflect rows whose trained answer (the last message, a
    wire answer) the codec does not read back as the row's canonical gold
    (`wire.from_wire`, compared as `wire.comparable_answer`: an observation must state two or
    more of its facts, an answer the evidence it cites); each one left out is counted by task in
    `left`. The corpus audit requires this of every generated row (`wire_roundtrip`); the
    hand-written sets are built without it (`read_back=False`), so their text can read back as
    another answer: a hedge that states no fact, a terse reply the codec takes for an
    abstention."""
    canonical = {r["id"]: r for r in load_rows(folder, split, form="canonical")}
    out = []
    for row in rows:
        task = row["task"]
        if task in ("consolidate", "reflect"):
            gold = canonical.get(row["id"])
            if gold is None:
                raise RunError(f"{folder}: {split} row {row['id']} has no canonical row")
            try:
                back = wire.from_wire(task, json.loads(row["messages"][-1]["content"]),
                                      gold["input"])
                same = (wire.comparable_answer(task, back)
                        == wire.comparable_answer(task, gold["gold"]))
            except (ValueError, KeyError) as exc:
                raise RunError(f"{folder}: {split} row {row['id']}: its answer does not "
                               f"convert: {exc}") from None
            if not same:
                left[task] = left.get(task, 0) + 1
                continue
        out.append(row)
    return out


def _mix_rows(cfg: StageConfig, train: list[dict], val: list[dict], left_out: set[str],
              provenance: dict[str, Any], keep: dict[str, Any] | None = None
              ) -> tuple[list[dict], list[dict]]:
    """`cfg.mix_corpus`'s train rows as `cfg.mix_share` of all train rows (its seeded order
    cycled: pass k of a row is ordered by (seed, "mixed", id, k)), and its first `val_rows` val
    rows after the stage's own; the count and passes recorded in `provenance["mix"]`."""
    folder = Path(cfg.mix_corpus)
    manifest = tdata.verify_corpus(folder)
    manifest_sha256 = report.file_sha(folder / "manifest.json")
    excluded: list[str] = []
    unasked: list[str] = []
    pool = [r for r in _load_split(folder, "train", cfg.seed) if r["task"] not in left_out]
    if keep is not None:
        pool = _kept_rows(cfg, folder, manifest_sha256, pool, keep, provenance)
    extra = [r for r in _load_split(folder, "val", cfg.seed) if r["task"] not in left_out]
    left: dict[str, int] = {}
    if cfg.wire_contract:
        pool = _read_back(folder, "train", pool, left)
        extra = _read_back(folder, "val", extra, left)
    extra = extra[: cfg.val_rows] if cfg.val_rows else extra
    if _forming(cfg):
        pool = _form_rows(folder, "train", pool, cfg.extract_form, excluded, cfg.event_stamps,
                          cfg.turn_gate, unasked)
        extra = _form_rows(folder, "val", extra, cfg.extract_form, excluded, cfg.event_stamps,
                           cfg.turn_gate, unasked)
    if not pool:
        raise RunError(f"stage {cfg.name}: mix corpus {folder} has no train rows")
    share = Fraction(repr(cfg.mix_share))
    n = math.floor(len(train) * share / (1 - share))
    tagged = [(tdata.sha256_bytes(f"{cfg.seed}:main:{r['id']}".encode()), r) for r in train]
    tagged += [(tdata.sha256_bytes(f"{cfg.seed}:mixed:{pool[k % len(pool)]['id']}:"
                                   f"{k // len(pool)}".encode()), pool[k % len(pool)])
               for k in range(n)]
    provenance["mix"] = {
        "corpus": str(folder), "rows": n, "share": round(n / (n + len(train)), 4),
        "distinct_rows": min(n, len(pool)), "passes": round(n / len(pool), 3),
        "val_rows": len(extra), "form_excluded": excluded,
        **({"unasked": len(unasked)} if cfg.turn_gate is not None else {}),
        **({"wire_contract_left_out": dict(sorted(left.items()))} if cfg.wire_contract else {}),
        "manifest_sha256": manifest_sha256,
        "split_sha256": {s: tdata.split_sha256(manifest, s) for s in ("train", "val")},
    }
    return [r for _, r in sorted(tagged, key=lambda t: t[0])], val + extra


def prepare_data(cfg: StageConfig) -> dict[str, Any]:
    """Verified, seeded, optionally replay-mixed rows per split + their provenance."""
    corpus = Path(cfg.corpus)
    manifest = tdata.verify_corpus(corpus, cfg.corpus_domain)
    manifest_sha256 = report.file_sha(corpus / "manifest.json")
    if cfg.corpus_sha256 is not None and manifest_sha256 != cfg.corpus_sha256:
        raise RunError(f"stage {cfg.name} pins corpus manifest sha256 {cfg.corpus_sha256}, but "
                       f"{corpus}/manifest.json is {manifest_sha256}: point --corpus at the pinned "
                       "corpus, or change corpus_sha256 in the stage YAML (--corpus-sha256)")
    left_out = left_out_tasks(cfg.task_shares)  # a task with share 0: not trained, nor validated
    train = [r for r in _load_split(corpus, "train", cfg.seed) if r["task"] not in left_out]
    val = [r for r in _load_split(corpus, "val", cfg.seed) if r["task"] not in left_out]
    left: dict[str, int] = {}   # rows left out by wire_contract, by task
    if cfg.wire_contract:
        train = _read_back(corpus, "train", train, left)
        val = _read_back(corpus, "val", val, left)
    val = val[: cfg.val_rows] if cfg.val_rows else val
    read = _read_keep(cfg)
    keep = read[0] if read else None
    provenance: dict[str, Any] = {
        "corpus": str(corpus),
        "manifest_sha256": manifest_sha256,
        "split_sha256": {s: tdata.split_sha256(manifest, s) for s in ("train", "val")},
    }
    if cfg.wire_contract:
        provenance["wire_contract"] = {"left_out": dict(sorted(left.items()))}
    if read is not None:
        provenance["extract_keep"] = {"file": str(cfg.extract_keep), "sha256": read[1],
                                      "facts": keep.get("facts")}
        train = _kept_rows(cfg, corpus, manifest_sha256, train, keep, provenance)
    if _forming(cfg):
        unasked: list[str] = []
        train = _form_rows(corpus, "train", train, cfg.extract_form, stamps=cfg.event_stamps,
                           ask_at=cfg.turn_gate, unasked=unasked)
        val = _form_rows(corpus, "val", val, cfg.extract_form, stamps=cfg.event_stamps,
                         ask_at=cfg.turn_gate, unasked=unasked)
        if cfg.turn_gate is not None:
            provenance["turn_gate"] = {"threshold": cfg.turn_gate, "tail": "omit",
                                       "weights_sha256": report.file_sha(turn_gate.DEFAULT_WEIGHTS),
                                       "windows_unasked": len(unasked)}
    merged = _merged_rows(corpus, cfg) if cfg.merged_days else []
    if merged:
        train = tdata.seeded_order(train + merged, cfg.seed, "merged")
    if cfg.replay_fraction > 0:
        replay_dir = Path(cfg.replay_corpus)
        replay_manifest = tdata.verify_corpus(replay_dir, "coding")
        pool = [r for r in tdata.seeded_order(tdata.load_wire_rows(replay_dir, "train"),
                                               cfg.seed, "replay") if r["task"] not in left_out]
        if _forming(cfg):
            pool = _form_rows(replay_dir, "train", pool, cfg.extract_form,
                              stamps=cfg.event_stamps)
        n = min(len(pool), tdata.replay_count(len(train), cfg.replay_fraction))
        provenance["replay"] = {
            "corpus": str(replay_dir), "rows": n, "fraction": round(n / (n + len(train)), 4),
            "manifest_sha256": report.file_sha(replay_dir / "manifest.json"),
            "split_sha256": {"train": tdata.split_sha256(replay_manifest, "train")},
        }
        train = tdata.seeded_order(train + pool[:n], cfg.seed, "mix")
    if cfg.mix_share > 0:
        train, val = _mix_rows(cfg, train, val, left_out, provenance, keep)
    if cfg.extract_form != "window":
        provenance["extract_form"] = cfg.extract_form
    if cfg.event_stamps != "full":
        provenance["event_stamps"] = cfg.event_stamps
    if cfg.merged_days:
        provenance["merged_days"] = {"share": cfg.merged_days, "rows": len(merged)}
    if cfg.claim_layout != "v3":   # every extract row, the mixed and merged ones too
        train = [turns.layout_row(r, cfg.claim_layout) for r in train]
        val = [turns.layout_row(r, cfg.claim_layout) for r in val]
        provenance["claim_layout"] = cfg.claim_layout
    if left_out:
        provenance["left_out_tasks"] = sorted(left_out)
    if cfg.train_rows:
        train = train[: cfg.train_rows]
    if cfg.turn_history == "none":   # one row per turn, after every window was chosen
        windows = (len(train), len(val))
        try:
            train = [t for r in train for t in turns.read_once_rows(r)]
            val = [t for r in val for t in turns.read_once_rows(r)]
        except turns.TurnsError as exc:
            raise RunError(f"stage {cfg.name}: {exc}") from None
        provenance["turn_history"] = {"history": "none", "train_rows": [windows[0], len(train)],
                                      "val_rows": [windows[1], len(val)]}
    if not train or not val:
        raise RunError(f"stage {cfg.name}: no {'train' if not train else 'val'} rows in "
                       f"{corpus}; rebuild it with `{tdata.corpus_command(corpus, cfg.corpus_domain)}`")
    return {"train": train, "val": val, "provenance": provenance}


class SittingBudget(TrainerCallback):
    """Ends a sitting: at the end of the first optimizer step at or after `deadline` (before the
    last step), the Trainer saves a checkpoint and stops. Under `accelerate launch` every process
    stops at the same step (the latest clock decides)."""

    def __init__(self, deadline: float):
        self.deadline = deadline
        self.stopped_at: int | None = None

    def passed(self, args, state) -> bool:
        late = time.time() >= self.deadline
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            flag = torch.tensor([int(late)], device=args.device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            late = bool(flag.item())
        return late

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step < state.max_steps and self.passed(args, state):
            control.should_save = True
            control.should_training_stop = True
            self.stopped_at = state.global_step
        return control


class _SittingRecord(TrainerCallback):
    """Each checkpoint of this sitting is noted in `<run>/sittings.json` (main process)."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            tsitting.note_checkpoint(self.run_dir, state.global_step)


class _Clock(TrainerCallback):
    def on_train_begin(self, args, state, control, **kwargs):
        self.start_step, self.start_tokens, self.t0 = (state.global_step,
                                                       state.num_input_tokens_seen, time.time())


def training_args(cfg: StageConfig, device: tmodel.Device, out: Path) -> SFTConfig:
    """TRL's SFTConfig for our already-tokenised rows. Device and precision are explicit (TRL's
    defaults assume a GPU), and so is everything where SFTConfig's default differs from
    TrainingArguments' (activation checkpointing: model.load_model turns it on when asked)."""
    return SFTConfig(
        output_dir=str(out),
        per_device_train_batch_size=cfg.batch_size,
        per_device_eval_batch_size=1,
        gradient_accumulation_steps=cfg.grad_accum,
        learning_rate=cfg.learning_rate,
        num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps,
        lr_scheduler_type=cfg.lr_scheduler,
        warmup_steps=cfg.warmup if cfg.warmup < 1 else int(cfg.warmup),
        weight_decay=cfg.weight_decay,
        logging_steps=cfg.logging_steps,
        logging_first_step=True,
        eval_strategy="steps",
        eval_steps=cfg.eval_steps,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        seed=cfg.seed,
        data_seed=cfg.seed,
        bf16=device.bf16,
        fp16=False,
        use_cpu=device.kind == "cpu",
        activation_checkpointing=False,  # SFTConfig defaults to True; load_model decides
        report_to=[],
        remove_unused_columns=False,
        label_names=["labels"],
        prediction_loss_only=True,
        train_sampling_strategy="group_by_length" if cfg.group_by_length else "random",
        length_column_name="length",
        include_num_input_tokens_seen="non_padding",
        dataloader_num_workers=0,
        ddp_find_unused_parameters=False,
        disable_tqdm=False,
        # our rows are tokenised, masked and length-checked already (data.encode_rows)
        dataset_kwargs={"skip_prepare_dataset": True},
        max_length=None,
        packing=False,  # TRL's packing re-tokenises; ours is data.PackCollator (cfg.packing)
        padding_free=False,
        completion_only_loss=False,
        assistant_only_loss=False,
    )


def _is_main() -> bool:
    return os.environ.get("RANK", "0") == "0"


def _check_resume(req: RunRequest, identity: dict) -> tuple[str, str | None]:
    """("done", None) when this exact run already finished, ("resume", checkpoint or None)
    otherwise; refuses to mix two configs (or bases, or parents) in one run folder."""
    run_dir = req.paths.run_dir
    cfg_path, receipt_path = run_dir / "config.json", run_dir / receipts.RECEIPT
    if req.fresh and run_dir.exists() and _is_main():
        shutil.rmtree(run_dir)
    _barrier()
    if not cfg_path.is_file():
        return "resume", None
    previous = json.loads(cfg_path.read_text("utf-8"))
    differs = [k for k in identity if previous.get(k) != identity[k]]
    if differs:
        raise RunError(f"{run_dir} holds a run with another {', '.join(differs)}; pass --fresh "
                       "to replace it or --out to use another folder")
    if receipt_path.is_file():
        return "done", None
    ckpts = req.paths.checkpoints
    return "resume", get_last_checkpoint(str(ckpts)) if ckpts.is_dir() else None


def finish_distributed() -> None:
    """Close the process group before exit: a rank that leaves with gloo still running can
    abort in C++ ("terminate called without an active exception", SIGABRT) and fail the
    launch even though training finished."""
    _barrier()
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _barrier() -> None:
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from accelerate import PartialState

        PartialState().wait_for_everyone()


def check_parent(req: RunRequest, base: PreparedBase) -> tuple[dict[str, Any] | None, str | None]:
    """(parent receipt, its sha256) of a warm-started stage after the lineage checks; (None,
    None) for a fresh one."""
    if not req.cfg.parent:
        return None, None
    return lineage.check_parent(req.paths.parent_dir, req.cfg.parent, base, req.parent_hint)


def receipt_core(req: RunRequest, base: PreparedBase, parent: tuple[dict | None, str | None],
                 rows: dict[str, Any], train_stats: tdata.SplitStats,
                 val_stats: tdata.SplitStats) -> dict[str, Any]:
    """The receipt entries every backend writes: the stage, its config, base, lineage, data,
    prompts, the trained adapter's files and the environment."""
    cfg, paths = req.cfg, req.paths
    parent_receipt, parent_sha = parent
    return {
        "stage": cfg.name,
        "description": cfg.description,
        "args": req.args,
        "config": cfg.to_dict(),
        "config_sha256": cfg.sha256(),
        "base": {**base.identity, "path": str(base.path)},
        "parent": None if not cfg.parent else {
            "stage": cfg.parent, "run_dir": str(paths.parent_dir),
            "receipt_sha256": parent_sha, "adapter_sha256": parent_receipt["adapter"]["sha256"],
        },
        "data": {**rows["provenance"], "train": train_stats.to_dict(), "val": val_stats.to_dict(),
                 "max_length": cfg.max_length},
        "prompts_sha256": prompts.template_hashes(),
        "adapter": lineage.adapter_record(paths.run_dir),
        "environment": receipts.environment(),
    }


def run_stage(req: RunRequest, base: PreparedBase) -> dict[str, Any]:
    """Train one stage; returns its receipt (also written to disk by the main process)."""
    cfg, paths = req.cfg, req.paths
    parent = check_parent(req, base)
    identity = {"stage": cfg.name, "config_sha256": cfg.sha256(),
                "base_weights_sha256": base.sha256, "parent_receipt_sha256": parent[1]}
    state_, resume_from = _check_resume(req, identity)
    if state_ == "done":
        print(f"train: stage {cfg.name} is already trained with this config in {paths.run_dir} "
              "(pass --fresh to retrain)")
        return json.loads((paths.run_dir / receipts.RECEIPT).read_text("utf-8"))

    mem_scope = report.reset_peak_memory()  # this stage's peak, not an earlier stage's
    device = tmodel.pick_device(cfg)
    rows = prepare_data(cfg)
    tokenizer = tmodel.load_tokenizer(base.path)
    (train_enc, train_stats), (val_enc, val_stats) = _encode_splits(cfg, base, tokenizer, rows,
                                                                    device)
    paths.run_dir.mkdir(parents=True, exist_ok=True)
    if _is_main():  # the resolved config goes to disk before training starts
        doc = {**identity, "config": cfg.to_dict(), "base": base.identity, "args": req.args,
               "device": device.to_dict(), "environment": receipts.environment(),
               "parent_run_dir": str(paths.parent_dir) if cfg.parent else None}
        write_json(paths.run_dir / "config.json", doc)
        tsitting.begin_sitting(paths.run_dir, tsitting.step_of(resume_from) if resume_from else 0,
                               resume_from, req.budget_minutes)

    check_share_prefix_support(cfg)
    parent_adapter = paths.parent_dir / receipts.ADAPTER_DIR if cfg.parent else None
    model = tmodel.load_model(base, cfg, device, parent_adapter)
    clock = _Clock()
    budget = SittingBudget(req.deadline) if req.deadline is not None else None
    trainer = _make_trainer(req, device, model, tokenizer, train_enc, val_enc,
                            [clock, _SittingRecord(paths.run_dir)] + ([budget] if budget else []))
    if resume_from:
        print(f"train: resuming {cfg.name} from {resume_from}")
    result = trainer.train(resume_from_checkpoint=resume_from)
    runtime = time.time() - clock.t0
    state = trainer.state
    if budget is not None and budget.stopped_at is not None and state.global_step < state.max_steps:
        _end_sitting_unfinished(req, trainer, clock, runtime, result.metrics.get("train_loss"))
    last: dict[str, Any] = {}
    if not any("eval_loss" in h and h.get("step") == state.global_step for h in state.log_history):
        last = trainer.evaluate()  # the Trainer did not validate at the final step itself
    val_loss = next((h["eval_loss"] for h in reversed(state.log_history) if "eval_loss" in h),
                    last.get("eval_loss"))
    if not trainer.is_world_process_zero():
        _barrier()  # until rank 0 has written the adapter and receipt (a child stage reads them)
        return {}

    adapter_dir = paths.run_dir / receipts.ADAPTER_DIR
    shutil.rmtree(adapter_dir, ignore_errors=True)
    trainer.model.save_pretrained(adapter_dir)
    state_path = paths.run_dir / "trainer_state.json"
    state.save_to_json(str(state_path))
    sittings = tsitting.end_sitting(paths.run_dir, "finished",
                                    **_sitting_fields(trainer, clock, runtime, val_loss),
                                    mean_train_loss=result.metrics.get("train_loss"))
    receipt = {
        **receipt_core(req, base, parent, rows, train_stats, val_stats),
        "device": device.to_dict(),
        "engine": f"{type(trainer).__name__} (trl.SFTTrainer)",
        "params": tmodel.count_params(trainer.model),
        "result": _session_result(trainer, clock, device, runtime, resume_from,
                                  result.metrics.get("train_loss"), val_loss),
        "memory_peak": report.peak_memory(scope=mem_scope),
        "trainer_state_sha256": report.file_sha(state_path),
        "sittings": sittings,  # every sitting that trained this stage (memworker.train.sitting)
    }
    report.loss_curve(state.log_history, paths.run_dir / "loss.png",
                      f"{cfg.name} on {base.model.key}")
    receipts.write_receipt(receipt, paths.run_dir, paths.receipts_dir, cfg.name)
    _barrier()
    return receipt


def _sitting_fields(trainer: AnswerOnlySFTTrainer, clock: _Clock, runtime: float,
                    val_loss: float | None) -> dict[str, Any]:
    """What sittings.json records of this sitting when it ends."""
    state = trainer.state
    return {"to_step": state.global_step, "max_steps": state.max_steps,
            "runtime_s": round(runtime, 2),
            "tokens": state.num_input_tokens_seen - clock.start_tokens, "val_loss": val_loss}


def _end_sitting_unfinished(req: RunRequest, trainer: AnswerOnlySFTTrainer, clock: _Clock,
                            runtime: float, mean_train_loss: float | None) -> None:
    """The sitting's budget stopped the stage before its last step: record the sitting (its
    checkpoint is written), write no receipt and no adapter, and raise SittingEnded."""
    state, run_dir = trainer.state, req.paths.run_dir
    evals = [h["eval_loss"] for h in state.log_history
             if "eval_loss" in h and h.get("step", 0) > clock.start_step]
    record: dict[str, Any] = {}
    if trainer.is_world_process_zero():
        fields = _sitting_fields(trainer, clock, runtime, evals[-1] if evals else None)
        record = tsitting.end_sitting(
            run_dir, "budget", **fields, mean_train_loss=mean_train_loss,
            checkpoint=f"checkpoint-{state.global_step}")[-1]
    _barrier()
    raise tsitting.SittingEnded(req.cfg.name, run_dir, record)


def _encode_splits(cfg: StageConfig, base: PreparedBase, tokenizer, rows: dict[str, Any],
                   device: tmodel.Device) -> tuple[tuple[list, Any], tuple[list, Any]]:
    """((train encodings, stats), (val encodings, stats)); rows over max_length are excluded
    and counted, and a split left empty stops the run."""
    eot = base.model.end_of_turn
    train_enc, train_stats = tdata.encode_rows(tokenizer, rows["train"], cfg.max_length, eot,
                                               cfg.decision_weight)
    val_enc, val_stats = tdata.encode_rows(tokenizer, rows["val"], cfg.max_length, eot)
    if train_enc:
        shares = {t: v for t, v in parse_task_shares(cfg.task_shares).items() if v > 0}
        train_stats.tasks = tdata.task_shares(train_enc, shares)
        print("train: task shares of the loss " + ", ".join(
            f"{t} {v['share']:.3f} (natural {v['natural_share']:.3f})"
            for t, v in train_stats.tasks.items()))
    if not train_enc or not val_enc:
        raise RunError(f"stage {cfg.name}: every {'train' if not train_enc else 'val'} row is "
                       f"longer than max_length={cfg.max_length}; raise --max-length")
    print(f"train: {cfg.name}: {train_stats.rows} train rows ({dict(train_stats.excluded) or 'none'}"
          f" excluded), {val_stats.rows} val rows, device {device.kind} x{device.threads} threads, "
          f"{'bf16' if device.bf16 else 'fp32'}, {'NF4 QLoRA' if cfg.qlora else 'LoRA'}")
    return (train_enc, train_stats), (val_enc, val_stats)


def make_collator(cfg: StageConfig, pad_id: int):
    """PadCollator (padded rows, shared opening on a KV cache with share_prefix) or, with
    packing, PackCollator (one unpadded sequence per batch)."""
    share = cfg.share_prefix and cfg.batch_size > 1
    if cfg.packing and cfg.batch_size > 1:
        return tdata.PackCollator(share_prefix=share)
    return tdata.PadCollator(pad_id, share_prefix=share)


def make_batch_sampler(cfg: StageConfig, train_enc: list) -> tdata.TaskBatchSampler | None:
    """One-task batches (similar lengths, bounded tokens) when rows are shared or packed."""
    if cfg.batch_size < 2 or not (cfg.share_prefix or cfg.packing):
        return None
    return tdata.TaskBatchSampler([tdata.batch_group(e) for e in train_enc],
                                  [len(e.input_ids) for e in train_enc], cfg.batch_size,
                                  cfg.seed, cfg.max_batch_tokens, packed=cfg.packing)


def _make_trainer(req: RunRequest, device: tmodel.Device, model, tokenizer, train_enc: list,
                  val_enc: list, ours: list[TrainerCallback]) -> AnswerOnlySFTTrainer:
    """The TRL trainer, with one-task batches sharing their prompt opening when share_prefix
    (packed into one sequence when packing)."""
    cfg = req.cfg
    sampler = make_batch_sampler(cfg, train_enc)
    return AnswerOnlySFTTrainer(
        model=model,
        args=training_args(cfg, device, req.paths.checkpoints),
        train_dataset=tdata.to_dataset(train_enc),
        eval_dataset=tdata.to_dataset(val_enc),
        data_collator=make_collator(cfg, tokenizer.pad_token_id),
        processing_class=tokenizer,
        callbacks=[*ours, *req.callbacks],
        answer_logits_only=cfg.answer_logits_only,
        batch_sampler=sampler,
        step_tokens=step_tokens(cfg, train_enc, sampler),
    )


def step_tokens(cfg: StageConfig, train_enc: list, sampler: Any) -> float:
    """loss_scale "epoch": the mean answer tokens of one optimizer step over an epoch's batch
    plan (per process), the constant each step's summed loss is divided by; 0.0 for "batch"."""
    if cfg.loss_scale != "epoch":
        return 0.0
    batches = len(sampler) if sampler is not None else -(-len(train_enc) // cfg.batch_size)
    return sum(e.n_answer for e in train_enc) * cfg.grad_accum / max(batches, 1)


def _session_result(trainer: AnswerOnlySFTTrainer, clock: _Clock, device: tmodel.Device,
                    runtime: float, resume_from: str | None, mean_train_loss: float | None,
                    val_loss: float | None) -> dict[str, Any]:
    """The receipt's `result`: steps, speed and losses of this session."""
    state = trainer.state
    steps = state.global_step - clock.start_step
    tokens = state.num_input_tokens_seen - clock.start_tokens
    losses = [h["loss"] for h in state.log_history if "loss" in h]
    return {
        "global_step": state.global_step,
        "steps_this_session": steps,
        "resumed_from": resume_from and Path(resume_from).name,
        "runtime_s": round(runtime, 2),
        "s_per_step": round(runtime / steps, 3) if steps else None,
        "rows_this_session_main_process": trainer.rows_seen,
        "samples_per_s": round(trainer.rows_seen * device.world_size / runtime, 3),
        "tokens_this_session": tokens,
        "shared_prefix_tokens_main_process": trainer.shared_prefix_tokens,
        "tokens_per_s": round(tokens / runtime, 1) if runtime else None,
        "final_train_loss": losses[-1] if losses else None,
        "mean_train_loss": mean_train_loss,
        "val_loss": val_loss,
        "epoch": state.epoch,
    }
