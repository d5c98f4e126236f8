"""The answer-only loss: computing logits only at answer positions gives the same loss and
gradients as full logits, and the loss equals transformers' own causal-LM loss."""

from __future__ import annotations

import pytest
import torch

from memworker.train import data as tdata
from memworker.train.loop import answer_loss
from tests.fixtures.tiny import build_tiny_base


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    path = build_tiny_base(tmp_path_factory.mktemp("base"))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(path)
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear",
                      init_lora_weights=False)  # non-zero B, so every LoRA weight gets a gradient
    return get_peft_model(model, lora)


def batch():
    g = torch.Generator().manual_seed(1)
    rows = []
    for length, prompt in ((40, 30), (25, 12)):
        ids = torch.randint(3, 500, (length,), generator=g).tolist()
        rows.append({"input_ids": ids, "labels": [tdata.IGNORE] * prompt + ids[prompt:]})
    return tdata.PadCollator(pad_id=2)(rows)


def grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def test_answer_logits_only_matches_full_logits(tiny):
    inputs = batch()
    results = []
    for logits_only in (True, False):
        tiny.zero_grad()
        loss, out = answer_loss(tiny, inputs, logits_only)
        loss.backward()
        results.append((loss.detach(), grads(tiny), out.logits.shape))
    (l1, g1, shape1), (l2, g2, shape2) = results
    n_answer = int(inputs["labels"][:, 1:].ne(tdata.IGNORE).sum())
    assert shape1[0] == n_answer and len(shape2) == 3  # fewer logits computed
    torch.testing.assert_close(l1, l2, rtol=1e-5, atol=1e-5)
    assert g1.keys() == g2.keys() and g1
    for name in g1:
        torch.testing.assert_close(g1[name], g2[name], rtol=1e-4, atol=1e-6, msg=name)


def test_loss_equals_the_reference_causal_lm_loss(tiny):
    inputs = batch()
    one = {k: v[:1] for k, v in inputs.items()}
    with torch.no_grad():
        ours, _ = answer_loss(tiny, one, True)
        ref = tiny(input_ids=one["input_ids"], labels=one["labels"]).loss  # mean over targets
    n = int(one["labels"][:, 1:].ne(tdata.IGNORE).sum())
    torch.testing.assert_close(ours / n, ref, rtol=1e-5, atol=1e-5)


def test_shared_prefix_batches_give_the_same_loss_and_gradients(tiny):
    g = torch.Generator().manual_seed(2)
    opening = torch.randint(3, 500, (24,), generator=g).tolist()  # e.g. system + instructions
    rows = []
    for prompt, answer in ((10, 6), (17, 3), (5, 9)):
        ids = opening + torch.randint(3, 500, (prompt + answer,), generator=g).tolist()
        rows.append({"input_ids": ids, "labels": [tdata.IGNORE] * (24 + prompt) + ids[-answer:]})
    shared = tdata.PadCollator(pad_id=2, share_prefix=True, min_prefix=8)(rows)
    plain = tdata.PadCollator(pad_id=2)(rows)
    assert shared["prefix_ids"].shape == (1, 24) and shared["input_ids"].shape[1] == 20
    assert int(shared["attention_mask"].sum()) == int(plain["attention_mask"].sum())
    count = lambda b: int(b["labels"][:, 1:].ne(tdata.IGNORE).sum())  # noqa: E731
    assert count(shared) == count(plain) == 18  # what the Trainer normalises by
    results = []
    for inputs in (shared, plain):
        tiny.zero_grad()
        loss, _ = answer_loss(tiny, inputs, True)
        loss.backward()
        results.append((loss.detach(), grads(tiny)))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-5, atol=1e-5)
    for name in results[0][1]:
        torch.testing.assert_close(results[0][1][name], results[1][1][name], rtol=1e-4,
                                   atol=1e-6, msg=name)


