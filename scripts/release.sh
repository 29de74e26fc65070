#!/usr/bin/env bash
# Cut a release of the template:
#     bash scripts/release.sh VERSION [--skip-tests]
# VERSION is a PEP 440 version without the "v" (0.2.0, 1.0.0rc1); the tag is vVERSION.
# Refuses a dirty tree or an existing tag. CHANGELOG.md must hold the release's entry, with
# its four parts: under "## Unreleased" (moved under a new "## vVERSION" heading) or
# already under "## vVERSION". Runs the suite (scripts/test.sh; --skip-tests is for the
# test of this script), commits the CHANGELOG, and makes the annotated tag vVERSION whose
# message is the entry. Publishing stays a separate step: git push origin HEAD vVERSION.
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
  echo "error: $*" >&2
  exit 1
}
# The lines of CHANGELOG.md under the heading "## $1", up to the next "## " heading.
section() { awk -v heading="## $1" '$0 == heading {on = 1; next} /^## / {on = 0} on' CHANGELOG.md; }
has_entries() { section "$1" | grep -q '[^[:space:]]'; }

[ $# -ge 1 ] || die "usage: bash scripts/release.sh VERSION [--skip-tests]"
version=$1
skip_tests=${2:-}
tag=v$version
[[ $version =~ ^[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?$ ]] \
  || die "$version is not a PEP 440 version such as 0.2.0 or 1.0.0rc1 (no leading v)"
[ -z "$(git status --porcelain)" ] || die "uncommitted changes: commit or stash them first"
if git rev-parse --quiet --verify "refs/tags/$tag" >/dev/null; then
  die "tag $tag exists already: pick the next version"
fi

move=false
if grep -qx "## $tag" CHANGELOG.md; then
  has_entries "$tag" || die "CHANGELOG.md's \"## $tag\" section is empty"
  ! has_entries Unreleased || die "CHANGELOG.md has entries under both \"## Unreleased\" and \"## $tag\": merge them"
else
  has_entries Unreleased || die "nothing to release: CHANGELOG.md has no entries under \"## Unreleased\""
  move=true
fi
entry=$( (if $move; then section Unreleased; else section "$tag"; fi) | sed -e '/./,$!d')
for part in New "On update" Migration Action; do
  grep -qF -- "**$part:**" <<<"$entry" || die "the CHANGELOG entry has no \"**$part:**\" part (see the top of CHANGELOG.md)"
done

if [ "$skip_tests" != --skip-tests ]; then
  bash scripts/test.sh
fi
if $move; then
  awk -v tag="$tag" '{print} $0 == "## Unreleased" {print ""; print "## " tag}' CHANGELOG.md \
    >CHANGELOG.md.new
  mv CHANGELOG.md.new CHANGELOG.md
  git commit --quiet -m "Release $tag" CHANGELOG.md
fi
git tag --annotate "$tag" --message "$tag" --message "$entry"
echo "Tagged $tag. Publish it: git push origin HEAD $tag"
