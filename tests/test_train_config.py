"""Stage configs: every shipped YAML (and profile) loads and validates; unknown keys, bad types and
bad values are errors; flags override the YAML; every field has help text."""

from __future__ import annotations

import argparse

import pytest

from memworker.pipeline import build_parser
from memworker.train import config as tconfig
from memworker.train.cli import command_for


def shipped() -> list:
    return sorted(tconfig.stages_dir().glob("*.yaml"))


def test_every_shipped_stage_and_profile_loads():
    files = shipped()
    assert {p.stem for p in files} == set(tconfig.STAGE_ORDER)
    for path in files:
        _, profiles = tconfig.read_stage_file(path)
        assert {"cpu", "gpu"} <= set(profiles), path
        for profile in (None, *profiles):
            cfg = tconfig.load_stage(path.stem, profile)
            assert cfg.name == path.stem
            assert cfg.replay_fraction <= 0.2


def test_stage_chain_and_defaults():
    coding, general_a, general = (tconfig.load_stage(s) for s in tconfig.STAGE_ORDER)
    assert (coding.parent, general_a.parent, general.parent) == (None, "coding", "general-a")
    assert coding.corpus_domain == "coding" and general_a.corpus_domain == "general"
    assert general.replay_corpus == coding.corpus and 0 < general.replay_fraction <= 0.2
    assert general.learning_rate < general_a.learning_rate
    for cfg in (coding, general_a, general):
        assert (cfg.qlora, cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout) == (True, 16, 32, 0.05)
        assert (cfg.max_length, cfg.seed, cfg.answer_logits_only) == (4096, 13, True)
        assert cfg.base == "smollm2-135m"
        assert tconfig.load_stage(cfg.name, "gpu").base == "qwen3-4b"
        assert tconfig.load_stage(cfg.name, "cpu").max_length <= 2048


def test_every_field_has_help():
    for name, f in tconfig.FIELDS.items():
        assert len(f.metadata.get("help", "")) > 10, name
    assert set(tconfig.INHERITED_FLAGS) <= set(tconfig.FIELDS)


def _write(tmp_path, text: str):
    path = tmp_path / "x.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, message", [
    ("name: x\nlearning_rte: 0.1\n", "unknown key"),
    ("name: x\nprofiles:\n  cpu: {max_step: 3}\n", "unknown key"),
    ("name: x\nprofiles:\n  cpu: {parent: coding}\n", "cannot be set here"),
    ("name: x\nlora_r: sixteen\n", "lora_r must be int"),
    ("name: x\nqlora: 1\n", "qlora must be bool"),
    ("name: x\nreplay_fraction: 0.3\nreplay_corpus: c\n", "replay_fraction must be in"),
    ("name: x\nparent: nowhere\n", "is not a stage"),
    ("name: x\nmax_steps: 0\n", "max_steps must be"),
    ("name: x\nprecision: fp8\n", "precision must be"),
    ("- a\n- b\n", "mapping"),
    ("name: x\nlora_r: 8\nlora_r: 16\n", "appears twice"),
    ("name: x\nprofiles:\n  cpu:\n    max_steps: 3\n    max_steps: 4\n", "appears twice"),
    ("name: x\ntask_shares: extract=1,summarise=1\n", "unknown task 'summarise'"),
    ("name: x\ntask_shares: extract=1,extract=2\n", "extract is given twice"),
    ("name: x\ntask_shares: extract=-1,reflect=1\n", "must be a number >= 0"),
    ("name: x\ntask_shares: extract=nan,reflect=1\n", "must be a number >= 0"),
    ("name: x\ntask_shares: extract=0,reflect=0\n", "every share is 0"),
    ("name: x\ntask_shares: extract\n", "is not task=share"),
])
def test_bad_stage_files_are_refused(tmp_path, text, message):
    with pytest.raises(tconfig.ConfigError, match=message):
        tconfig.load_stage(str(_write(tmp_path, text)))


def test_unknown_profile_is_refused():
    with pytest.raises(tconfig.ConfigError, match="no profile 'fast'"):
        tconfig.load_stage("coding", "fast")


def test_flags_override_yaml_and_profile():
    args = build_parser().parse_args(["--stage", "general", "--profile", "cpu", "--max-steps",
                                      "7", "--lr", "5e-5", "--no-qlora", "--max-length", "512",
                                      "--epochs", "3", "--corpus", "elsewhere"])
    overrides = tconfig.flag_overrides(args)
    assert overrides == {"max_steps": 7, "learning_rate": 5e-5, "qlora": False,
                         "max_length": 512, "epochs": 3.0, "corpus": "elsewhere"}
    cfg = tconfig.load_stage("general", "cpu", overrides)
    assert (cfg.max_steps, cfg.learning_rate, cfg.qlora, cfg.max_length, cfg.corpus) == (
        7, 5e-5, False, 512, "elsewhere")
    assert tconfig.load_stage("general", "cpu").val_rows > 0  # the profile applied
    assert cfg.sha256() != tconfig.load_stage("general", "cpu").sha256()


def test_parent_command_carries_only_inherited_flags():
    args = argparse.Namespace(profile="cpu", runs_dir="runs")
    cmd = command_for("coding", args, {"max_steps": 5, "qlora": False})
    assert cmd == "python train/run.py --stage coding --profile cpu --max-steps 5 --no-qlora"


def test_task_shares_are_normalised():
    assert tconfig.parse_task_shares("") == {}
    assert tconfig.parse_task_shares(" extract=2, consolidate=1 ,reflect=1") == {
        "extract": 0.5, "consolidate": 0.25, "reflect": 0.25}
    cfg = tconfig.load_stage("coding", overrides={"task_shares": "extract=1,reflect=3"})
    assert cfg.task_shares == "extract=1,reflect=3"  # kept as written; the receipt records both


def test_experiment_stages_load_and_continue_a_shipped_stage():
    """train/experiments/*.yaml: stages outside the shipped chain, given to train/run.py as a path;
    each loads, validates and warm-starts from a shipped stage (train/lineage checks the parent's
    receipt names that stage), directly or through other experiment stages (E28's `asked`
    continues E27's `keep`), which load by name too."""
    folder = tconfig.stages_dir().parent / "experiments"
    files = sorted(folder.glob("*.yaml"))
    assert files, folder
    for path in files:
        cfg = tconfig.load_stage(str(path))
        assert cfg.name == path.stem and cfg.name not in tconfig.STAGE_ORDER
        seen = {cfg.name}
        while cfg.parent not in tconfig.STAGE_ORDER:
            assert tconfig.experiment_path(cfg.parent) is not None and cfg.parent not in seen
            cfg = tconfig.load_stage(cfg.parent)
            seen.add(cfg.name)
    assert tconfig.load_stage(str(folder / "asked.yaml")).parent == "keep"
    assert tconfig.experiment_path("nowhere") is None
    reflect = tconfig.load_stage(str(folder / "reflect.yaml"))
    shares = tconfig.parse_task_shares(reflect.task_shares)
    assert shares["reflect"] > shares["extract"]
    assert (reflect.parent, reflect.mix_corpus, reflect.extract_form) == (
        "general", "data/natural-train", "turns")
