#!/usr/bin/env bash
# OpenMPI 4.1 over droce with pml ucx and osc ucx: two ranks, one on each of two droce hosts (two
# droced on droce's same-host link), each rank started through `droce exec` of its host, UCX
# limited to droce's verbs transports (so no shared-memory path can carry the data):
#   1. UCX_TLS=rc_verbs,ud_verbs,self: NetPIPE's integrity check (NPopenmpi -i: every message's
#      bytes compared with what was sent) from 1 byte to 8 MiB, and mpi_check (point-to-point,
#      collectives, one-sided; every result checked), also with both ranks on host A (one
#      droced's loopback);
#   2. UCX_TLS=ud_verbs,self (UD's reliability is UCX's own) with both droced discarding 1 % of
#      the frames they receive (--drop-rate 1): mpi_check again, and NetPIPE's check up to 1 MiB.
#
#   mpi_test.sh DROCE DROCED PAIR_LIB MPI_CHECK
#
# Asserts each run's exit status, mpi_check's "0 failures", that NetPIPE reached its last size
# and every size passed, that the frames crossed droce (droced B's rx_frames grew; with loss, the
# fault rule's dropped > 0), and no UCX error or warning line. Skips (77) without mpirun
# (openmpi-bin), NPopenmpi (netpipe-openmpi) or a built MPI_CHECK (libopenmpi-dev at build time).
# NetPIPE's -i runs a few repeats per size, where its timing mode runs each size for about a
# second: the integrity check asserts more and takes 10 s where the timing took 150 s.
set -uo pipefail

