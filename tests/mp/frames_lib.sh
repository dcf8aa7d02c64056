#!/usr/bin/env bash
# frames_lib.sh - sourced by groups_frames.sh and steps_frames.sh (with
# their WEFTRUN BIN NP arguments): runs "BIN --frames" on NP ranks with the
# coordinator's debug log in $T/out/rank.R/stderr; fail counts a failed
# check, count PATTERN RANK counts a rank's log lines, finish NAME ends the
# script (exit 1 if any check failed).
set -u
WR=$1
BIN=$2
NP=$3
T=$(mktemp -d "${TMPDIR:-/tmp}/weft_frames.XXXXXX")
trap 'rm -rf "$T"' EXIT
FAILS=0
fail() {
  echo "FAIL: $*"
  FAILS=$((FAILS + 1))
}
count() { grep -c "$1" "$T/out/rank.$2/stderr"; }
finish() {
  [ "$FAILS" -eq 0 ] && echo "PASS: $1 np$NP"
  exit $((FAILS > 0))
}
WEFT_LOG_LEVEL=debug WEFT_LOG_SUBSYS=coord "$WR" -np "$NP" --timeout 100 --output-filename "$T/out" "$BIN" --frames ||
  fail "the job failed (exit $?)"
