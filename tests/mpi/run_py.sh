#!/bin/sh
# run_py.sh PYTHON COMMAND... - runs COMMAND (an mpirun of Python) when the
# build has the Python package (PYTHONPATH/weft/_weft*.so) and PYTHON has
# numpy (and pytest, if COMMAND runs it); else exits 77 (ctest: skipped),
# or 1 where skipping is forbidden: WEFT_TESTS_NO_SKIP=1, the default where
# CI is set (CI must run what it claims to test).
py=$1
shift
skip() {
  v=${WEFT_TESTS_NO_SKIP:-}
  [ -n "$v" ] || { [ -n "${CI:-}" ] && [ "${CI:-}" != false ] && v=1; }
  if [ -n "$v" ] && [ "$v" != 0 ]; then
    echo "FAIL: $1, and WEFT_TESTS_NO_SKIP=1 (or CI) forbids skipping"
    exit 1
  fi
  echo "SKIP: $1"
  exit 77
}
ls "$PYTHONPATH"/weft/_weft*.so >/dev/null 2>&1 || skip "the Python package is not built"
"$py" -c "import numpy" 2>/dev/null || skip "$py cannot import numpy"
case "$*" in *pytest*) "$py" -c "import pytest" 2>/dev/null || skip "$py cannot import pytest" ;; esac
exec "$@"
