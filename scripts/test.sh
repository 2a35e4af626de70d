#!/usr/bin/env bash
# droce's test command: installs what is missing, builds the debug
# configuration (AddressSanitizer + UndefinedBehaviorSanitizer), runs every
# test, and beside them (at nice 19) builds the parser fuzzer with clang and runs it for a
# bounded time.
#
# usage: scripts/test.sh [--fresh] [--no-fuzz] [--fuzz-seconds N] [--soak [N]] [-- MESON_TEST_ARGS...]
#   --fresh             run as a machine that never ran it would: every cache (the build
#                       directories, the rdma-core headers, the rxe rig image) in a new empty
#                       folder under /var/tmp, removed afterwards (DROCE_FRESH_KEEP=1 keeps it)
#   DROCE_FUZZ_SECONDS  how long the fuzzer runs (default 60)
#   --soak [N]          also run the full engine soak (N messages, default
#                       1,000,000) under ASan + UBSan; about 9 minutes here
# Caches a normal run keeps: build/ (builds, build/debug/rdma-core-headers), and the rxe rig
# image in $DROCE_RXE_RIG_DIR (default /var/tmp/droce-rxe-rig, about 1 GB; remove it to rebuild).
#
# Ends with a line "N passed, M failed"; exit status non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

fuzz=1
fresh=0
fuzz_seconds=${DROCE_FUZZ_SECONDS:-60}
soak=0
meson_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --fresh) fresh=1 ;;
    --no-fuzz) fuzz=0 ;;
    --fuzz-seconds) fuzz_seconds=$2; shift ;;
    --soak)
      soak=1000000
      if [[ ${2:-} =~ ^[0-9]+$ ]]; then soak=$2; shift; fi ;;
    --) shift; meson_args=("$@"); break ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "scripts/test.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

scripts/install-deps.sh

build=build
if [ "$fresh" = 1 ]; then
  fresh_dir=$(mktemp -d /var/tmp/droce-fresh.XXXXXX)
  build=$fresh_dir/build
  export DROCE_RXE_RIG_DIR=$fresh_dir/rxe-rig
  echo "== --fresh: builds, rdma-core headers and the rxe rig image go to the empty folder $fresh_dir"
  if [ "${DROCE_FRESH_KEEP:-0}" != 1 ]; then
    trap 'rm -rf "$fresh_dir"' EXIT
  fi
fi
# Left over by an earlier run that was killed: the tests make their own of each, so they must
# not find any (a stale droced would answer on their sockets).
if pgrep -x droced >/dev/null 2>&1; then
  echo "scripts/test.sh: warning: droced processes are running ($(pgrep -x droced | tr '\n' ' '));" \
       "the tests start their own on private sockets" >&2
fi

if [ ! -d ../shared/pcaps ]; then
  echo "scripts/test.sh: warning: ../shared/pcaps is missing; the rxe capture tests will skip" >&2
fi

setup() {  # setup DIR ARGS...: configure once, reconfigure when options change
  local dir=$1 out; shift
  if [ -f "$dir/build.ninja" ]; then
    out=$(meson configure "$dir" "$@" 2>&1) || { echo "$out" >&2; echo "scripts/test.sh: configuring $dir failed" >&2; exit 1; }
  else
    out=$(meson setup "$dir" "$@" 2>&1) || { echo "$out" >&2; echo "scripts/test.sh: configuring $dir failed" >&2; exit 1; }
  fi
  # Warnings say what was left out of the build; nobody reads a log they are not shown.
  grep -E '^(WARNING|DEPRECATION):' <<<"$out" >&2 || true
}

# Each step says when it began, so where a run's minutes went can be read from its log.
step() { echo "== $* (at $((SECONDS / 60))m$((SECONDS % 60))s)"; }

