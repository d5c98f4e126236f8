#!/usr/bin/env bash
# The release run on the embedded base, end to end, on 2 CPU cores (issue 15):
#   corpora -> coding -> general-a (one full epoch of the general train split) -> general
#   -> export of base and student (Q8_0) -> matched evaluation (held-out 64 rows, natural set,
#   test split) -> live acceptance -> executed notebook -> README results block -> verify.
#
#   bash scripts/release.sh                # every step resumes: rerun the same command after an
#                                          # interruption (finished stages, rows and scenarios
#                                          # are not redone)
#   SKIP_TEST_BASE=1 bash scripts/release.sh   # the test split without the base arm (see below)
#
# Every model arm gets the same sampler: temperature 0, seed 0, grammar on, n_ctx 4096,
# max tokens 1024 (above the longest gold answer of the train split, 858 tokens: see
# EVAL_MAX_TOKENS in src/memworker/train/cli.py), one llama.cpp thread (THREADS below). The base
# arm runs most extract calls to the cap, so it dominates the evaluation time.
set -euo pipefail
cd "$(dirname "$0")/.."

THREADS=${THREADS:-1}
CAP=1024  # = EVAL_MAX_TOKENS (tests/test_eval_cap.py)
BASE=release/base-q8_0.gguf
STUDENT=release/memworker-smollm2-135m-general-q8_0.gguf
RECEIPT=receipts/release-receipt.json
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}

step() { echo; echo "== $(date -u +%H:%M:%S) $*"; }

step "train coding -> general-a -> general (profile cpu-release), export base + student"
python train/run.py --stage general --profile cpu-release --no-eval

step "held-out set (64 rows): base, student, rules"
python eval/run.py --arm base=$BASE --arm student=$STUDENT --arm rules --set heldout \
    --corpus data/corpus --max-tokens $CAP --threads "$THREADS" --out runs/eval/heldout \
    --into-receipt $RECEIPT --release release

step "natural set (hand-written, 222 rows): base, student, rules"
python eval/run.py --arm base=$BASE --arm student=$STUDENT --arm rules --set natural \
    --max-tokens $CAP --threads "$THREADS" --out runs/eval/natural \
    --into-receipt $RECEIPT --release release

step "test split (585 rows)"
TEST_ARMS=(--arm student=$STUDENT --arm rules)
if [ -z "${SKIP_TEST_BASE:-}" ]; then TEST_ARMS=(--arm base=$BASE "${TEST_ARMS[@]}"); fi
python eval/run.py "${TEST_ARMS[@]}" --set test --corpus data/corpus --max-tokens $CAP \
    --threads "$THREADS" --out runs/eval/test --into-receipt $RECEIPT --release release

step "live acceptance: base, student, rules"
python eval/live.py --arm base=$BASE --arm student=$STUDENT --arm rules --max-tokens $CAP \
    --threads "$THREADS" --out runs/live
cp runs/live/summary.json receipts/live-summary.json

step "notebook, README results block, verify"
python notebooks/build.py
python eval/results.py --write README.md
python export/verify.py release
