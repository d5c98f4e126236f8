#!/usr/bin/env bash
# The release run on the embedded base, end to end, on 2 CPU cores (issue 15):
#   corpora -> coding -> general-a (one full epoch of the general train split) -> general
#   -> export of base and student (Q8_0) -> matched evaluation (held-out 64 rows, natural set,
#   natural-dev, test split) -> live acceptance -> executed notebook -> README results block
#   -> verify.
#
#   bash scripts/release.sh                  # every step in order: train heldout natural
#                                            # natural-dev test live finish
#   bash scripts/release.sh heldout natural  # only the steps named (any order is run in the one
#                                            # above)
#   SKIP_TEST_BASE=1 bash scripts/release.sh test   # the test split without the base arm
#
# The whole run is longer than one sitting on 2 cores (training ~2 h; the base arm runs most
# extract calls to the cap: ~45 min on the held-out rows, ~85 min on the natural set), so it is
# built to span sittings and lose nothing:
# - `train` copies the student's PEFT adapter (3 files, ~5 MB) to receipts/adapter/, beside the
#   stage receipts it belongs to; commit both.
# - Every later step first rebuilds release/ when it is missing (a fresh checkout): it exports the
#   committed adapter and the base again and, once anything has been evaluated, refuses to go on
#   unless both GGUFs have the sha256 the committed SHA256SUMS names (the merge is floating point:
#   another CPU may round a few weights differently; before any evaluation the rebuilt release
#   simply replaces the committed one), then merges the committed evaluations back into the new
#   release receipt.
# - Each evaluation keeps its samples in receipts/eval/<set>/ (natural-dev's in
#   receipts/eval/natural-dev/release/, beside the research runs that chose on it; it is reported
#   in the receipt and the card, never gated) and live acceptance its results in receipts/live/,
#   recorded in the receipt's `live`, which a format-2 release gate reads (commit them): a later sitting resumes where the last one stopped, and
#   eval/run.py / eval/live.py refuse to mix in samples made with another model, sampler or
#   prompt. Every step resumes after an interruption too: rerun the same command.
#
# Every model arm gets the same sampler: temperature 0, seed 0, grammar on, n_ctx 4096,
# max tokens 1024 (above the longest gold answer of the train split, 858 tokens: see
# EVAL_MAX_TOKENS in src/memworker/pipeline.py), one llama.cpp thread (THREADS below).
#
# The student's worker (how it must be run; the release receipt's `worker`): EXTRACT_FORM (the
# form it was trained in: window, the default, or turns) and CLAIM_GATE (its claim confidence
# gate, e.g. 'first(predicate)+first(value)>=-0.249', chosen on val; default none), and PROPOSE=1
# (with a turns form and a gate: every turn proposes a claim for the gate to keep or drop; its
# threshold chosen on val with proposing), TURN_HISTORY=none (turns forms: each turn reads the
# window and its own question alone), TURN_QUOTES=own (turns forms: each turn quotes its own
# event only), EVENT_STAMPS=minute (extract prompts write the events' timestamps to the
# minute), CLAIM_LAYOUT=v6 (turns forms: claims written without quotes, the codec quoting the
# turn's sentence) and WITH_RULES=1 (the hybrid worker: the rules' extract claims kept beside the
# student's, memworker.inference.hybrid) and REFLECT_RULES=1 (a reflection the student abstains
# from answered by the rules where they answer from a memory holding every content word of the
# question, memworker.inference.hybrid.reflect_fallback) and CONSOLIDATE_RULES=1 (consolidation
# requests answered by the rules, hybrid.rules_result). They go to the training (the form, the history, the stamps, the layout), the
# export (the receipt and the Modelfile), every evaluation of the student and live acceptance;
# the base and the rules run ungated and do not propose, and the rules answer in the window form.
# export/verify.py refuses a release whose evaluations ran the student otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