if [ $# -ne 4 ]; then
  echo "usage: $0 DROCE DROCED PAIR_LIB MPI_CHECK" >&2
  exit 2
fi
droce=$(realpath "$1")
droced=$(realpath "$2")
pair_lib=$(realpath "$3")
mpi_check=$4

skip() { echo "SKIP: $*"; exit 77; }
command -v mpirun >/dev/null || skip "mpirun not installed (Debian package openmpi-bin)"
command -v NPopenmpi >/dev/null || skip "NPopenmpi not installed (Debian package netpipe-openmpi)"
[ -x "$mpi_check" ] || skip "mpi_check was not built (Debian package libopenmpi-dev when meson configured)"
mpi_check=$(realpath "$mpi_check")

tmp=$(mktemp -d /tmp/droce-mpi-test.XXXXXX)
cd "$tmp" || exit 1  # NetPIPE writes np.out where it runs
fail=0
# shellcheck source=scripts/lib/droced-pair.sh
. "$pair_lib"
on_exit rm -rf "$tmp"
on_exit cd /
on_exit droced_pair_stop
on_exit kill_jobs TERM

# mpirun as root needs these; harmless otherwise.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Its session directories under the test's own folder, not /tmp/ompi.HOST.UID.
export OMPI_MCA_orte_tmpdir_base=$tmp
# Keep OpenMPI to UCX (no TCP/shared-memory BTLs, no hcoll).
mca=(--mca pml ucx --mca osc ucx --mca btl self --mca coll '^hcoll')

stat_of() { "$droce" counters --json --socket "$1" | tr ',{}' '\n\n\n' | sed -n "s/^\"$2\":\([0-9]*\)$/\1/p"; }

# mpi2 NAME TLS TIMEOUT PROGRAM ARGS...: rank 0 on host a, rank 1 on host b (both on a, through
# droced A's loopback, when RANK1_HOST=a).
mpi2() {
  local name=$1 tls=$2 limit=$3 h1=${RANK1_HOST:-b}
  shift 3
  local env=(-x "UCX_TLS=$tls" -x UCX_NET_DEVICES=droce0:1 -x UCX_WARN_UNUSED_ENV_VARS=n)
  local log=$tmp/$name.log rc=0
  local before
  local sock=$DROCE_B_SOCK counter=rx_frames
  [ "$h1" = b ] || { sock=$DROCE_A_SOCK; counter=loopback_frames; }
  before=$(stat_of "$sock" "$counter")
  timeout "$limit" mpirun --oversubscribe "${mca[@]}" \
    -np 1 "${env[@]}" "$droce" exec --run-dir "$tmp/hosts/a" -- "$@" : \
    -np 1 "${env[@]}" "$droce" exec --run-dir "$tmp/hosts/$h1" -- "$@" >"$log" 2>&1 || rc=$?
  local after
  after=$(stat_of "$sock" "$counter")
  local why=""
  [ "$rc" -eq 0 ] || why+=" exit $rc;"
  [ "${after:-0}" -gt "${before:-0}" ] || why+=" no frame crossed droce ($counter $before -> $after);"
  if grep -qE 'UCX +(ERROR|WARN)' "$log"; then why+=" UCX complained;"; fi
  RESULT_LOG=$log
  if [ -n "$why" ]; then
    echo "FAIL: $name:$why"
    tail -25 "$log"
    fail=1
    return 1
  fi
  return 0
}

expect_line() {  # expect_line NAME REGEX: the last run's log has a line matching REGEX
  if grep -qE "$2" "$RESULT_LOG"; then
    echo "ok: $1: $(grep -E "$2" "$RESULT_LOG" | tail -1 | tr -s ' ')"
  else
    echo "FAIL: $1: no line matching '$2'"
    tail -25 "$RESULT_LOG"
    fail=1
  fi
}

# expect_netpipe NAME LAST: the last run was NetPIPE's integrity check (-i: every message's bytes
# compared with what was sent), it reached LAST bytes and no size failed.
expect_netpipe() {
  local bad
  bad=$(grep -cE 'bytes +[0-9]+ times -->' "$RESULT_LOG" | tr -d ' ')
  bad=$(( bad - $(grep -cE 'bytes +[0-9]+ times --> +Integrity check passed' "$RESULT_LOG") ))
  if [ "$bad" -ne 0 ] || grep -qi 'integrity check failed' "$RESULT_LOG"; then
    echo "FAIL: $1: $bad sizes did not pass the integrity check"
    grep -iE 'integrity|bytes +[0-9]+ times' "$RESULT_LOG" | grep -vi 'check passed' | head -10
    fail=1
    return
  fi
  expect_line "$1" "^ *[0-9]+: +$2 bytes +[0-9]+ times --> +Integrity check passed"
}

# ---- 1. rc_verbs + ud_verbs ---------------------------------------------------------------
droced_pair_start "$(dirname "$droced")" "$tmp/hosts" --mtu 9000 || exit 1
if mpi2 netpipe.rc rc_verbs,ud_verbs,self 600 NPopenmpi -i -u 8388609; then
  expect_netpipe "NetPIPE's integrity check over rc_verbs, 1 B to 8 MiB" 8388609
fi
if mpi2 mpi_check.rc rc_verbs,ud_verbs,self 300 "$mpi_check"; then
  expect_line "mpi_check over rc_verbs" '^mpi_check: [0-9]+ checks, 0 failures$'
fi
if RANK1_HOST=a mpi2 mpi_check.rc.loopback rc_verbs,ud_verbs,self 300 "$mpi_check"; then
  expect_line "mpi_check over rc_verbs, both ranks on host A (its loopback)" '^mpi_check: [0-9]+ checks, 0 failures$'
fi
droced_pair_stop

# ---- 2. ud_verbs alone, 1 % of frames lost ----------------------------------------------------
droced_pair_start "$(dirname "$droced")" "$tmp/hosts" --mtu 9000 --drop-rate 1 || exit 1
if mpi2 mpi_check.ud.loss ud_verbs,self 600 "$mpi_check"; then
  expect_line "mpi_check over ud_verbs with 1 % loss" '^mpi_check: [0-9]+ checks, 0 failures$'
fi
if mpi2 netpipe.ud.loss ud_verbs,self 600 NPopenmpi -i -u 1048577; then
  expect_netpipe "NetPIPE's integrity check over ud_verbs with 1 % loss, to 1 MiB" 1048577
fi
faults_dropped() { "$droce" counters --json --socket "$1" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["faults"]["dropped"])'; }
lost=$(( $(faults_dropped "$DROCE_A_SOCK") + $(faults_dropped "$DROCE_B_SOCK") ))
if [ "$lost" -gt 0 ]; then
  echo "ok: the link lost $lost frames on the way"
else
  echo "FAIL: --drop-rate 1 lost no frame"
  fail=1
fi
droced_pair_stop

exit "$fail"
