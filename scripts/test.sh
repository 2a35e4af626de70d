#!/usr/bin/env bash
# droce's test command: installs what is missing, builds the debug
# configuration (AddressSanitizer + UndefinedBehaviorSanitizer), runs every
# test, then builds the parser fuzzer with clang and runs it for a bounded time.
#
# usage: scripts/test.sh [--no-fuzz] [--fuzz-seconds N] [--soak [N]] [-- MESON_TEST_ARGS...]
#   DROCE_FUZZ_SECONDS  how long the fuzzer runs (default 60)
#   --soak [N]          also run the full engine soak (N messages, default
#                       1,000,000) under ASan + UBSan; about 9 minutes here
#
# Ends with a line "N passed, M failed"; exit status non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

fuzz=1
fuzz_seconds=${DROCE_FUZZ_SECONDS:-60}
soak=0
meson_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --no-fuzz) fuzz=0 ;;
    --fuzz-seconds) fuzz_seconds=$2; shift ;;
    --soak)
      soak=1000000
      if [[ ${2:-} =~ ^[0-9]+$ ]]; then soak=$2; shift; fi ;;
    --) shift; meson_args=("$@"); break ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "scripts/test.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

scripts/install-deps.sh

if [ ! -d ../shared/pcaps ]; then
  echo "scripts/test.sh: warning: ../shared/pcaps is missing; the rxe capture tests will skip" >&2
fi

setup() {  # setup DIR ARGS...: configure once, reconfigure when options change
  local dir=$1; shift
  if [ -f "$dir/build.ninja" ]; then
    meson configure "$dir" "$@" >/dev/null
  else
    meson setup "$dir" "$@" >/dev/null
  fi
}

status=0
echo "== build: debug (ASan + UBSan)"
setup build/debug -Dbuildtype=debug -Db_sanitize=address,undefined -Db_lundef=false
ninja -C build/debug
echo "== test: debug"
# DPDK's EAL keeps some memory until exit; leaks in droce's own code still fail.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
meson test -C build/debug --print-errorlogs --num-processes 2 "${meson_args[@]}" || status=1

logs=(build/debug/meson-logs/testlog.json)
if [ "$fuzz" = 1 ]; then
  if command -v clang++ >/dev/null; then
    echo "== build: fuzz (clang, libFuzzer, ASan + UBSan)"
    CXX=clang++ setup build/fuzz -Dfuzz=enabled -Dbuildtype=debugoptimized \
      -Db_sanitize=address,undefined -Db_lundef=false -Dfuzz_seconds="$fuzz_seconds"
    ninja -C build/fuzz tests/fuzz/droce_parse_fuzz apps/droce
    echo "== test: fuzz (${fuzz_seconds}s)"
    meson test -C build/fuzz --suite fuzz --print-errorlogs --no-rebuild || status=1
    logs+=(build/fuzz/meson-logs/testlog.json)
  else
    echo "scripts/test.sh: no clang++; the fuzz run is skipped" >&2
  fi
fi

if [ "$soak" != 0 ]; then
  # In the ASan + UBSan build, so "nothing leaks" is checked for the whole run.
  echo "== test: soak, $soak messages (debug, ASan + UBSan)"
  DROCE_SOAK_MESSAGES=$soak meson test -C build/debug rocev2_engine_soak --print-errorlogs --no-rebuild \
    --timeout-multiplier 40 || status=1
fi

# The closing line CI reads: every test of every configuration.
/usr/bin/python3 - "${logs[@]}" <<'PY'
import json, sys
counts = {"passed": 0, "failed": 0, "skipped": 0}
for path in sys.argv[1:]:
    try:
        lines = open(path).read().splitlines()
    except OSError:
        continue
    for line in lines:
        r = json.loads(line).get("result")
        if r in ("OK", "EXPECTEDFAIL"):
            counts["passed"] += 1
        elif r == "SKIP":
            counts["skipped"] += 1
        else:
            counts["failed"] += 1
print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
PY
exit $status