THREADS=${THREADS:-1}
CAP=1024  # = EVAL_MAX_TOKENS (tests/test_eval_cap.py)
BASE=release/base-q8_0.gguf
# STUDENT_RUN: release a finished stage run committed in the tree (e.g. receipts/proof/e20, E20's
# g3) instead of the train step's chain; its receipt becomes receipts/<stage>-receipt.json (the
# lineage verify checks). Committed evaluations of another student stop every step (archive them
# first, as release v2 did: `git mv` v1's receipts/eval/<set>, receipts/live and stage receipts to
# receipts/v1/).
STUDENT_RUN=${STUDENT_RUN:-}
STAGE=general
if [ -n "$STUDENT_RUN" ]; then
    [ -f "$STUDENT_RUN/receipt.json" ] && [ -f "$STUDENT_RUN/adapter/adapter_model.safetensors" ] || {
        echo "release.sh: STUDENT_RUN=$STUDENT_RUN is not a finished run folder (receipt.json, adapter/)" >&2; exit 2; }
    STAGE=$(python -c "import json, sys; print(json.load(open(sys.argv[1]))['stage'])" "$STUDENT_RUN/receipt.json")
fi
STUDENT=release/memworker-smollm2-135m-$STAGE-q8_0.gguf
RECEIPT=receipts/release-receipt.json
ADAPTER=receipts/adapter
# natural-dev: reported, never gated (designs and thresholds are chosen on it)
SETS=(heldout natural natural-dev test)
MERGED=  # set once ensure_release has merged the committed evaluations
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}

EXTRACT_FORM=${EXTRACT_FORM:-window}
WORKER_EXPORT=(--extract-form "$EXTRACT_FORM")   # export/run.py
WORKER_EVAL=(--extract-form "$EXTRACT_FORM")     # eval/run.py, eval/live.py
WORKER_TRAIN=()                                   # train/run.py: the form, when not the default
if [ -n "${CLAIM_GATE:-}" ]; then
    WORKER_EXPORT+=(--claim-gate "$CLAIM_GATE")
    WORKER_EVAL+=(--claim-gate "student=$CLAIM_GATE")
fi
if [ -n "${PROPOSE:-}" ]; then
    WORKER_EXPORT+=(--propose)
    WORKER_EVAL+=(--propose student)
fi
if [ -n "${WITH_RULES:-}" ]; then
    WORKER_EXPORT+=(--with-rules)
    WORKER_EVAL+=(--with-rules student)
fi
if [ -n "${REFLECT_RULES:-}" ]; then
    WORKER_EXPORT+=(--reflect-rules)
    WORKER_EVAL+=(--reflect-rules student)
fi
if [ -n "${CONSOLIDATE_RULES:-}" ]; then
    WORKER_EXPORT+=(--consolidate-rules)
    WORKER_EVAL+=(--consolidate-rules student)
fi
[ "$EXTRACT_FORM" = window ] || WORKER_TRAIN+=(--extract-form "$EXTRACT_FORM")
TURN_HISTORY=${TURN_HISTORY:-answers}
if [ "$TURN_HISTORY" != answers ]; then
    WORKER_EXPORT+=(--turn-history "$TURN_HISTORY")
    WORKER_EVAL+=(--turn-history "$TURN_HISTORY")
    WORKER_TRAIN+=(--turn-history "$TURN_HISTORY")
fi
TURN_QUOTES=${TURN_QUOTES:-upto}
if [ "$TURN_QUOTES" != upto ]; then
    WORKER_EXPORT+=(--turn-quotes "$TURN_QUOTES")
    WORKER_EVAL+=(--turn-quotes "$TURN_QUOTES")
fi
EVENT_STAMPS=${EVENT_STAMPS:-full}
if [ "$EVENT_STAMPS" != full ]; then
    WORKER_EXPORT+=(--event-stamps "$EVENT_STAMPS")
    WORKER_EVAL+=(--event-stamps "$EVENT_STAMPS")
    WORKER_TRAIN+=(--event-stamps "$EVENT_STAMPS")
