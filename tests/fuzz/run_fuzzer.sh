#!/bin/sh
# run_fuzzer.sh FUZZER SEED_CORPUS BUILD_DIR [libFuzzer options...]
# Replays SEED_CORPUS (read-only) and fuzzes from it, new inputs in a fresh scratch
# directory under BUILD_DIR, crash inputs in BUILD_DIR/artifacts/.
set -eu
fuzzer=$1 seeds=$2 dir=$3
shift 3
name=$(basename "$fuzzer")
work=$dir/work/$name
rm -rf "$work"
mkdir -p "$work" "$dir/artifacts"
exec "$fuzzer" -artifact_prefix="$dir/artifacts/$name-" "$@" "$work" "$seeds"
