#!/bin/sh
# run_py.sh PYTHON COMMAND... - runs COMMAND (an mpirun of Python) when the
# build has the Python package (PYTHONPATH/weft/_weft*.so) and PYTHON has
# numpy (and pytest, if COMMAND runs it); else exits 77 (ctest: skipped).
py=$1
shift
ls "$PYTHONPATH"/weft/_weft*.so >/dev/null 2>&1 || { echo "SKIP: the Python package is not built"; exit 77; }
"$py" -c "import numpy" 2>/dev/null || { echo "SKIP: $py cannot import numpy"; exit 77; }
case "$*" in *pytest*) "$py" -c "import pytest" 2>/dev/null || { echo "SKIP: $py cannot import pytest"; exit 77; } ;; esac
exec "$@"
