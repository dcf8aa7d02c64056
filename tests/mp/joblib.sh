#!/usr/bin/env bash
# joblib.sh - sourced by the tests that run a job and read its ranks' logs
# (frames_lib.sh, p2p_paths.sh), with their WEFTRUN BIN NP arguments: a
# scratch folder $T (removed at exit), fail (counts a failed check), count
# PATTERN RANK [RUN] (a rank's stderr lines matching PATTERN, in run folder
# RUN, default out), finish NAME (exit 1 if any check failed).
set -u
WR=$1
BIN=$2
NP=$3
T=$(mktemp -d "${TMPDIR:-/tmp}/weft_job.XXXXXX")
trap 'rm -rf "$T"' EXIT
FAILS=0
fail() {
  echo "FAIL: $*"
  FAILS=$((FAILS + 1))
}
count() { grep -c "$1" "$T/${3:-out}/rank.$2/stderr"; }
finish() {
  [ "$FAILS" -eq 0 ] && echo "PASS: $1 np$NP"
  exit $((FAILS > 0))
}