fi
CLAIM_LAYOUT=${CLAIM_LAYOUT:-v3}
if [ "$CLAIM_LAYOUT" != v3 ]; then
    WORKER_EXPORT+=(--claim-layout "$CLAIM_LAYOUT")
    WORKER_EVAL+=(--claim-layout "$CLAIM_LAYOUT")
    WORKER_TRAIN+=(--claim-layout "$CLAIM_LAYOUT")
fi

ALL=(train heldout natural natural-dev test live finish)
WANT=("$@")
[ ${#WANT[@]} -eq 0 ] && WANT=("${ALL[@]}")
for w in "${WANT[@]}"; do
    case " ${ALL[*]} " in *" $w "*) ;; *) echo "release.sh: unknown step '$w' (steps: ${ALL[*]})" >&2; exit 2;; esac
done
wants() { case " ${WANT[*]} " in *" $1 "*) return 0;; *) return 1;; esac; }

step() { echo; echo "== $(date -u +%H:%M:%S) $*"; }

arms_of() {  # the arms evaluated on a set
    if [ "$1" = test ] && [ -n "${SKIP_TEST_BASE:-}" ]; then
        echo "--arm student=$STUDENT --arm rules"
    else
        echo "--arm base=$BASE --arm student=$STUDENT --arm rules"
    fi
}
corpus_of() { case "$1" in natural|natural-dev) echo "";; *) echo "--corpus data/corpus";; esac; }
# where a set's release evaluation lives: natural-dev's own folder holds the research runs that
# chose on it, so the release's is a folder of its own inside it
out_of() { [ "$1" = natural-dev ] && echo receipts/eval/natural-dev/release || echo "receipts/eval/$1"; }

merge_committed() {  # fold every committed evaluation back into the release receipt
    local set arms arm
    for set in "${SETS[@]}"; do
        # only a set whose evaluation finished (eval/run.py writes summary.json after the
        # last arm; an interrupted sitting leaves samples without it)
        [ -s "$(out_of "$set")/summary.json" ] || continue
        arms=()   # the arms that have samples in the set (the test split may lack the base)
        for arm in base=$BASE student=$STUDENT rules; do
            grep -q "\"arm\":\"${arm%%=*}\"" "$(out_of "$set")/samples.jsonl" && arms+=(--arm "$arm")
        done
        # shellcheck disable=SC2046
        python eval/run.py "${arms[@]}" --set "$set" $(corpus_of "$set") --no-run \
            --max-tokens $CAP --threads "$THREADS" --out "$(out_of "$set")" --no-progress \
            --no-plots --into-receipt $RECEIPT --release release "${WORKER_EVAL[@]}"
    done
    # live acceptance, which the gate of a format-2 receipt reads (a format-1 release, v1-v3,
    # kept it beside the receipt only: receipts/live-summary.json)
    if [ -s receipts/live/summary.json ] && python -c 'import json, sys
sys.exit(json.load(open(sys.argv[1])).get("format", 1) < 2)' "$RECEIPT"; then
        python export/run.py --out release --record-live receipts/live/summary.json
    fi
}

ensure_corpus() {  # the frozen corpora (deterministic: the manifests' sha256 are in the receipts)
    [ -f data/corpus/manifest.json ] || python corpus/build.py --out data/corpus --seed 13
    [ -f data/natural/manifest.json ] || python corpus/build.py --natural corpus/natural --out data/natural
    [ -f data/natural-dev/manifest.json ] || python corpus/build.py --natural corpus/natural-dev --out data/natural-dev
}

