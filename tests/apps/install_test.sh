#!/usr/bin/env bash
# scripts/install.sh into a staging root: every file where libibverbs and a shell look for it,
# the .driver file libibverbs reads, and --uninstall takes it all away again.
#   install_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$1
build=$(realpath "$2")
stage=$(mktemp -d /tmp/droce-install.XXXXXX)
trap 'rm -rf "$stage"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

"$src/scripts/install.sh" --build "$build" --root "$stage" --no-build || { echo "FAIL: install.sh"; exit 1; }
for f in usr/local/bin/droced usr/local/bin/droce usr/local/bin/droce-selftest etc/libibverbs.d/droce.driver \
         etc/systemd/system/droced@.service usr/lib/x86_64-linux-gnu/droce/droce_xdp.o; do
  [ -s "$stage/$f" ] || bad "missing $f"
done
for f in usr/local/bin/droced usr/local/bin/droce; do [ -x "$stage/$f" ] || bad "$f not executable"; done
ls "$stage"/usr/lib/x86_64-linux-gnu/libibverbs/libdroce-rdmav*.so >/dev/null 2>&1 || bad "no provider module"
[ "$(cat "$stage/etc/libibverbs.d/droce.driver")" = "driver droce" ] || bad "droce.driver: $(cat "$stage/etc/libibverbs.d/droce.driver")"
"$stage/usr/local/bin/droce" help >/dev/null || bad "the installed droce does not run"

grep -q '^ExecStart=/usr/local/bin/droced --netdev %i ' "$stage/etc/systemd/system/droced@.service" || bad "the unit does not start droced --netdev %i"
"$src/scripts/install.sh" --build "$build" --root "$stage" --no-build --netdev eth9 >/dev/null || bad "install --netdev"
[ -f "$stage/etc/droce/droced@eth9.conf" ] || bad "no /etc/droce/droced@eth9.conf"
rm -rf "$stage/etc/droce"  # the operator's settings stay on --uninstall; the test removes its own
"$src/scripts/install.sh" --root "$stage" --uninstall >/dev/null || bad "uninstall"
left=$(find "$stage" -type f | sed "s|$stage/||")
[ -z "$left" ] || bad "left after --uninstall: $left"
[ $fail -eq 0 ] && echo "install and uninstall ok"
exit $fail
