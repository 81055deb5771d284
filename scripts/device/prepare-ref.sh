#!/bin/bash
# scripts/device/prepare-ref.sh REF — run HERE after scripts/device/prepare.sh:
# builds a release rlx-rank at git revision REF (in a detached worktree beside
# the checkout's .git, build dir build-release) and puts it in .devcarry-ref/
# (git-ignored), with a wrapper that uses .devcarry's libraries. ab-build.sh
# then measures REF against the checkout's own build in the same call:
#
#   command: bash scripts/device/ab-build.sh    carry: [".devcarry", ".devcarry-ref"]
set -euo pipefail
die () { echo "prepare-ref.sh: $*" >&2; exit 1; }
ref=${1:?usage: prepare-ref.sh REF}
root=$(git rev-parse --show-toplevel) || die "run it inside the checkout"
cd "$root"
[ -d .devcarry/lib ] || die "run scripts/device/prepare.sh first (its libraries are shared)"
exclude=$(git rev-parse --git-path info/exclude)
grep -qxF "/.devcarry-ref/" "$exclude" 2>/dev/null || echo "/.devcarry-ref/" >> "$exclude"
sha=$(git rev-parse --verify "$ref^{commit}") || die "no revision $ref"
wt=$(git rev-parse --git-common-dir)/rlx-ref-$sha
[ -d "$wt" ] || git worktree add --detach "$wt" "$sha" >/dev/null
[ -f "$wt/build-release/build.ninja" ] || meson setup "$wt/build-release" "$wt" --buildtype=release >/dev/null
ninja -C "$wt/build-release" tools/rlx-rank >/dev/null || die "building $ref failed"
rm -rf .devcarry-ref && mkdir -p .devcarry-ref/bin
cp "$wt/build-release/tools/rlx-rank" .devcarry-ref/bin/ && strip .devcarry-ref/bin/rlx-rank
cat > .devcarry-ref/rlx-rank <<'W'
#!/bin/sh
# the reference build's rlx-rank with .devcarry's libraries (prepare-ref.sh)
here=$(cd "$(dirname "$0")" && pwd)
libs=$here/../.devcarry/lib
[ -d "$here/../.devcarry/use" ] && libs=$here/../.devcarry/use
LD_LIBRARY_PATH="$libs" exec "$here/bin/rlx-rank" "$@"
W
chmod +x .devcarry-ref/rlx-rank
echo "ref $sha" > .devcarry-ref/MANIFEST
echo "prepare-ref.sh: .devcarry-ref holds rlx-rank at $sha"
