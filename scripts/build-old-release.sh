#!/usr/bin/env bash
# Builds an earlier Ferry release (a commit of this repository) for the version-skew test
# (test/version-skew.test.ts): `ferry relay` of that release, run beside this one.
#
#   scripts/build-old-release.sh [COMMIT]    prints the directory of the built release
#
# The tree comes from `git archive` (the commit's files, as a worktree of it would hold them,
# without registering a worktree in a repository others may share), then `npm ci` and
# `tsc --build apps/relay`. Built once per commit and kept under
# ${FERRY_OLD_RELEASE_CACHE:-~/.cache/ferry/old-releases}/<commit>; a second run only prints it.
# .ci/run builds it before the tests, so the test finds it ready; the test builds it itself
# when it is missing. Needs the commit in the clone's history (a shallow clone: git fetch --unshallow).
set -euo pipefail
cd "$(dirname "$0")/.."
# The release before relays reported their release and honoured the schema's relay floor
# (outbox migration 000013): main at a7099ef, with leases (000010) and operator actions (000012).
commit="${1:-a7099ef1ac38f783b6707948f4167873f387bf71}"
full=$(git rev-parse --verify --quiet "${commit}^{commit}") || {
  echo "commit $commit is not in this clone's history: git fetch --unshallow (or fetch it), then run again" >&2
  exit 1
}
cache="${FERRY_OLD_RELEASE_CACHE:-${HOME:-/root}/.cache/ferry/old-releases}"
dir="$cache/$full"
if [ -f "$dir/.built" ]; then
  echo "$dir"
  exit 0
fi
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
started=$(date +%s)
git archive "$full" | tar -x -C "$tmp"
(cd "$tmp" && npm ci --no-audit --no-fund --loglevel=error >&2 && npx tsc --build apps/relay >&2)
echo "built ferry at ${full:0:7} in $(($(date +%s) - started)) s" >&2
touch "$tmp/.built"
# Another build of the same commit may have finished first: keep that one.
mv -T "$tmp" "$dir" 2>/dev/null || true
echo "$dir"
