#!/usr/bin/env bash
# Runs the parser fuzzer for a bounded time from seeds: tests/fuzz/regressions
# (inputs that once failed), every rxe capture in
# ../shared/pcaps and a few hundred random frames of every opcode from
# `droce gen`. Exit status is the fuzzer's: non-zero on a crash, a sanitizer
# report or a failed round trip (the crashing input is kept in WORKDIR).
#
# usage: run_fuzz.sh FUZZER DROCE SECONDS WORKDIR PCAPDIR
set -euo pipefail
fuzzer=$(realpath "$1") droce=$(realpath "$2") seconds=$3 work=$(realpath -m "$4") pcaps=$5
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work/seeds" "$work/corpus"
"$droce" gen --seed 1 --count 300 --max-payload 300 "$work/gen.pcap" >/dev/null
shopt -s nullglob
/usr/bin/python3 "$here/seeds_from_pcaps.py" "$work/seeds" "$work/gen.pcap" "$pcaps"/*.pcap
# Inputs that once failed stay seeds for good.
cp "$here"/regressions/* "$work/seeds/"
cd "$work"
# libFuzzer's own failure codes default to 77, which meson reads as "skipped":
# a crash must fail the test, so every failure exits 1.
exec "$fuzzer" -max_total_time="$seconds" -timeout=10 -error_exitcode=1 -timeout_exitcode=1 -rss_limit_mb=4096 -print_final_stats=1 \
  -artifact_prefix="$work/" corpus seeds