ensure_release() {  # release/ from the committed adapter and stage receipts, byte for byte
    [ -f "$STUDENT" ] && [ -f "$BASE" ] && return 0
    local run=runs/general
    if [ -n "$STUDENT_RUN" ]; then
        step "rebuild release/ from $STUDENT_RUN"
        run=$STUDENT_RUN
        cp "$STUDENT_RUN/receipt.json" "receipts/$STAGE-receipt.json"
    else
        step "rebuild release/ from $ADAPTER and receipts/general-receipt.json"
        [ -f "$ADAPTER/adapter_model.safetensors" ] || {
            echo "release.sh: no $ADAPTER: run the train step first" >&2; exit 2; }
    fi
    ensure_corpus
    local sums
    sums=$(mktemp)
    cp SHA256SUMS "$sums"
    if [ -z "$STUDENT_RUN" ] && [ ! -f runs/general/receipt.json ]; then
        mkdir -p runs/general
        cp receipts/general-receipt.json runs/general/receipt.json
        rm -rf runs/general/adapter && cp -r "$ADAPTER" runs/general/adapter
    fi
    python export/run.py --run "$run" --with-base --out release --force "${WORKER_EXPORT[@]}"
    local gguf want have changed=()
    for gguf in "$BASE" "$STUDENT"; do
        want=$(awk -v f="$gguf" '$2 == f {print $1}' "$sums")
        have=$(sha256sum "$gguf" | cut -d' ' -f1)
        [ "$want" = "$have" ] || changed+=("$gguf (committed ${want:-none}, rebuilt $have)")
    done
    if [ ${#changed[@]} -gt 0 ]; then
        # the merge runs in floating point, so another CPU may round a few weights differently
        if compgen -G "receipts/eval/*/samples.jsonl" > /dev/null || [ -d receipts/live/results ] \
                || [ -f receipts/eval/natural-dev/release/samples.jsonl ]; then
            echo "release.sh: the rebuilt GGUFs differ from the ones the committed evaluations" \
                 "ran on: ${changed[*]}; stopping (the committed SHA256SUMS is restored)" >&2
            cp "$sums" SHA256SUMS
            exit 1
        fi
        echo "release.sh: nothing is evaluated yet, so the rebuilt release replaces the" \
             "committed one (commit the new SHA256SUMS and receipts): ${changed[*]}"
    fi
    rm -f "$sums"
    merge_committed
    MERGED=1
}

evaluate() {  # evaluate SET: every arm, samples kept in receipts/eval/SET
    local set=$1
    step "$set: $(arms_of "$set")"
    # shellcheck disable=SC2046
    python eval/run.py $(arms_of "$set") --set "$set" $(corpus_of "$set") --max-tokens $CAP \
        --threads "$THREADS" --out "$(out_of "$set")" --no-progress --no-plots \
        --into-receipt $RECEIPT --release release "${WORKER_EVAL[@]}"
}

if wants train; then
    [ -z "$STUDENT_RUN" ] || { echo "release.sh: the train step trains the chain; with" \
        "STUDENT_RUN the student is already trained" >&2; exit 2; }
    step "train coding -> general-a -> general (profile cpu-release), export base + student"
    python train/run.py --stage general --profile cpu-release --no-eval --release-dir release \
        --receipts-dir receipts "${WORKER_TRAIN[@]}"
    rm -rf "$ADAPTER" && cp -r runs/general/adapter "$ADAPTER"
fi

for set in "${SETS[@]}"; do
    if wants "$set"; then ensure_corpus; ensure_release; evaluate "$set"; fi
done

if wants live; then
    ensure_corpus; ensure_release
    step "live acceptance: base, student, rules"
    python eval/live.py --arm base=$BASE --arm student=$STUDENT --arm rules --max-tokens $CAP \
        --threads "$THREADS" --out receipts/live --into-receipt $RECEIPT --release release \
        "${WORKER_EVAL[@]}"
    cp receipts/live/summary.json receipts/live-summary.json
fi

if wants finish; then
    ensure_corpus; ensure_release
    step "every committed evaluation into the receipt; notebook, README results block, verify"
    [ -n "${MERGED:-}" ] || merge_committed  # (a rebuild above has merged them already)
    python notebooks/build.py
    python eval/results.py --write README.md
    python export/verify.py release
fi
