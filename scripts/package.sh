#!/usr/bin/env bash
# Builds the Debian packages rlx-rank and rlx-cluster from this tree
# (debian/, dpkg-buildpackage -us -uc -b) in a copy of it under OUT_DIR, so
# the tree itself stays clean, then checks them with lintian: any error
# fails, warnings are printed. `./rlx package` runs it after scripts/deps.sh.
# Usage: scripts/package.sh [OUT_DIR]     (default: build-deb)
# Prints the paths of the two .deb files on its last line.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(realpath -m "${1:-$SRC/build-deb}")
fail () { echo "package: $*" >&2; exit 1; }

for tool in dpkg-buildpackage dpkg-parsechangelog dh lintian; do
  command -v "$tool" >/dev/null || fail "$tool is missing: run bash scripts/deps.sh (or ./rlx package)"
done
version=$(dpkg-parsechangelog -l "$SRC/debian/changelog" -S Version)
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
meson_version=$(sed -n "s/^  version: '\([^']*\)',$/\1/p" "$SRC/meson.build")
[[ "$version" == "$meson_version" ]] ||
  fail "debian/changelog says $version but meson.build says $meson_version: add a changelog entry (dch -v $meson_version)"

# The copy: what git would commit (tracked and untracked files, not the
# ignored build trees); a tree without git is copied whole, less build*/.
TREE=$OUT/rlx-cluster-$version
rm -rf "$TREE" "$OUT"/*.deb "$OUT"/*.changes "$OUT"/*.buildinfo
mkdir -p "$TREE"
if git -C "$SRC" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git -C "$SRC" ls-files -z -co --exclude-standard |
    (cd "$SRC" && tar --null --ignore-failed-read -T - -cf - 2>/dev/null) | tar -xf - -C "$TREE"
else
  tar -C "$SRC" --exclude='./build*' --exclude=./.git -cf - . | tar -xf - -C "$TREE"
fi

# debhelper gives the build a HOME of its own: name the compiler cache
# explicitly so rebuilds (the same path each time) are cache hits.
if command -v ccache >/dev/null; then
  CCACHE_DIR=${CCACHE_DIR:-$(ccache -k cache_dir)}
  export CCACHE_DIR
fi
export DEB_BUILD_OPTIONS=${DEB_BUILD_OPTIONS:-parallel=$(nproc)}
log=$OUT/dpkg-buildpackage.log
echo "package: dpkg-buildpackage -us -uc -b in $TREE (log: $log)" >&2
if ! (cd "$TREE" && dpkg-buildpackage -us -uc -b) >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  fail "dpkg-buildpackage failed (the whole log: $log)"
fi

changes=$OUT/rlx-cluster_${version}_$arch.changes
tags=$(lintian --pedantic "$changes" 2>&1 | grep -v '^running with root privileges' || true)
if [[ -n "$tags" ]]; then
  echo "package: lintian says:" >&2
  echo "$tags" >&2
fi
if grep -q '^E:' <<<"$tags"; then
  fail "lintian reports errors"
fi
echo "$OUT/rlx-rank_${version}_$arch.deb $OUT/rlx-cluster_${version}_$arch.deb"
