#!/usr/bin/env bash
# droced's USDT probes (rocev2/probes.h) are in its ELF notes, as perf, bpftrace and SystemTap
# read them: every probe of the list, provider "droce", with its number of arguments.
#
#   droced_probes_test.sh DROCED HAVE_SDT
#
# HAVE_SDT is "yes" when the build found <sys/sdt.h>; with "no" the probes are compiled out and
# the test skips (77), as it does without readelf (binutils).
set -uo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 DROCED HAVE_SDT" >&2
  exit 2
fi
droced=$1
skip() { echo "SKIP: $*"; exit 77; }
[ "$2" = yes ] || skip "built without <sys/sdt.h> (Debian package systemtap-sdt-dev): no probes"
command -v readelf >/dev/null || skip "readelf not installed (Debian package binutils)"

# "provider name arguments" for each stapsdt note: readelf -n prints, per note,
#   Provider: droce / Name: qp_state / Location: ... / Arguments: 4@%eax 4@%edx 4@%ecx
notes=$(readelf -n "$droced" | awk '
  /^ *Provider:/ { p = $2 }
  /^ *Name:/ { n = $2 }
  /^ *Arguments:/ { print p, n, NF - 1 }' | sort -u)

fail=0
for want in "qp_state 3" "retransmit 2" "nak_sent 3" "nak_received 3" "rnr_nak_sent 2" "rnr_nak_received 2" \
            "retry_exceeded 1" "rnr_retry_exceeded 1" "cnp_sent 2" "cnp_received 1" "rate_change 3" \
            "queue_mark 3" "queue_drop 3" "odp_page_wait 2"; do
  if grep -qx "droce $want" <<<"$notes"; then
    echo "ok: droce:${want% *} with ${want#* } arguments"
  else
    echo "FAIL: no probe droce:${want% *} with ${want#* } arguments in $droced's notes"
    fail=1
  fi
done
if [ "$fail" -ne 0 ]; then
  echo "--- the stapsdt notes found (provider name arguments):"
  echo "$notes"
fi
exit "$fail"
