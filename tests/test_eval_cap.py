"""The evaluation's max-tokens cap must leave room for a correct answer: every gold answer of the
generated corpus fits under it, counted with the embedded base's own tokenizer. (Corpus v2's
extract answers in the keyed wire outgrew the old 512 cap: a model writing the gold answer was
cut off. Wire v3 writes the same claims in about a third of the tokens.)"""

from __future__ import annotations

import re
from pathlib import Path

from memworker.corpus.build import generate_rows, wire_row
from memworker.pipeline import EVAL_MAX_TOKENS

ROOT = Path(__file__).resolve().parents[1]


def test_every_gold_answer_fits_under_the_evaluation_cap(embedded_gguf):
    from llama_cpp import Llama

    vocab = Llama(model_path=str(embedded_gguf), vocab_only=True, verbose=False)
    rows, _ = generate_rows("general", 13, 300)
    lengths = {}
    for row in rows:
        answer = wire_row(row)["messages"][-1]["content"]
        n = len(vocab.tokenize(answer.encode("utf-8"), add_bos=False))
        lengths[row["task"]] = max(lengths.get(row["task"], 0), n)
    assert set(lengths) == {"extract", "consolidate", "reflect"}
    assert lengths["extract"] > max(lengths["consolidate"], lengths["reflect"])
    longest = max(lengths.values())
    assert longest <= EVAL_MAX_TOKENS, (
        f"a gold answer takes {longest} tokens, above the evaluation cap {EVAL_MAX_TOKENS}")


def test_release_script_uses_the_main_jobs_cap():
    text = (ROOT / "scripts" / "release.sh").read_text("utf-8")
    caps = re.findall(r"^CAP=(\d+)", text, flags=re.M)
    assert caps == [str(EVAL_MAX_TOKENS)]
