"""The TRL engine (`loop.AnswerOnlySFTTrainer`, an SFTTrainer subclass) trains exactly as the
transformers.Trainer engine it replaced (kept verbatim in tests/fixtures/legacy_trainer.py):
same rows, seed and settings give the same per-step losses (within 1e-5) and the same adapter.
Also: packed rows (one sequence, block-diagonal mask) give the loss and gradients of the same
rows unpacked, and `lora_layers: upper:N` adapts only the top N layers."""

from __future__ import annotations

import pytest
import torch
from transformers import TrainerCallback, set_seed

from memworker.registry import prepare
from memworker.train import data as tdata
from memworker.train import loop
from memworker.train import model as tmodel
from memworker.train.config import ConfigError, StageConfig
from tests.fixtures import legacy_trainer
from tests.fixtures.tiny import build_tiny_base, build_tiny_corpus

CPU = tmodel.Device("cpu", False, 1, 0, 1)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("engine")
    base = prepare(str(build_tiny_base(root / "base")))
    corpus = build_tiny_corpus(root / "corpus", episodes=4)
    tokenizer = tmodel.load_tokenizer(base.path)
    rows = tdata.seeded_order(tdata.load_wire_rows(corpus, "train"), 13, "train")[:24]
    encoded, _ = tdata.encode_rows(tokenizer, rows, 4096, base.model.end_of_turn)
    return base, tokenizer, encoded


class Losses(TrainerCallback):
    def __init__(self):
        self.losses = {}

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.losses[state.global_step] = logs["loss"]


def train(engine: str, cfg: StageConfig, setup, out) -> tuple[dict, dict, int]:
    base, tokenizer, encoded = setup
    set_seed(cfg.seed)  # as train/run.py does, before the adapter is initialised
    model = tmodel.load_model(base, cfg, CPU)
    share = cfg.share_prefix and cfg.batch_size > 1
    sampler = loop.make_batch_sampler(cfg, encoded)
    record = Losses()
    common = {"model": model, "train_dataset": tdata.to_dataset(encoded),
              "eval_dataset": tdata.to_dataset(encoded[:2]), "processing_class": tokenizer,
              "callbacks": [record], "answer_logits_only": cfg.answer_logits_only,
              "batch_sampler": sampler}
    if engine == "trl":
        trainer = loop.AnswerOnlySFTTrainer(
            args=loop.training_args(cfg, CPU, out),
            data_collator=loop.make_collator(cfg, tokenizer.pad_token_id), **common)
    else:
        trainer = legacy_trainer.AnswerOnlyTrainer(
            args=legacy_trainer.training_args(cfg, CPU, out),
            data_collator=tdata.PadCollator(tokenizer.pad_token_id, share_prefix=share), **common)
    trainer.train()
    weights = {n: p.detach().clone() for n, p in trainer.model.named_parameters()
               if p.requires_grad}
    return record.losses, weights, trainer.state.num_input_tokens_seen


SETTINGS = {
    "shared-prefix batches": dict(batch_size=3, max_batch_tokens=4000, grad_accum=2),
    "batch 1, full logits": dict(batch_size=1, grad_accum=3, answer_logits_only=False),
}


@pytest.mark.parametrize("name", list(SETTINGS))
def test_trl_engine_gives_the_old_engines_per_step_losses(setup, tmp_path, name):
    cfg = StageConfig(name="eq", qlora=False, lora_dropout=0.1, max_steps=4, logging_steps=1,
                      eval_steps=1000, save_steps=1000, learning_rate=1e-3, warmup=0.0,
                      **SETTINGS[name]).validate()
    old, old_weights, old_tokens = train("legacy", cfg, setup, tmp_path / "old")
    new, new_weights, new_tokens = train("trl", cfg, setup, tmp_path / "new")
    assert old_tokens == new_tokens > 0
    assert sorted(old) == sorted(new) == [1, 2, 3, 4]
    assert len(set(old.values())) > 1  # the steps really differ (learning, dropout)
    for step in old:
        assert abs(old[step] - new[step]) <= 1e-5, (step, old[step], new[step])
    assert old_weights.keys() == new_weights.keys()
    for key in old_weights:
        torch.testing.assert_close(new_weights[key], old_weights[key], rtol=1e-4, atol=1e-6)


