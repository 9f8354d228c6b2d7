#!/usr/bin/env bash
# scripts/check_docs.py must pass a clean tree and report each planted problem, so that
# docs.render_and_links cannot pass by checking nothing.
# Usage: planted_errors.sh REPO_ROOT
set -euo pipefail
check="$1/scripts/check_docs.py"
tree="$(mktemp -d)"
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree/repo/docs"
cat >"$tree/repo/docs/GOOD.md" <<'MD'
# Good page

| area | what |
|---|---|
| core | `a\|b` types |

See [the heading](#good-page), [the other page](../README.md#a-title) and [docs](./).
MD
cat >"$tree/repo/README.md" <<'MD'
# A title
MD
python3 "$check" --root "$tree/repo" || { echo "FAIL: a clean tree was refused"; exit 1; }

cat >"$tree/repo/README.md" <<'MD'
# A title

| area | what |
|---|---|
| core | a row broken
across two lines |
| io | one | too many |

[outside](../outside.md), [missing](docs/NONE.md), [bad anchor](docs/GOOD.md#no-such-heading),
[registry](https://pypi.org/project/x/).
MD
touch "$tree/outside.md"
status=0
out="$(python3 "$check" --root "$tree/repo" 2>&1)" || status=$?
echo "$out"
[[ $status -eq 1 ]] || { echo "FAIL: exit status $status, expected 1"; exit 1; }
for want in "README.md:5: table: row does not start and end" "README.md:6: table: row does not start and end" \
            "README.md:7: table: 3 cells, the header has 2" "../outside.md leaves the repository" \
            "docs/NONE.md: no such file" "no heading with id 'no-such-heading'" "host: https://pypi.org"; do
  grep -qF -- "$want" <<<"$out" || { echo "FAIL: not reported: $want"; exit 1; }
done
echo "planted_errors: every planted problem reported"
