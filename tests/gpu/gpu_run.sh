#!/bin/sh
# gpu_run.sh PROBE... -- COMMAND...: the tests/gpu tests' runner. Runs PROBE
# first: exit 77 means no usable GPU here (no CUDA runtime, no device, torch
# without CUDA) and the test is skipped (ctest SKIP_RETURN_CODE 77), with the
# probe's reason printed; any other failure of the probe fails the test.
# Then runs COMMAND (usually weftrun -np N ...) and exits as it does.
set -u
probe=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  probe="$probe '$1'"
  shift
done
[ $# -gt 0 ] && shift
eval "$probe"
rc=$?
if [ $rc -ne 0 ]; then
  [ $rc -eq 77 ] && echo "gpu_run: skipped (no GPU)"
  exit $rc
fi
exec "$@"
