# Sourced by the GPU sitting scripts (scripts/gpu_levers.sh, scripts/gpu_chain.sh): what of a
# stage run folder travels back to the CPU machine.
#
#   pack_stage DIR [records only]   appends to the array `list` the files of one stage folder:
#     a finished run (receipt.json present) its records and adapter (with a second argument, its
#     records only); an unfinished one its latest checkpoint's adapter and trainer state with
#     the run's sittings.json and config.json, enough to evaluate or resume it.
#   pack_out NAME                   tars the logs and `list` in the working folder into NAME.tar
#     and splits it into 15 MiB pieces under $OUT (`cat NAME.tar.part-* | tar x` joins them).

pack_stage() {
    local d=$1 records_only=${2:-}
    [ -d "$d" ] || return 0
    if [ -f "$d/receipt.json" ] || [ -n "$records_only" ]; then
        local files=(receipt.json sittings.json config.json trainer_state.json train.log)
        [ -n "$records_only" ] || files+=(adapter)
        for f in "${files[@]}"; do [ -e "$d/$f" ] && list+=("$d/$f"); done
    else
        local c
        c=$(ls -d "$d"/checkpoints/checkpoint-* 2>/dev/null | sort -V | tail -1)   # by step (a folder name may hold "-")
        [ -n "$c" ] && list+=("$c/adapter_model.safetensors" "$c/adapter_config.json" "$c/trainer_state.json")
        for f in sittings.json config.json; do [ -e "$d/$f" ] && list+=("$d/$f"); done
    fi
    return 0
}

pack_out() {
    tar cf "$1.tar" *.log "${list[@]}" 2>>"$OUT/gpu.log"
    split -b 15M -d "$1.tar" "$OUT/$1.tar.part-"
    log "packed: $(du -h "$1.tar" | cut -f1) -> $(ls "$OUT" | tr '\n' ' ')"
}