status=0
# The rxe rig's guest image (rxe_interop needs it; about 4 minutes on a new machine, mostly
# debootstrap's downloads) builds beside the debug build instead of after it; rxe_interop
# waits on the image's lock if it is not done by then. Its skip reasons come again in the test.
mkdir -p "$build"
step "build: the rxe rig image, in the background (log: $build/rig-image.log)"
tests/interop/rig_image.sh >"$build/rig-image.log" 2>&1 &
rig_image=$!
step "build: debug (ASan + UBSan)"
setup "$build/debug" -Dbuildtype=debug -Db_sanitize=address,undefined -Db_lundef=false -Dprovider=enabled
ninja -C "$build/debug"
# The fuzzer (its clang build, about 70 s of both cores, then its run of fuzz_seconds) goes beside
# the debug tests at the lowest priority: most of those wait on timers, sockets and the rxe rig's
# emulated guest (rxe_interop leaves half the CPU idle), so the fuzzer takes the cores they leave
# instead of two minutes of its own after them. Its run is bounded in time, not in inputs: beside
# the tests it tries fewer. Its output comes after the debug tests'.
fuzz_job=""
if [ "$fuzz" = 1 ] && command -v clang++ >/dev/null; then
  step "fuzz: build (clang, libFuzzer, ASan + UBSan) and ${fuzz_seconds}s run, niced, beside the debug tests (log: $build/fuzz.log)"
  ( CXX=clang++ setup "$build/fuzz" -Dprovider=disabled -Dfuzz=enabled -Dbuildtype=debugoptimized \
      -Db_sanitize=address,undefined -Db_lundef=false -Dfuzz_seconds="$fuzz_seconds" &&
    nice -n 19 ninja -C "$build/fuzz" tests/fuzz/droce_parse_fuzz apps/droce &&
    echo "== fuzz: built (at $((SECONDS / 60))m$((SECONDS % 60))s)" &&
    exec nice -n 19 meson test -C "$build/fuzz" --suite fuzz --print-errorlogs --no-rebuild ) >"$build/fuzz.log" 2>&1 &
  fuzz_job=$!
fi
step "test: debug"
# DPDK's EAL keeps some memory until exit; leaks in droce's own code still fail.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
meson test -C "$build/debug" --print-errorlogs --num-processes 2 "${meson_args[@]}" || status=1
# Done by now unless rxe_interop was not among the tests run; its exit (77: this machine cannot
# run the rig) is the test's to report, not a reason to stop here under set -e.
wait "$rig_image" 2>/dev/null || true

logs=("$build/debug/meson-logs/testlog.json")
if [ -n "$fuzz_job" ]; then
  step "fuzz: waiting for it to finish"
  fuzz_status=0
  wait "$fuzz_job" || fuzz_status=$?
  cat "$build/fuzz.log"
  if [ -f "$build/fuzz/meson-logs/testlog.json" ] && grep -q '^== fuzz: built' "$build/fuzz.log"; then
    logs+=("$build/fuzz/meson-logs/testlog.json")
    [ "$fuzz_status" -eq 0 ] || status=1
  else
    echo "scripts/test.sh: the fuzz build failed (log above: $build/fuzz.log)" >&2
    status=1
  fi
elif [ "$fuzz" = 1 ]; then
  echo "scripts/test.sh: no clang++; the fuzz run is skipped" >&2
fi

if [ "$soak" != 0 ]; then
  # In the ASan + UBSan build, so "nothing leaks" is checked for the whole run.
  step "test: soak, $soak messages (debug, ASan + UBSan)"
  DROCE_SOAK_MESSAGES=$soak meson test -C "$build/debug" rocev2_engine_soak --print-errorlogs --no-rebuild \
    --timeout-multiplier 40 || status=1
fi

# The closing lines CI reads: every test of every configuration, and what did not run and why
# (a test's "SKIP: reason" line, or a passing test's "SKIP (part): reason"): on a machine where
# scripts/install-deps.sh ran as root nothing should be listed there.
/usr/bin/python3 - "${logs[@]}" <<'PY'
import json, sys
counts = {"passed": 0, "failed": 0, "skipped": 0}
unrun = []
for path in sys.argv[1:]:
    try:
        lines = open(path).read().splitlines()
    except OSError:
        continue
    for line in lines:
        t = json.loads(line)
        r, out = t.get("result"), t.get("stdout") or ""
        if r in ("OK", "EXPECTEDFAIL"):
            counts["passed"] += 1
        elif r == "SKIP":
            counts["skipped"] += 1
            why = [l for l in out.splitlines() if l.startswith("SKIP")]
            unrun.append(f"{t['name']}: {why[-1] if why else 'skipped (exit 77)'}")
        else:
            counts["failed"] += 1
        if r != "SKIP":
            unrun += [f"{t['name']}: {l}" for l in out.splitlines() if l.startswith("SKIP (part)")]
for u in unrun:
    print("not run:", u)
print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
PY
echo "== done in $((SECONDS / 60))m$((SECONDS % 60))s"
exit $status
