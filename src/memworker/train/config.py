"""Stage configs: one dataclass, one YAML file per stage, named profiles, then flags.

Resolution order (later wins): dataclass defaults → `train/stages/<stage>.yaml` → the YAML's
`profiles.<name>` block (`--profile`) → command-line flags. Unknown keys anywhere are errors,
and every field carries help text, which is also the `--help` of `train/run.py`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from memworker.contracts import TASKS
from memworker.hashing import sha256_json
from memworker.prompts import EVENT_STAMPS
from memworker.turns import FORMS, HISTORIES, TURN_FORMS
from memworker.wire import LAYOUTS

STAGE_ORDER = ("coding", "general-a", "general")
#: where a stage's parent adapter comes from (`StageConfig.parent_from`)
PARENT_FROM = ("stage", "release")
PRECISIONS = ("auto", "bf16", "fp32")
# Flags kept when a missing parent stage is run first on the child's behalf (stage-specific
# settings such as the corpus, the output folder or the learning rate are not carried over).
INHERITED_FLAGS = ("base", "qlora", "lora_layers", "max_length", "max_steps", "epochs", "precision",
                   "threads", "train_rows", "val_rows")


class ConfigError(ValueError):
    """A stage file, profile or flag is invalid; the message says which and why."""


def _f(default: Any, help: str, **kw: Any) -> Any:
    return field(default=default, metadata={"help": help, **kw})


@dataclass
class StageConfig:
    name: str = _f("", "stage name (the YAML file's stem)")
    description: str = _f("", "what this stage is for, one line")
    parent: str | None = _f(None, "stage whose adapter this one warm-starts from (null: fresh)")
    parent_from: str = _f("stage", "where the parent's adapter comes from: stage (its run in "
                          "<runs-dir>/<parent>, trained first when missing) | release (the "
                          "committed release's student run, receipts/release-receipt.json's "
                          "student.run_dir, which must be of the parent stage: nothing before "
                          "this stage is trained here; train/README \"The main job\")")
    corpus: str = _f("data/corpus", "corpus folder (manifest.json + wire/{train,val}.jsonl)")
    corpus_domain: str = _f("general", "domain passed to the corpus builder when the corpus is "
                            "missing: general | coding")
    corpus_sha256: str | None = _f(None, "expected sha256 of the corpus's manifest.json (null: "
                                   "any corpus that verifies); a run refuses another corpus")
    replay_corpus: str | None = _f(None, "corpus whose train rows are replayed (null: none)")
    replay_fraction: float = _f(0.0, "share of the stage's train rows taken from replay_corpus "
                                "(0 ≤ f ≤ 0.2)")
    mix_corpus: str | None = _f(None, "a second corpus mixed into the stage's train rows, e.g. "
                                "the hand-written natural-train (data/natural-train); its val "
                                "rows join the validation rows (null: none)")
    mix_share: float = _f(0.0, "share of all train rows taken from mix_corpus (0 ≤ s < 1), "
                          "its seeded train order cycled as often as needed (train/README "
                          "\"Natural-train in the mix\")")
    base: str = _f("smollm2-135m", "base model: a memworker.registry key or a local HF folder")
    qlora: bool = _f(True, "NF4 4-bit base with double quantisation (QLoRA); false: plain LoRA "
                     "on a 16/32-bit base")
    lora_r: int = _f(16, "LoRA rank (r)")
    lora_alpha: int = _f(32, "LoRA alpha (scale = alpha / r)")
    lora_dropout: float = _f(0.05, "dropout on the LoRA branch")
    target_modules: str = _f("all-linear", "modules that get LoRA adapters (peft syntax)")
    lora_layers: str = _f("all", "decoder layers that get LoRA adapters: all | upper:N (only the "
                          "top N layers; the backward pass then stops at the lowest adapted "
                          "layer, so a step costs less; a warm start must name its parent's layers)")
    max_length: int = _f(4096, "longest row in tokens; longer rows are excluded and counted, "
                         "never truncated")
    epochs: float = _f(1.0, "passes over the train rows (ignored when max_steps > 0)")
    max_steps: int = _f(-1, "optimizer steps to run (-1: use epochs)")
    learning_rate: float = _f(2e-4, "peak learning rate", flag="--lr")
    lr_scheduler: str = _f("cosine", "transformers scheduler name")
    warmup: float = _f(0.03, "warm-up: a ratio of all steps if < 1, else a number of steps")
    weight_decay: float = _f(0.0, "AdamW weight decay")
    decision_weight: float = _f(1.0, "training-loss weight of the answer token where each "
                                "decision field's value starts (quoted span, subject, predicate, "
                                "value, kind, correction, a list's first item or its end; see "
                                "memworker/train/data.py); "
                                "1: the plain mean over answer tokens")
    loss_scale: str = _f("batch", "what a training step's summed answer-token loss is divided "
                         "by: batch (its own answer tokens: a token of a short batch weighs more "
                         "than one of a long batch) | epoch (the mean answer tokens per step "
                         "over the epoch's batch plan: every answer token weighs the same in "
                         "every step; train/README.md \"The fork is set by batch lengths\")")
    task_shares: str = _f("", "each task's share of the training loss, e.g. "
                          "extract=0.5,consolidate=0.25,reflect=0.25 (every task of the train "
                          "rows named once, shares >= 0, normalised to sum 1; a share of 0 leaves the "
                          "task's rows out of the stage, train and val): a task's answer-token "
                          "weights are scaled so that they sum to that share of all answer-token "
                          "weights, the total unchanged; exact per step with loss_scale epoch "
                          "(empty: the tasks' natural shares; either way the receipt's "
                          "data.train.tasks records them; train/README \"Task shares\")")
    extract_form: str = _f("window", "the form of the extract rows (memworker.turns): window "
                           "(one answer per window) | turns (the window once, then one short "
                           "answer per event that holds user words, each turn's answer in the "
                           "loss) | walk (one answer walking those events in order, the event "
                           "indices fixed by the grammar) | sentences (the turns form with one "
                           "turn per sentence of those events); evaluate with eval/run.py "
                           "--extract-form (train/README \"E17\", \"E18\", \"Sentences\")")
    turn_history: str = _f("answers", "turns forms: what each turn's prompt holds before its "
                           "question, every earlier turn and answer (answers: one row per "
                           "window) or nothing, the window read once (none: one row per turn, "
                           "the turns of one window batched together so that the window's "
                           "tokens run once; memworker.turns \"Read once\"); evaluate with "
                           "eval/run.py --turn-history")
    event_stamps: str = _f("full", "how extract prompts write the events' timestamps: full (as "
                           "the event has them) or minute (to the minute, no seconds, no UTC "
                           "offset: ~12 prompt tokens an event less; memworker.prompts.restamp, "
                           "the codec writes them so too); evaluate with eval/run.py "
                           "--event-stamps")
    claim_layout: str = _f("v3", "turns forms: how an extract claim is written: v3 (the quotes "
                           "first, every field) or v6 (no quotes, the codec quotes the turn's "
                           "sentence; predicate and value first, the trailing defaults left out: "
                           "memworker.wire.V6_FIELDS, the prompt's claim lines as "
                           "memworker.prompts.relayout writes them); evaluate with eval/run.py "
                           "--claim-layout")
    merged_days: float = _f(0.0, "share of the train split's extract windows (0-1, chosen by "
                            "their id's sha256) that are also trained with each day's user "
                            "messages merged into one (memworker.packing.merge_row: the same "
                            "facts in fewer, longer messages, labels carried over), in the "
                            "window, turns or sentences form; val unchanged (train/README \"Longer "
                            "messages\")")
    turn_gate: float | None = _f(None, "turns form: train each extract window as the worker "
                                 "with the committed turn gate at this P(fact) threshold and "
                                 "turn_gate_tail omit asks it: the window up to the last asked "
                                 "turn's event, the asked turns alone with their gold answers, a "
                                 "window with no turn asked left out (null: every turn; "
                                 "train/README \"Only the asked turns\"); evaluate with "
                                 "eval/run.py --turn-gate S=T --turn-gate-tail omit")
    wire_contract: bool = _f(False, "leave out the consolidate and reflect rows (of the corpus "
                             "and mix_corpus, train and val) whose trained wire answer the codec "
                             "does not read back as their canonical gold (memworker.wire.from_wire: "
                             "an observation that does not state two of its facts, an answer that "
                             "does not state its evidence; the hand-written sets are built without "
                             "that check); counted in the receipt's data.wire_contract (false: "
                             "every row; train/README \"Only answers the codec reads back\")")
    extract_keep: str | None = _f(None, "a keep file (eval/studies/keep_facts.py: each "
                                  "train-split window's gold facts a student's recorded claims "
                                  "cover): the train extract windows of the corpus and "
                                  "mix_corpus it lists train on those facts only, the ones it "
                                  "does not list are left out; a corpus it does not name and val "
                                  "unchanged (null: every window, all its gold; train/README "
                                  "\"Only what it gets right\")")
    batch_size: int = _f(1, "rows per device per micro-batch (the most rows, with max_batch_tokens)")
    max_batch_tokens: int = _f(0, "with share_prefix or packing: at most this many padded tokens "
                               "per batch (rows x longest row; packed: the sum of the rows' "
                               "lengths); bounds memory, which grows ~3.3 MB per "
                               "token for the 135M base in fp32 (0: no bound)")
    grad_accum: int = _f(8, "micro-batches per optimizer step")
    eval_steps: int = _f(100, "validate every N steps (and at the end)")
    save_steps: int = _f(50, "checkpoint every N steps (resume point)")
    logging_steps: int = _f(5, "log the training loss every N steps")
    save_total_limit: int = _f(2, "checkpoints kept")
    train_rows: int = _f(0, "use only the first N train rows in a seeded order (0: all)")
    val_rows: int = _f(0, "validate on the first N val rows in a seeded order (0: all)")
    seed: int = _f(13, "seed for sampling, dropout, LoRA init and row order")
    precision: str = _f("auto", "compute precision: auto (bf16 where the device supports it) | "
                        "bf16 | fp32")
    group_by_length: bool = _f(True, "batch rows of similar length (less padding)")
    answer_logits_only: bool = _f(True, "compute vocabulary logits only where the loss is taken "
                                  "(answer tokens); same loss, less compute")
    share_prefix: bool = _f(True, "batch rows of one task together and run their common prompt "
                            "opening once per batch (same loss; the prefix's LoRA-dropout masks "
                            "are shared by the batch); needs batch_size > 1")
    packing: bool = _f(False, "pack a batch's rows (one task) into one sequence with a "
                       "block-diagonal attention mask instead of padding them: no padding "
                       "tokens in the compute, position ids restart per row; with share_prefix "
                       "the common opening appears once and every row attends to it; "
                       "max_batch_tokens then bounds the packed length; needs batch_size > 1")
    gradient_checkpointing: bool = _f(False, "recompute activations in backward (less memory; "
                                      "not with share_prefix)")
    threads: int = _f(0, "CPU threads for torch (0: the cores this process may use)")
    out: str = _f("", "run folder (default: <runs-dir>/<name>)", flag="--out")

    def validate(self) -> StageConfig:
        problems = []
        if self.parent is not None and self.parent not in STAGE_ORDER \
                and experiment_path(self.parent) is None:
            problems.append(f"parent {self.parent!r} is not a stage ({', '.join(STAGE_ORDER)}) "
                            "nor an experiment stage of train/experiments")
        if self.parent == self.name:
            problems.append("a stage cannot be its own parent")
        if self.parent_from not in PARENT_FROM:
            problems.append(f"parent_from must be one of {', '.join(PARENT_FROM)}, not "
                            f"{self.parent_from!r}")
        elif self.parent_from == "release" and self.parent is None:
            problems.append("parent_from release needs a stage with a parent")
        if self.corpus_domain not in ("general", "coding"):
            problems.append(f"corpus_domain must be general or coding, not {self.corpus_domain!r}")
        if not 0.0 <= self.replay_fraction <= 0.2:
            problems.append(f"replay_fraction must be in [0, 0.2], not {self.replay_fraction}")
        if self.replay_fraction > 0 and not self.replay_corpus:
            problems.append("replay_fraction > 0 needs replay_corpus")
        if not 0.0 <= self.mix_share < 1.0:
            problems.append(f"mix_share must be in [0, 1), not {self.mix_share}")
        if self.mix_share > 0 and not self.mix_corpus:
            problems.append("mix_share > 0 needs mix_corpus")
        if self.corpus_sha256 is not None and not re.fullmatch(r"[0-9a-f]{64}",
                                                               self.corpus_sha256):
            problems.append(f"corpus_sha256 must be 64 lowercase hex digits, not "
                            f"{self.corpus_sha256!r}")
        if self.precision not in PRECISIONS:
            problems.append(f"precision must be one of {PRECISIONS}, not {self.precision!r}")
        for name in ("lora_r", "lora_alpha", "max_length", "batch_size", "grad_accum",
                     "eval_steps", "save_steps", "logging_steps", "save_total_limit"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be ≥ 1, not {getattr(self, name)}")
        for name in ("train_rows", "val_rows", "threads", "max_batch_tokens"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be ≥ 0, not {getattr(self, name)}")
        if not 0.0 <= self.lora_dropout < 1.0:
            problems.append(f"lora_dropout must be in [0, 1), not {self.lora_dropout}")
        if self.max_steps == 0 or self.max_steps < -1:
            problems.append(f"max_steps must be ≥ 1 or -1, not {self.max_steps}")
        if self.max_steps == -1 and self.epochs <= 0:
            problems.append(f"epochs must be > 0, not {self.epochs}")
        if self.share_prefix and self.gradient_checkpointing and not self.packing:
            problems.append("share_prefix needs the KV cache, which gradient_checkpointing "
                            "turns off: set one of them to false (or use packing)")
        if not re.fullmatch(r"all|upper:[1-9][0-9]*", self.lora_layers):
            problems.append(f"lora_layers must be all or upper:N (N ≥ 1), not "
                            f"{self.lora_layers!r}")
        if self.loss_scale not in ("batch", "epoch"):
            problems.append(f"loss_scale must be batch or epoch, not {self.loss_scale!r}")
        try:
            parse_task_shares(self.task_shares)
        except ConfigError as exc:
            problems.append(str(exc))
        if self.extract_form not in FORMS:
            problems.append(f"extract_form must be one of {', '.join(FORMS)}, not "
                            f"{self.extract_form!r}")
        if self.turn_history not in HISTORIES:
            problems.append(f"turn_history must be one of {', '.join(HISTORIES)}, not "
                            f"{self.turn_history!r}")
        elif self.turn_history != "answers" and self.extract_form not in TURN_FORMS:
            problems.append("turn_history none needs the turns or sentences form")
        elif self.turn_history != "answers" and self.merged_days:
            problems.append("turn_history none and merged_days together are not built")
        if self.event_stamps not in EVENT_STAMPS:
            problems.append(f"event_stamps must be one of {', '.join(EVENT_STAMPS)}, not "
                            f"{self.event_stamps!r}")
        elif self.event_stamps != "full" and self.merged_days:
            problems.append("event_stamps minute and merged_days together are not built")
        if not 0.0 <= self.merged_days <= 1.0:
            problems.append(f"merged_days must be between 0 and 1, not {self.merged_days}")
        elif self.merged_days and self.extract_form == "walk":
            problems.append("merged_days needs the window, turns or sentences form, not walk")
        if self.turn_gate is not None:
            if isinstance(self.turn_gate, bool) or not isinstance(self.turn_gate, int | float) \
                    or not 0.0 <= self.turn_gate <= 1.0:
                problems.append(f"turn_gate must be a probability, not {self.turn_gate!r}")
            elif self.extract_form != "turns" or self.turn_history != "answers" \
                    or self.merged_days:
                problems.append("turn_gate needs extract_form turns, turn_history answers and "
                                "no merged_days")
        if self.extract_keep and self.merged_days:
            problems.append("extract_keep and merged_days together are not built")
        if self.claim_layout not in LAYOUTS:
            problems.append(f"claim_layout must be one of {', '.join(LAYOUTS)}, not "
                            f"{self.claim_layout!r}")
        elif self.claim_layout != "v3" and self.extract_form not in TURN_FORMS:
            problems.append(f"claim_layout {self.claim_layout} needs a turns form "
                            f"({', '.join(TURN_FORMS)}): its claims are quoted from the turn's "
                            "event")
        if self.decision_weight <= 0:
            problems.append(f"decision_weight must be > 0, not {self.decision_weight}")
        if self.learning_rate <= 0:
            problems.append(f"learning_rate must be > 0, not {self.learning_rate}")
        if problems:
            raise ConfigError(f"stage {self.name or '?'}: " + "; ".join(problems))
        return self

    def to_dict(self) -> dict[str, Any]:
        """The config as receipts record it; a field added after runs were recorded is left out
        at its default (`LATER_DEFAULTS`), so an earlier run's config and its sha256 (a
        sitting's resume identity) stay what they were."""
        doc = dataclasses.asdict(self)
        for key, default in LATER_DEFAULTS.items():
            if doc.get(key) == default:
                doc.pop(key)
        return doc

    def sha256(self) -> str:
        return sha256_json(self.to_dict())


