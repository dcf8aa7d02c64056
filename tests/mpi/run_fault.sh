#!/usr/bin/env bash
# run_fault.sh NP MPIRUN [mpirun args...] -- PROGRAM [args...] - runs
# tests/mp's mp_fault under mpirun: rank 1 SIGKILLs itself in the middle of
# a large allreduce. mpirun may exit non-zero by its own rules (a rank
# ended without MPI_Finalize), so the verdict is the output: every survivor
# saw the collective fail naming rank 1 and finished with no failure, the
# killer died as planned, and mpirun ended (ctest's timeout catches a hang).
set -uo pipefail
np=$1
shift
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$@" >"$out" 2>&1
rc=$?
cat "$out"
ok=1
grep -q "^PASS rank 1: killed itself with SIGKILL as planned" "$out" || { echo "run_fault: rank 1 did not die as planned"; ok=0; }
for ((r = 0; r < np; r++)); do
  [ "$r" = 1 ] && continue
  grep -q "^PASS rank $r: survivor: 64 MiB allreduce fails naming rank 1" "$out" ||
    { echo "run_fault: rank $r did not see the allreduce fail naming rank 1"; ok=0; }
  grep -q "^DONE rank $r: 0 failure(s)" "$out" || { echo "run_fault: rank $r did not finish cleanly"; ok=0; }
done
if grep -q "^FAIL" "$out"; then echo "run_fault: failures reported"; ok=0; fi
[ $ok = 1 ] && { echo "run_fault: passed (mpirun exit status $rc)"; exit 0; }
exit 1
