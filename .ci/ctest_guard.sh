#!/usr/bin/env bash
# ctest_guard.sh BUILD LOG - fails a CI run whose ctest passed without running
# what it should have:
#   - fewer tests run than .ci/expected-tests lists for BUILD (a directory
#     that silently registered nothing: Python not found, MPI not built ...);
#   - a test that skipped (exit 77, "Not Run") unless .ci/allowed-skips names
#     it for BUILD, with the reason;
#   - no ctest summary line at all.
# LOG is ctest's output (what `ctest ... | tee LOG` wrote). Prints what it
# counted. Exit 0 when all is as expected, 1 otherwise.
set -u
build=$1
log=$2
here=$(cd "$(dirname "$0")" && pwd)
status=0

summary=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -1)
if [ -z "$summary" ]; then
  echo "ctest_guard [$build]: no ctest summary in $log"
  exit 1
fi
total=$(echo "$summary" | sed -E 's/.* out of ([0-9]+).*/\1/')
want=$(awk -v b="$build" '$1 == b {print $2}' "$here/expected-tests")
if [ -z "$want" ]; then
  echo "ctest_guard [$build]: .ci/expected-tests has no line for this build"
  status=1
elif [ "$total" -lt "$want" ]; then
  echo "ctest_guard [$build]: $total tests ran, expected at least $want (.ci/expected-tests): tests were not registered"
  status=1
fi

# Skipped tests: ctest lists them after "The following tests did not run:"
# as "<tab> N - name (Skipped)" (or "(Disabled)").
skipped=$(awk '/^The following tests did not run:/ {on = 1; next} on && /^[[:space:]]+[0-9]+ - / {print $3} on && !/^[[:space:]]+[0-9]+ - / {on = 0}' "$log")
nskip=0
for t in $skipped; do
  nskip=$((nskip + 1))
  ok=0
  while read -r b pat reason; do
    case $b in '' | '#'*) continue ;; esac
    if [[ $build =~ ^($b)$ ]] && [[ $t =~ ^($pat)$ ]]; then
      ok=1
      echo "ctest_guard [$build]: $t skipped (allowed: $reason)"
      break
    fi
  done <"$here/allowed-skips"
  if [ $ok = 0 ]; then
    echo "ctest_guard [$build]: $t skipped, and .ci/allowed-skips does not allow it in this build"
    status=1
  fi
done
echo "ctest_guard [$build]: $total tests ran (at least ${want:-?} expected), $nskip skipped"
exit $status
