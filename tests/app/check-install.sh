#!/usr/bin/env bash
# meson install puts the app where a desktop finds it: the executable, the
# desktop file (valid, its Exec and Icon resolvable), the icons, the
# metainfo, the schema (compilable) and the German catalogue; and rlx-rank's
# man page and systemd unit (running the installed rlx-rank).
# Usage: check-install.sh BUILD_DIR PREFIX APP_ID
set -euo pipefail
BUILD=$1 PREFIX=$2 APP_ID=$3
DEST=$(mktemp -d)
trap 'rm -rf "$DEST"' EXIT
meson install -C "$BUILD" --no-rebuild --quiet --destdir "$DEST" >/dev/null
ROOT="$DEST$PREFIX"
fail () { echo "check-install: $*" >&2; exit 1; }
need () { [[ -e "$ROOT/$1" ]] || fail "meson install did not install $PREFIX/$1"; }

need bin/rlx-cluster
need bin/rlx-rank
need share/applications/$APP_ID.desktop
need share/metainfo/$APP_ID.metainfo.xml
need share/glib-2.0/schemas/$APP_ID.gschema.xml
need share/icons/hicolor/scalable/apps/$APP_ID.svg
need share/icons/hicolor/symbolic/apps/$APP_ID-symbolic.svg
need share/locale/de/LC_MESSAGES/rlx-cluster.mo
need share/man/man1/rlx-rank.1
need share/man/man1/rlx-cluster.1
need lib/systemd/system/rlx-rank@.service
grep -q "^ExecStart=$PREFIX/bin/rlx-rank join --invite-file " "$ROOT/lib/systemd/system/rlx-rank@.service" \
  || fail "rlx-rank@.service does not run $PREFIX/bin/rlx-rank join --invite-file"

desktop="$ROOT/share/applications/$APP_ID.desktop"
desktop-file-validate "$desktop" || fail "the installed desktop file is not valid"
exec_bin=$(sed -n 's/^Exec=\([^ ]*\).*/\1/p' "$desktop")
[[ -x "$ROOT/bin/$exec_bin" ]] || fail "Exec=$exec_bin is not in $PREFIX/bin"
icon=$(sed -n 's/^Icon=//p' "$desktop")
[[ -e "$ROOT/share/icons/hicolor/scalable/apps/$icon.svg" ]] || fail "Icon=$icon has no scalable icon"
grep -q '^Name\[de\]=' "$desktop" || fail "the desktop file has no German name"
grep -q "<launchable type=\"desktop-id\">$APP_ID.desktop</launchable>" \
  "$ROOT/share/metainfo/$APP_ID.metainfo.xml" || fail "the metainfo does not launch $APP_ID.desktop"
glib-compile-schemas --strict --targetdir "$DEST" "$ROOT/share/glib-2.0/schemas" \
  || fail "the installed schema does not compile"
keys=$(GSETTINGS_SCHEMA_DIR="$DEST" GSETTINGS_BACKEND=memory gsettings list-keys "$APP_ID") \
  || fail "the installed schema does not define $APP_ID"
grep -qx precision <<<"$keys" || fail "the installed schema of $APP_ID has no precision key"
version=$("$ROOT/bin/rlx-cluster" --version) || fail "the installed rlx-cluster does not run"
[[ "$version" == "rlx-cluster "* ]] || fail "the installed rlx-cluster printed '$version' for --version"
echo "check-install: ok ($(find "$ROOT" -type f | wc -l) files under $PREFIX)"