def test_the_engine_is_trl_with_our_rows_untouched(setup, tmp_path):
    from trl import SFTConfig, SFTTrainer

    base, tokenizer, encoded = setup
    cfg = StageConfig(name="t", qlora=False)
    args = loop.training_args(cfg, CPU, tmp_path)
    assert isinstance(args, SFTConfig) and issubclass(loop.AnswerOnlySFTTrainer, SFTTrainer)
    assert args.use_cpu and args.bf16 is False and args.activation_checkpointing is False
    assert args.dataset_kwargs == {"skip_prepare_dataset": True} and not args.packing
    trainer = loop.AnswerOnlySFTTrainer(
        model=tmodel.load_model(base, cfg, CPU), args=args,
        train_dataset=tdata.to_dataset(encoded), eval_dataset=tdata.to_dataset(encoded[:1]),
        processing_class=tokenizer, data_collator=loop.make_collator(cfg, tokenizer.pad_token_id))
    assert trainer.train_dataset["input_ids"] == [e.input_ids for e in encoded]
    assert trainer.train_dataset["labels"] == [e.labels for e in encoded]


def packed_rows():
    g = torch.Generator().manual_seed(3)
    opening = torch.randint(3, 500, (20,), generator=g).tolist()
    rows = []
    for prompt, answer in ((9, 7), (15, 4), (4, 11)):
        ids = opening + torch.randint(3, 500, (prompt + answer,), generator=g).tolist()
        rows.append({"input_ids": ids, "labels": [tdata.IGNORE] * (20 + prompt) + ids[-answer:]})
    return rows


@pytest.fixture(scope="module")
def tiny_lora(tmp_path_factory):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    path = build_tiny_base(tmp_path_factory.mktemp("packbase"))
    torch.manual_seed(0)
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear",
                      init_lora_weights=False)
    return get_peft_model(AutoModelForCausalLM.from_pretrained(path), lora)


def test_packed_rows_restart_positions_and_carry_no_padding():
    rows = packed_rows()
    packed = tdata.PackCollator()(rows)
    total = sum(len(r["input_ids"]) for r in rows)
    assert packed["input_ids"].shape == (1, total) and int(packed["num_tokens"]) == total
    assert packed["input_ids"][0].tolist() == [t for r in rows for t in r["input_ids"]]
    assert packed["position_ids"][0].tolist() == [p for r in rows
                                                  for p in range(len(r["input_ids"]))]
    assert packed["packed_segments"][0].tolist() == [i + 1 for i, r in enumerate(rows)
                                                     for _ in r["input_ids"]]
    shared = tdata.PackCollator(share_prefix=True, min_prefix=8)(rows)
    assert shared["input_ids"].shape == (1, total - 2 * 20) and int(shared["shared_tokens"]) == 40
    assert int(shared["num_tokens"]) == total and int(shared["num_rows"]) == 3
    positions = shared["position_ids"][0].tolist()
    assert positions[:20] == list(range(20))
    assert positions[20:] == [p for r in rows for p in range(20, len(r["input_ids"]))]
    count = lambda b: int(b["labels"][:, 1:].ne(tdata.IGNORE).sum())  # noqa: E731
    assert count(packed) == count(shared) == 22  # what the trainer normalises by


@pytest.mark.parametrize("share, attention", [(False, "sdpa"), (True, "sdpa"), (True, "eager")])
def test_packed_rows_give_the_unpacked_loss_and_gradients(tiny_lora, share, attention):
    tiny_lora.base_model.model.set_attn_implementation(attention)  # eager takes a float mask
    rows = packed_rows()
    results = []
    for inputs in (tdata.PackCollator(share_prefix=share, min_prefix=8)(rows),
                   tdata.PadCollator(pad_id=2)(rows)):
        tiny_lora.zero_grad()
        loss, _ = loop.answer_loss(tiny_lora, inputs, True)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in tiny_lora.named_parameters() if p.requires_grad}
        results.append((loss.detach(), grads))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-5, atol=1e-5)
    for name in results[0][1]:
        torch.testing.assert_close(results[0][1][name], results[1][1][name], rtol=1e-4,
                                   atol=1e-6, msg=name)


