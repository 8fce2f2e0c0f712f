#!/usr/bin/env bash
# The locking annotations stay checked: clang's -Wthread-safety (with its beta group, which
# checks a declared lock order) must accept accepted.cc and refuse every other snippet here
# with the diagnostic its first line expects. Should common/mutex.h lose an annotation, the
# analysis would go quiet rather than fail; this catches that.
# Usage: check.sh CLANGXX REPO_ROOT. Exit 77 (skipped) where there is no clang.
set -uo pipefail
clangxx=$1
root=$2
here="$root/common/thread_safety"
if ! command -v "$clangxx" >/dev/null; then
  echo "check.sh: no $clangxx: the analysis cannot run here"
  exit 77
fi
compile() { "$clangxx" -std=c++20 -fsyntax-only -Wthread-safety -Wthread-safety-beta -Werror -I"$root" "$1" 2>&1; }

failed=0
if ! out=$(compile "$here/accepted.cc"); then
  echo "FAIL accepted.cc was refused:"; echo "$out"; failed=1
else
  echo "ok   accepted.cc accepted"
fi
for snippet in "$here"/*.cc; do
  name=$(basename "$snippet")
  [ "$name" = accepted.cc ] && continue
  expected=$(sed -n '1s|^// expect: ||p' "$snippet")
  if [ -z "$expected" ]; then echo "FAIL $name has no '// expect:' first line"; failed=1; continue; fi
  if out=$(compile "$snippet"); then
    echo "FAIL $name was accepted; expected: $expected"; failed=1
  elif ! grep -qF -- "$expected" <<<"$out"; then
    echo "FAIL $name was refused for another reason; expected: $expected"; echo "$out"; failed=1
  else
    echo "ok   $name refused: $expected"
  fi
done
exit $failed
