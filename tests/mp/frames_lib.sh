#!/usr/bin/env bash
# frames_lib.sh - sourced by groups_frames.sh and steps_frames.sh (with
# their WEFTRUN BIN NP arguments): runs "BIN --frames" on NP ranks with the
# coordinator's debug log in $T/out/rank.R/stderr (joblib.sh: fail, count,
# finish).
. "$(dirname "${BASH_SOURCE[0]}")/joblib.sh"
WEFT_LOG_LEVEL=debug WEFT_LOG_SUBSYS=coord "$WR" -np "$NP" --timeout 100 --output-filename "$T/out" "$BIN" --frames ||
  fail "the job failed (exit $?)"