def test_a_packed_row_cannot_open_with_a_loss_target():
    rows = [{"input_ids": [5, 6, 7], "labels": [tdata.IGNORE, 6, 7]},
            {"input_ids": [5, 8], "labels": [5, 8]}]
    with pytest.raises(tdata.DataError, match="must open with prompt tokens"):
        tdata.PackCollator()(rows)


def test_packed_batches_are_bounded_by_their_summed_length():
    groups = ["extract"] * 8
    lengths = [100, 300, 250, 90, 400, 120, 310, 60]
    plan = list(tdata.TaskBatchSampler(groups, lengths, 8, 13, max_tokens=600, packed=True))
    assert sorted(i for b in plan for i in b) == list(range(8))
    assert all(sum(lengths[i] for i in b) <= 600 for b in plan)


def test_packing_trains_through_the_trl_engine(setup, tmp_path):
    """Same batches packed or padded (a token bound neither plan reaches): the same losses
    (dropout off) and the same count of trained tokens."""
    runs = []
    for packing in (True, False):
        cfg = StageConfig(name="p", qlora=False, batch_size=4, max_batch_tokens=10**6,
                          packing=packing, max_steps=2, logging_steps=1, eval_steps=1000,
                          save_steps=1000, grad_accum=1, lora_dropout=0.0).validate()
        runs.append(train("trl", cfg, setup, tmp_path / str(packing)))
    (packed, _, packed_tokens), (padded, _, padded_tokens) = runs
    assert sorted(packed) == sorted(padded) == [1, 2]
    for step in packed:
        assert abs(packed[step] - padded[step]) < 1e-4, step
    assert packed_tokens == padded_tokens > 0  # every token of every row, counted alike


def test_upper_layer_lora_adapts_only_the_top_layers_and_is_checked_on_warm_start(setup,
                                                                                   tmp_path):
    base = setup[0]
    cfg = StageConfig(name="u", qlora=False, lora_layers="upper:1").validate()
    model = tmodel.load_model(base, cfg, CPU)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".layers.1." in n for n in trainable)
    assert len(trainable) == 2 * 7  # A and B of the 7 linear layers of the top layer
    ids = torch.tensor([[5, 6, 7, 8]])
    hidden = model(input_ids=ids, output_hidden_states=True).hidden_states
    # nothing below the adapted layer needs a gradient, so the backward pass stops there
    assert [h.requires_grad for h in hidden] == [False, False, True]
    model.save_pretrained(tmp_path / "adapter")
    with pytest.raises(ConfigError, match="lora_layers: parent upper:1, this stage all"):
        tmodel.check_adapter_config(tmp_path / "adapter", StageConfig(name="c"))
    tmodel.check_adapter_config(tmp_path / "adapter", StageConfig(name="c", lora_layers="upper:1"))
    with pytest.raises(ConfigError, match="only 2 decoder layers"):
        tmodel.load_model(base, StageConfig(name="x", qlora=False, lora_layers="upper:3"), CPU)
    with pytest.raises(ConfigError, match="lora_layers must be all or upper:N"):
        StageConfig(name="x", lora_layers="top-4").validate()
    from memworker.train.mlx_path import num_layers  # mlx-lm: LoRA on the last N layers

    assert num_layers(StageConfig(name="m")) == "-1"
    assert num_layers(StageConfig(name="m", lora_layers="upper:8")) == "8"


def test_stage_runs_with_packing_and_upper_layers_through_the_command_line(work, assets):
    """train/run.py with the new options: the parent stage run on the child's behalf inherits
    lora_layers (a warm start must continue the same layers), packing trains, receipts name
    the engine."""
    import json
    from pathlib import Path

    from memworker import pipeline

    args = ["--stage", "general-a", "--base", str(assets["base"]), "--receipts-dir", "",
            "--no-build-corpus", "--no-export", "--no-qlora", "--max-steps", "2",
            "--grad-accum", "1", "--val-rows", "2", "--eval-steps", "1000", "--batch-size", "3",
            "--max-batch-tokens", "5000", "--packing", "--lora-layers", "upper:1"]
    assert pipeline.main(args) == 0
    for stage in ("coding", "general-a"):
        receipt = json.loads(Path(f"runs/{stage}/receipt.json").read_text())
        assert receipt["config"]["lora_layers"] == "upper:1"
        assert receipt["engine"] == "AnswerOnlySFTTrainer (trl.SFTTrainer)"
        adapter = json.loads(Path(f"runs/{stage}/adapter/adapter_config.json").read_text())
        assert adapter["layers_to_transform"] == [1]
    general_a = json.loads(Path("runs/general-a/receipt.json").read_text())
    assert general_a["config"]["packing"] and general_a["result"]["tokens_this_session"] > 0
    assert general_a["result"]["shared_prefix_tokens_main_process"] > 0  # packed + shared


