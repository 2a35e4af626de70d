#!/usr/bin/env bash
# deadline.sh SECONDS COMMAND [ARGS...]: timeout(1) for the real-client suites, which also says
# where a stuck program was. COMMAND runs as a child; if it is still running after SECONDS, every
# thread's stack of it and of its descendants goes to stderr (gdb, when installed; else each
# thread's kernel wait channel), then it gets SIGTERM (SIGKILL 5 s later) and this exits 124, as
# timeout(1) does. Otherwise this exits with COMMAND's status.
#
# deadline.sh --show LOG: the last 15 lines of a program's output LOG before what this printed
# into it, then all of that (the stacks).
set -u

if [ "${1:-}" = "--show" ] && [ $# -eq 2 ]; then
  sed '/^=== deadline:/,$d' "$2" | tail -15
  sed -n '/^=== deadline:/,$p' "$2"
  exit 0
fi

if [ $# -lt 2 ]; then
  echo "usage: $0 SECONDS COMMAND [ARGS...]" >&2
  exit 2
fi
secs=$1
shift

"$@" &
child=$!

tree() {  # tree PID: PID and its descendants
  echo "$1"
  local c
  for c in $(pgrep -P "$1"); do tree "$c"; done
}

stacks() {  # stacks PID...
  local p
  for p in "$@"; do
    [ -r "/proc/$p/cmdline" ] || continue
    echo "=== deadline: stacks of pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline")"
    if command -v gdb >/dev/null; then
      # The program may run under droce exec's preloads; gdb itself need not.
      env -u LD_PRELOAD timeout 60 gdb -q -batch -nx -p "$p" -ex 'thread apply all bt' 2>&1 |
        grep -Ev '^\[(New|Thread|Inferior)|^Using host libthread_db|No such file or directory\.$' || true
    else
      local t
      for t in /proc/"$p"/task/*; do
        echo "thread ${t##*/} ($(cat "$t/comm" 2>/dev/null)): waits in $(cat "$t/wchan" 2>/dev/null)"
      done
    fi
  done
}

sleep "$secs" &
timer=$!
# Stopped from outside (the suite's cleanup), as timeout(1): the command goes too.
trap 'kill -TERM "$child" "$timer" 2>/dev/null; exit 143' TERM INT HUP
# Whichever ends first (bash >= 5.1 names it in $ended).
ended=""
wait -n -p ended "$child" "$timer"
status=$?
if [ "$ended" = "$child" ]; then
  kill "$timer" 2>/dev/null
  exit "$status"
fi

mapfile -t pids < <(tree "$child")
echo "=== deadline: $* still running after $secs s" >&2
stacks "${pids[@]}" >&2
kill -TERM "${pids[@]}" 2>/dev/null
for _ in $(seq 25); do
  kill -0 "$child" 2>/dev/null || break
  sleep 0.2
done
kill -KILL "${pids[@]}" 2>/dev/null
wait "$child" 2>/dev/null
exit 124