#: fields added after runs were recorded, at the default that reproduces those runs
LATER_DEFAULTS: dict[str, Any] = {"event_stamps": "full", "parent_from": "stage",
                                  "claim_layout": "v3", "extract_keep": None,
                                  "turn_gate": None, "wire_contract": False}
FIELDS = {f.name: f for f in dataclasses.fields(StageConfig)}


def parse_task_shares(text: str) -> dict[str, float]:
    """`extract=2,consolidate=1,reflect=1` → {task: share}, normalised to sum 1 ({} for "").
    A share of 0 leaves the task's rows out of the stage (`left_out_tasks`). Raises ConfigError
    for an unknown or repeated task, a share that is not a number >= 0, every share 0, or a
    malformed item. Which tasks the train rows hold is checked when they are encoded."""
    if not text.strip():
        return {}
    shares: dict[str, float] = {}
    for item in text.split(","):
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ConfigError(f"task_shares: {item.strip()!r} is not task=share "
                              "(e.g. extract=0.5,consolidate=0.25,reflect=0.25)")
        if name not in TASKS:
            raise ConfigError(f"task_shares: unknown task {name!r}; tasks: {', '.join(TASKS)}")
        if name in shares:
            raise ConfigError(f"task_shares: {name} is given twice")
        try:
            share = float(value)
        except ValueError:
            share = float("nan")
        if not share >= 0 or share == float("inf"):
            raise ConfigError(f"task_shares: {name}'s share must be a number >= 0, not "
                              f"{value.strip()!r}")
        shares[name] = share
    total = sum(shares.values())
    if not total > 0:
        raise ConfigError("task_shares: every share is 0; at least one task must be trained")
    return {name: share / total for name, share in shares.items()}