@pytest.mark.parametrize("share", [False, True])
def test_decision_weights_scale_their_tokens_in_every_collator(tiny_lora, share):
    """Each answer token's cross-entropy times its weight, summed: the same under padding, a shared
    opening and packing, and equal to a per-row reference; validation ignores the weights."""
    rows = packed_rows()
    g = torch.Generator().manual_seed(4)
    for row in rows:
        row["weights"] = [0.0 if x == tdata.IGNORE else float(torch.randint(1, 5, (1,),
                                                                            generator=g))
                          for x in row["labels"]]
    tiny_lora.train()
    reference = 0.0
    with torch.no_grad():
        for row in rows:
            ids = torch.tensor([row["input_ids"]])
            logits = tiny_lora(input_ids=ids).logits[0, :-1]
            ce = torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="none")
            labelled = torch.tensor(row["labels"][1:]).ne(tdata.IGNORE)
            reference += float((ce * torch.tensor(row["weights"][1:]))[labelled].sum())
        losses = [float(loop.answer_loss(tiny_lora, c(rows), True)[0])
                  for c in (tdata.PadCollator(pad_id=2, share_prefix=share, min_prefix=8),
                            tdata.PackCollator(share_prefix=share, min_prefix=8))]
        unweighted = float(loop.answer_loss(
            tiny_lora, tdata.PadCollator(pad_id=2)([{k: v for k, v in r.items() if k != "weights"}
                                                    for r in rows]), True)[0])
        tiny_lora.eval()
        evaluated = float(loop.answer_loss(tiny_lora, tdata.PadCollator(pad_id=2)(rows), True)[0])
    assert losses == pytest.approx([reference] * 2, rel=1e-5)
    assert evaluated == pytest.approx(unweighted, rel=1e-5) and reference > 1.5 * unweighted


def test_epoch_loss_scale_divides_every_step_by_one_constant(tiny_lora):
    """loss_scale "epoch": a step's summed answer loss over the epoch's mean answer tokens per
    step, whatever the step holds; "batch" divides by the step's own answer tokens."""
    from types import SimpleNamespace

    from memworker.train.config import StageConfig

    enc = [tdata.Encoded([1] * 10, [tdata.IGNORE] * (10 - n) + [1] * n) for n in (2, 4, 6, 8, 10)]
    cfg = StageConfig(name="t", loss_scale="epoch", batch_size=2, grad_accum=2)
    assert loop.step_tokens(cfg, enc, None) == pytest.approx(30 * 2 / 3)  # 3 micro-batches
    sampler = tdata.TaskBatchSampler(["x"] * 5, [10] * 5, 1, 13)
    assert loop.step_tokens(cfg, enc, sampler) == pytest.approx(30 * 2 / 5)
    assert loop.step_tokens(StageConfig(name="t", batch_size=2), enc, None) == 0.0
    rows = packed_rows()
    inputs = tdata.PadCollator(pad_id=2)(rows)
    tiny_lora.train()
    with torch.no_grad():
        summed = float(loop.answer_loss(tiny_lora, inputs, True)[0])
        for scale, expected in ((7.5, summed / 7.5), (0.0, summed / 22)):
            fake = SimpleNamespace(rows_seen=0, answer_logits_only=True, step_tokens=scale,
                                   shared_prefix_tokens=0, _record_metrics=lambda *a: None,
                                   args=SimpleNamespace(average_tokens_across_devices=False),
                                   accelerator=SimpleNamespace(num_processes=1))
            loss = loop.AnswerOnlySFTTrainer.compute_loss(fake, tiny_lora, dict(inputs),
                                                          num_items_in_batch=torch.tensor(22))
            assert float(loss) == pytest.approx(expected, rel=1e-5)
