#!/usr/bin/env bash
# rank.sh - what one rank does in the launcher tests: `bash rank.sh MODE [DIR]`.
# Runs under weftrun, so WEFT_RANK etc. are set. DIR is where pid files go:
# DIR/pid.<rank> (the rank itself) and DIR/child.<rank> (a child it started).
mode=$1
dir=$2
r=${WEFT_RANK:?WEFT_RANK not set}

case $mode in
env) # every variable weftrun sets, plus two the test sets; "<unset>" if missing
  for v in WEFT_RANK WEFT_SIZE WEFT_LOCAL_RANK WEFT_LOCAL_SIZE WEFT_CROSS_RANK WEFT_CROSS_SIZE \
           HOROVOD_RANK HOROVOD_SIZE HOROVOD_LOCAL_RANK HOROVOD_LOCAL_SIZE HOROVOD_CROSS_RANK \
           HOROVOD_CROSS_SIZE WEFT_ADDR WEFT_SECRET WEFT_JOB_ID FOO INHERITED; do
    printf '%s=%s ' "$v" "${!v-<unset>}"
  done
  printf '\n'
  ;;
hosts) # what -H placement sets, and the parent's command line (remote ranks: "sh -s")
  for v in WEFT_RANK WEFT_SIZE WEFT_LOCAL_RANK WEFT_LOCAL_SIZE WEFT_CROSS_RANK WEFT_CROSS_SIZE HOROVOD_CROSS_RANK \
           WEFT_HOSTNAME WEFT_ADDR WEFT_SECRET FOO FWD FAKE_HOST INHERITED; do
    printf '%s=%s ' "$v" "${!v-<unset>}"
  done
  printf 'PARENT=%s\n' "$(tr '\0' ' ' </proc/$PPID/cmdline)"
  ;;
vars) # NAME=value (or NAME=<unset>) for each NAME after the mode, the host, and PARENT as above
  shift
  for v in "$@" FAKE_HOST; do printf '%s=%s ' "$v" "${!v-<unset>}"; done
  printf 'PARENT=%s\n' "$(tr '\0' ' ' </proc/$PPID/cmdline)"
  ;;
biglen) # the length and a checksum of BIG (a large -x value), and the host
  printf 'host=%s len=%s sum=%s\n' "${FAKE_HOST-<unset>}" "${#BIG}" "$(printf '%s' "$BIG" | cksum | cut -d' ' -f1)"
  ;;
lines) # 1000 lines on each stream at full speed, a 150000-byte line, a partial last line
  seq -f "r$r err %g" 1 1000 >&2 &
  seq -f "r$r out %g" 1 1000
  wait
  head -c 150000 /dev/zero | tr '\0' a
  echo
  printf 'r%s tail' "$r"
  ;;
seq) # the same 1000 lines, nothing else (for --no-tag-output)
  seq -f "r$r out %g" 1 1000
  ;;
files) # a little on each stream (for --output-filename)
  echo "out $r"
  echo "err $r" >&2
  ;;
fail_exit) # rank 2 says bye and exits 3; the others sleep (exec: the rank is the sleep)
  echo $$ >"$dir/pid.$r"
  if [ "$r" = 2 ]; then sleep 0.3; echo "rank 2 bye" >&2; exit 3; fi
  exec sleep 60
  ;;
last_words) # rank 1 waits for DIR/go, then says bye and exits 3 at once
  echo $$ >"$dir/pid.$r"
  if [ "$r" = 1 ]; then
    while [ ! -e "$dir/go" ]; do sleep 0.05; done
    echo "rank 1 bye" >&2
    exit 3
  fi
  exec sleep 60
  ;;
fail_exit_stubborn) # rank 2 exits 3; the others and their children ignore SIGTERM
  # (the child does not hold the output pipes: only its process group reaches it)
  if [ "$r" = 2 ]; then echo $$ >"$dir/pid.$r"; sleep 0.3; exit 3; fi
  trap '' TERM
  sleep 60 >/dev/null 2>&1 &
  echo $! >"$dir/child.$r"
  echo $$ >"$dir/pid.$r"
  wait
  ;;
fail_signal) # rank 1 dies by SIGKILL
  echo $$ >"$dir/pid.$r"
  if [ "$r" = 1 ]; then sleep 0.3; kill -KILL $$; fi
  exec sleep 60
  ;;
stubborn) # ignores SIGINT/SIGTERM/SIGHUP, and so does its child (which
  # does not hold the output pipes: only its process group reaches it)
  trap '' INT TERM HUP
  sleep 60 >/dev/null 2>&1 &
  echo $! >"$dir/child.$r"
  echo $$ >"$dir/pid.$r"
  wait
  ;;
sleep) # the rank becomes a plain sleep (default signal handling)
  echo $$ >"$dir/pid.$r"
  exec sleep 60
  ;;
early) # rank 0 exits 0 at once, rank 1 finishes a second later
  if [ "$r" = 1 ]; then sleep 1; echo done; fi
  exit 0
  ;;
leave_child) # starts a process that keeps stdout open, then exits 0
  sleep 60 &
  echo $! >"$dir/child.$r"
  echo "rank $r leaving"
  exit 0
  ;;
*)
  echo "rank.sh: unknown mode '$mode'" >&2
  exit 99
  ;;
esac
