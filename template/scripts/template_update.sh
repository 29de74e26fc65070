#!/usr/bin/env bash
# Managed by the template; local edits are merged on update.
# Update the project from its copier template, on a clean git tree:
#     bash scripts/template_update.sh [DESCRIPTION_FILE]
# runs `copier update --trust --defaults` (to the template's newest release; to its default
# branch while it has none) and exits 1, naming the files, when the update left conflict
# markers or .rej files. DESCRIPTION_FILE (default: standard output) gets a pull-request
# description: both versions, the template's CHANGELOG lines between them, the files changed.
# .github/workflows/template-update.yml runs it weekly; by hand it does the same.
set -euo pipefail
cd "$(dirname "$0")/.."
description=${1:-/dev/stdout}

answer() { sed -n "s/^$1: *//p" .copier-answers.yml | tr -d "\"'"; }

if [ -n "$(git status --porcelain)" ]; then
  echo "error: uncommitted changes: commit or stash them first (copier update needs a clean tree)." >&2
  exit 1
fi
old=$(answer _commit)
copier update --trust --defaults --conflict inline >&2
new=$(answer _commit)
if [ -z "$(git status --porcelain)" ]; then
  echo "Already up to date with the template ($old)." >&2
  exit 0
fi

# Conflict markers as copier writes them (a line starting with 7 of < or > and a space).
conflicts=$(git grep --untracked -lE '^(<{7}|>{7}) ' -- ':!*.rej' || true)
rejects=$(git ls-files --others --exclude-standard -- '*.rej')
if [ -n "$conflicts$rejects" ]; then
  echo "error: the update from $old to $new conflicts with local edits in:" >&2
  printf '  %s\n' $conflicts $rejects >&2
  echo "Resolve them (keep what you want, delete the markers and .rej files) and commit." >&2
  exit 1
fi

# The template's CHANGELOG lines added between the two versions, from a clone of it.
src=$(answer _src_path)
case $src in
  gh:*) src="https://github.com/${src#gh:}.git" ;;
  gl:*) src="https://gitlab.com/${src#gl:}.git" ;;
  git+*) src=${src#git+} ;;
esac
clone=$(mktemp -d)
trap 'rm -rf "$clone"' EXIT
changelog="(could not read the template's CHANGELOG from $src)"
if git clone --quiet "$src" "$clone" 2>/dev/null; then
  changelog=$(git -C "$clone" diff "$old" "$new" -- CHANGELOG.md | sed -n -e '/^+++ /d' -e 's/^+//p')
fi
{
  echo "Updates the project from its template, $old to $new (\`copier update --trust --defaults\`)."
  echo
  echo "## The template's CHANGELOG since $old"
  echo
  echo "${changelog:-(no CHANGELOG entries between these versions)}"
  echo
  echo "## Files changed"
  echo
  echo '```'
  git status --short
  echo '```'
} > "$description"