def left_out_tasks(text: str) -> set[str]:
    """The tasks whose share is 0: their rows are left out of the stage (train and val)."""
    return {name for name, share in parse_task_shares(text).items() if share == 0}


def flag_name(field_name: str) -> str:
    """The command-line flag of a config field (`max_steps` → `--max-steps`, or its own)."""
    return FIELDS[field_name].metadata.get("flag", "--" + field_name.replace("_", "-"))


def stages_dir() -> Path:
    """`$MEMWORKER_STAGES`, else the repository's `train/stages` next to the source tree."""
    env = os.environ.get("MEMWORKER_STAGES")
    folder = Path(env) if env else Path(__file__).resolve().parents[3] / "train" / "stages"
    if not folder.is_dir():
        raise ConfigError(f"stage configs not found in {folder}; set MEMWORKER_STAGES or run "
                          "from a source checkout")
    return folder


def _check_keys(mapping: dict, where: str, forbidden: tuple[str, ...] = ()) -> None:
    if not isinstance(mapping, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(mapping).__name__}")
    unknown = sorted(set(mapping) - set(FIELDS))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(FIELDS)}")
    bad = sorted(set(mapping) & set(forbidden))
    if bad:
        raise ConfigError(f"{where}: {bad} cannot be set here")


def _coerce(name: str, value: Any, where: str) -> Any:
    """YAML scalars → the field's type (ints are accepted for floats, never the reverse)."""
    kind = FIELDS[name].type
    if value is None:
        if "None" in kind:
            return None
        raise ConfigError(f"{where}: {name} cannot be null")
    if kind.startswith("bool"):
        ok = isinstance(value, bool)
    elif kind.startswith("int"):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind.startswith("float"):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    else:
        ok = isinstance(value, str)
    if not ok:
        raise ConfigError(f"{where}: {name} must be {kind}, got {value!r}")
    return value