def test_prefix_stops_before_the_first_answer_token():
    rows = [{"input_ids": list(range(40)), "labels": [tdata.IGNORE] * 30 + list(range(30, 40))},
            {"input_ids": list(range(36)), "labels": [tdata.IGNORE] * 20 + list(range(20, 36))}]
    batch = tdata.PadCollator(pad_id=0, share_prefix=True, min_prefix=4)(rows)
    assert batch["prefix_ids"].shape[1] == 19  # the first answer token (20) stays a target
    assert batch["labels"][1, 0] == tdata.IGNORE and batch["labels"][1, 1] == 20
    single = tdata.PadCollator(pad_id=0, share_prefix=True)(rows[:1])
    assert "prefix_ids" not in single  # nothing to share in a batch of one


def test_task_batches_stay_within_a_task_and_a_token_budget():
    groups = ["extract"] * 10 + ["reflect"] * 7 + ["consolidate"] * 5
    lengths = [300 + 37 * i % 500 for i in range(22)]
    batches = list(tdata.TaskBatchSampler(groups, lengths, batch_size=4, seed=13))
    assert sorted(i for b in batches for i in b) == list(range(22))
    assert all(len({groups[i] for i in b}) == 1 and len(b) <= 4 for b in batches)
    budget = tdata.TaskBatchSampler(groups, lengths, batch_size=8, seed=13, max_tokens=1500)
    planned = list(budget)
    assert sorted(i for b in planned for i in b) == list(range(22))
    assert all(len(b) == 1 or max(lengths[i] for i in b) * len(b) <= 1500 for b in planned)
    assert len(budget) == len(planned) and max(len(b) for b in planned) > 1
    assert planned == list(budget)  # deterministic
    budget.set_epoch(1)
    assert planned != list(budget)


def test_lora_branches_use_peft_dropout_at_the_stage_rate(tmp_path):
    """PEFT's own dropout (no patched module): a fresh adapter gets the stage's rate, and a warm
    start gets this stage's rate, not the parent's (through PeftModel.from_pretrained(config=))."""
    from memworker.registry import prepare
    from memworker.train.config import StageConfig
    from memworker.train.model import Device, load_model

    def rates(model):
        return sorted({d.p for m in model.modules()
                       if isinstance(getattr(m, "lora_dropout", None), torch.nn.ModuleDict)
                       for d in m.lora_dropout.values()})

    base = prepare(str(build_tiny_base(tmp_path / "b")))
    cpu = Device("cpu", False, 1, 0, 1)
    parent = load_model(base, StageConfig(name="p", qlora=False, lora_dropout=0.1), cpu)
    assert rates(parent) == [0.1]
    assert all(type(d) is torch.nn.Dropout for m in parent.modules()
               if isinstance(getattr(m, "lora_dropout", None), torch.nn.ModuleDict)
               for d in m.lora_dropout.values())
    parent.save_pretrained(tmp_path / "adapter")
    child = load_model(base, StageConfig(name="c", qlora=False, lora_dropout=0.05), cpu,
                       parent_adapter=tmp_path / "adapter")
    assert rates(child) == [0.05]
    assert sum(p.requires_grad for p in child.parameters()) == 2 * 2 * 7  # A and B, trainable


def test_shared_prefix_path_refuses_an_untested_transformers(monkeypatch):
    import transformers

    from memworker.train.config import StageConfig
    from memworker.train.loop import RunError, check_share_prefix_support

    check_share_prefix_support(StageConfig(name="t", batch_size=4))  # the installed, pinned one
    monkeypatch.setattr(transformers, "__version__", "5.99.0")
    with pytest.raises(RunError, match="tested with transformers 5.24.x, this is 5.99.0"):
        check_share_prefix_support(StageConfig(name="t", batch_size=4))
    check_share_prefix_support(StageConfig(name="t", batch_size=4, share_prefix=False))
    check_share_prefix_support(StageConfig(name="t", batch_size=1))  # no batch, no sharing