class _UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses a key given twice in one mapping (PyYAML keeps the last)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise ConfigError(f"key {key!r} appears twice (line {key_node.start_mark.line + 1})")
            seen.add(key)
        return super().construct_mapping(node, deep)


def read_stage_file(path: str | Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(values, profiles) of one stage YAML; validates keys and types, not cross-field rules."""
    path = Path(path)
    try:
        doc = yaml.load(path.read_text("utf-8"), Loader=_UniqueKeyLoader) or {}
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    profiles = doc.pop("profiles", {}) or {}
    _check_keys(doc, str(path))
    values = {k: _coerce(k, v, str(path)) for k, v in doc.items()}
    if not isinstance(profiles, dict):
        raise ConfigError(f"{path}: profiles must map a profile name to overrides")
    checked = {}
    for pname, block in profiles.items():
        where = f"{path}: profile {pname!r}"
        _check_keys(block or {}, where, forbidden=("name", "parent"))
        checked[pname] = {k: _coerce(k, v, where) for k, v in (block or {}).items()}
    return values, checked


def experiment_path(stage: str) -> Path | None:
    """train/experiments/<stage>.yaml next to the stage configs (an experiment stage, which a
    later experiment may warm-start from: E28's parent is E27's stage `keep`), or None."""
    try:
        path = stages_dir().parent / "experiments" / f"{stage}.yaml"
    except ConfigError:
        return None
    return path if path.is_file() else None


def stage_path(stage: str) -> Path:
    path = stages_dir() / f"{stage}.yaml"
    experiment = None if path.is_file() or stage in STAGE_ORDER else experiment_path(stage)
    if experiment is not None:
        return experiment
    if not path.is_file():
        known = sorted(p.stem for p in stages_dir().glob("*.yaml"))
        raise ConfigError(f"no stage {stage!r}: {path} is missing; known stages: {known}")
    return path


def load_stage(stage: str, profile: str | None = None,
               overrides: dict[str, Any] | None = None) -> StageConfig:
    """The resolved, validated config of `stage` (a name in train/stages or a YAML path)."""
    path = Path(stage) if stage.endswith((".yaml", ".yml")) else stage_path(stage)
    values, profiles = read_stage_file(path)
    values.setdefault("name", path.stem)
    if profile:
        if profile not in profiles:
            raise ConfigError(f"{path}: no profile {profile!r}; it has {sorted(profiles) or 'none'}")
        values.update(profiles[profile])
    for key, value in (overrides or {}).items():
        if key not in FIELDS:
            raise ConfigError(f"unknown override {key!r}")
        values[key] = _coerce(key, value, "command line")
    return StageConfig(**values).validate()


def add_field_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per field (`--max-steps`, `--lr`, `--qlora/--no-qlora` ...), all default None
    so that only flags actually given override the YAML."""
    group = parser.add_argument_group("stage settings (override the YAML; defaults shown there)")
    for name, f in FIELDS.items():
        if name in ("name", "description", "parent"):
            continue
        flag = flag_name(name)
        kind = f.type
        kw: dict[str, Any] = {"dest": name, "default": None, "help": f.metadata["help"]}
        if kind.startswith("bool"):
            kw["action"] = argparse.BooleanOptionalAction
        elif kind.startswith("int"):
            kw["type"] = int
        elif kind.startswith("float"):
            kw["type"] = float
        group.add_argument(flag, **kw)


def flag_overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {name: getattr(args, name) for name in FIELDS
            if getattr(args, name, None) is not None}
