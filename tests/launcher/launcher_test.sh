#!/usr/bin/env bash
# launcher_test.sh - end-to-end tests of weftrun: `launcher_test.sh WEFTRUN CASE`.
# Each case starts real jobs (ranks are tests/launcher/rank.sh in bash) and
# checks exit codes, output, messages, timing and that no process is left.
# Prints "FAIL: ..." and exits 1 on the first failed check.
set -u
WR=$1
CASE=$2
HERE=$(cd "$(dirname "$0")" && pwd)
RANK="$HERE/rank.sh"
T=$(mktemp -d "${TMPDIR:-/tmp}/weftrun_test.XXXXXX")
trap 'rm -rf "$T"' EXIT

# fail exits; in a subshell it would end only the subshell, so it also
# leaves a mark that the end looks for
fail() {
  echo "FAIL [$CASE]: $*" >&2
  echo "$*" >>"$T/FAILED"
  for f in "$T"/out "$T"/err; do
    [ -s "$f" ] && { echo "--- $(basename "$f") (first 20 lines):" >&2; head -20 "$f" >&2; }
  done
  exit 1
}
now_ms() { date +%s%3N; }
# weftrun with a safety net; stdout/stderr to $T/out and $T/err; sets rc
wr() {
  timeout -k 5 40 "$WR" "$@" >"$T/out" 2>"$T/err"
  rc=$?
}
expect_rc() { [ "$rc" = "$1" ] || fail "expected exit code $1, got $rc"; }
expect_err() { grep -qF -- "$1" "$T/err" || fail "stderr lacks '$1'"; }
# A process is gone when /proc has no entry or it is a zombie (killed, not
# reaped yet by whoever inherited it).
gone() {
  local st
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
  [ -z "$st" ] || [ "$st" = Z ]
}
# All pids in the given files are gone (waits up to 2 s: SIGKILL is not instant).
expect_gone() {
  local f p k
  for f in "$@"; do
    [ -s "$f" ] || fail "pid file $f missing"
    p=$(cat "$f")
    for k in $(seq 20); do gone "$p" && break; sleep 0.1; done
    gone "$p" || { kill -KILL "$p" 2>/dev/null; fail "process $p ($(basename "$f")) is still alive"; }
  done
}
# Waits until all the given files exist (ranks have started).
wait_files() {
  local k f ok
  for k in $(seq 200); do
    ok=1
    for f in "$@"; do [ -s "$f" ] || ok=0; done
    [ $ok = 1 ] && return 0
    sleep 0.05
  done
  fail "ranks did not start (missing: $*)"
}

case_env() {
  # values weftrun must replace, and one it must pass through
  export WEFT_RANK=77 HOROVOD_SIZE=99 INHERITED=yes
  local run secrets=() jobs=()
  for run in 1 2; do
    wr -np 4 -x FOO=bar --env FOO=baz -x WEFT_SECRET=nope -- bash "$RANK" env
    expect_rc 0
    expect_err "ignoring -x WEFT_SECRET"
    [ "$(grep -c 'WEFT_RANK=' "$T/out")" = 4 ] || fail "expected 4 env lines"
    local addr="" secret="" job="" seen="" line r
    for r in 0 1 2 3; do
      line=$(grep "^\[$r\] " "$T/out")
      [ "$(printf '%s\n' "$line" | wc -l)" = 1 ] || fail "rank $r printed $(printf '%s\n' "$line" | wc -l) env lines"
      for kv in "WEFT_RANK=$r" WEFT_SIZE=4 "WEFT_LOCAL_RANK=$r" WEFT_LOCAL_SIZE=4 WEFT_CROSS_RANK=0 WEFT_CROSS_SIZE=1 \
                "HOROVOD_RANK=$r" HOROVOD_SIZE=4 "HOROVOD_LOCAL_RANK=$r" HOROVOD_LOCAL_SIZE=4 HOROVOD_CROSS_RANK=0 \
                HOROVOD_CROSS_SIZE=1 FOO=baz INHERITED=yes; do
        [[ " $line " == *" $kv "* ]] || fail "rank $r: expected $kv in: $line"
      done
      local a s j
      a=$(sed -n 's/.* WEFT_ADDR=\([^ ]*\).*/\1/p' <<<"$line")
      s=$(sed -n 's/.* WEFT_SECRET=\([^ ]*\).*/\1/p' <<<"$line")
      j=$(sed -n 's/.* WEFT_JOB_ID=\([^ ]*\).*/\1/p' <<<"$line")
      [[ $a =~ ^127\.0\.0\.1:([0-9]+)$ ]] || fail "rank $r: bad WEFT_ADDR '$a'"
      local port=${BASH_REMATCH[1]}
      { [ "$port" -ge 1 ] && [ "$port" -le 65535 ]; } || fail "bad port $port"
      [[ $s =~ ^[0-9a-f]{64}$ ]] || fail "rank $r: WEFT_SECRET '$s' is not 64 hex chars"
      [[ $j =~ ^[0-9a-f]{16}$ ]] || fail "rank $r: WEFT_JOB_ID '$j' is not 16 hex chars"
      if [ -z "$seen" ]; then addr=$a secret=$s job=$j seen=1; fi
      [ "$a" = "$addr" ] || fail "ranks disagree on WEFT_ADDR: $a vs $addr"
      [ "$s" = "$secret" ] || fail "ranks disagree on WEFT_SECRET"
      [ "$j" = "$job" ] || fail "ranks disagree on WEFT_JOB_ID"
    done
    secrets+=("$secret")
    jobs+=("$job")
  done
  [ "${secrets[0]}" != "${secrets[1]}" ] || fail "two runs got the same WEFT_SECRET"
  [ "${jobs[0]}" != "${jobs[1]}" ] || fail "two runs got the same WEFT_JOB_ID"
  # one rank
  wr -np 1 bash "$RANK" env
  expect_rc 0
  grep -q '^\[0\] WEFT_RANK=0 WEFT_SIZE=1 ' "$T/out" || fail "-np 1: wrong env"
}

case_child_setup() {
  # weftrun starts with fd 7 open, SIGUSR1 and SIGINT ignored: ranks must get
  # none of it, and must lead their own process group.
  (
    trap '' USR1 INT
    exec 7>"$T/fd7"
    exec "$WR" -np 2 cat /proc/self/status >"$T/out" 2>"$T/err"
  )
  rc=$?
  expect_rc 0
  local r
  for r in 0 1; do
    grep -q "^\[$r\] SigIgn:[[:space:]]*0*$" "$T/out" || fail "rank $r inherited ignored signals: $(grep "^\[$r\] SigIgn" "$T/out")"
    grep -q "^\[$r\] SigBlk:[[:space:]]*0*$" "$T/out" || fail "rank $r inherited blocked signals: $(grep "^\[$r\] SigBlk" "$T/out")"
    local pid pgid
    pid=$(sed -n "s/^\[$r\] NSpid:[[:space:]]*\([0-9]*\).*/\1/p" "$T/out")
    pgid=$(sed -n "s/^\[$r\] NSpgid:[[:space:]]*\([0-9]*\).*/\1/p" "$T/out")
    [ -n "$pid" ] && [ "$pid" = "$pgid" ] || fail "rank $r: pid $pid is not its own process group ($pgid)"
  done
  ( exec 7>"$T/fd7"; exec "$WR" -np 2 ls /proc/self/fd >"$T/out" 2>"$T/err" )
  rc=$?
  expect_rc 0
  for r in 0 1; do
    # ls sees 0 1 2, the directory it opened (3), the status channel to
    # weftrun (4, WEFT_LAUNCHER_FD) and, on rank 0, its rendezvous listener
    # (5, WEFT_LISTEN_FD): nothing else
    want="[$r] 0 [$r] 1 [$r] 2 [$r] 3 [$r] 4 "
    [ $r = 0 ] && want="$want[$r] 5 "
    [ "$(grep "^\[$r\] " "$T/out" | sort | tr '\n' ' ')" = "$want" ] ||
      fail "rank $r has unexpected fds: $(grep "^\[$r\] " "$T/out" | tr '\n' ' ')"
  done
  wr -np 2 bash -c 'echo "$WEFT_LAUNCHER_FD $WEFT_LAUNCHER_TAG $WEFT_JOB_ID $(readlink /proc/self/fd/4)"'
  expect_rc 0
  for r in 0 1; do
    grep -q "^\[$r\] 4 \([0-9a-f]\{16\}\) \1 pipe:" "$T/out" ||
      fail "rank $r: no status channel on fd 4 tagged with the job id: $(grep "^\[$r\] " "$T/out")"
  done
  wr -np 1 readlink /proc/self/fd/0
  [ "$(cat "$T/out")" = "[0] /dev/null" ] || fail "stdin of a rank is not /dev/null"
}

# checks that stream FILE holds, for rank r, lines "[r] r<r> WHAT 1..1000" in order
check_seq() {
  local file=$1 r=$2 what=$3
  grep "^\[$r\] r$r $what " "$file" | awk -v want="[$r] r$r $what" '
    { n++; if ($0 != want " " n) { print "line " n " is: " $0; bad = 1; exit } }
    END { if (!bad && n != 1000) { print "got " n " lines, expected 1000"; bad = 1 } exit bad }' ||
    fail "rank $r $what lines wrong"
}

case_lines() {
  wr -np 3 -- bash "$RANK" lines
  expect_rc 0
  local r
  for r in 0 1 2; do
    check_seq "$T/out" $r out
    check_seq "$T/err" $r err
    [ "$(grep -c "^\[$r\] r$r tail\$" "$T/out")" = 1 ] || fail "rank $r: partial last line missing"
    # the 150000-byte line comes in 64 KiB pieces, each prefixed
    [ "$(grep "^\[$r\] a*\$" "$T/out" | awk '{ printf "%d ", length($2) }')" = "65536 65536 18928 " ] ||
      fail "rank $r: long line pieces wrong: $(grep "^\[$r\] a*\$" "$T/out" | awk '{ printf "%d ", length($2) }')"
  done
  [ "$(wc -l <"$T/out")" = $((3 * (1000 + 3 + 1))) ] || fail "stdout has $(wc -l <"$T/out") lines, expected 3012"
  [ "$(wc -l <"$T/err")" = 3000 ] || fail "stderr has $(wc -l <"$T/err") lines, expected 3000"
  # untagged: the same bytes, whole lines
  wr -np 3 --no-tag-output -- bash "$RANK" seq
  expect_rc 0
  for r in 0 1 2; do seq -f "r$r out %g" 1 1000; done | sort >"$T/want"
  sort "$T/out" | cmp -s - "$T/want" || fail "--no-tag-output: lines lost or mangled"
  # ranks that exit at once must not lose output either
  local it
  for it in 1 2 3 4 5; do
    wr -np 8 echo hi
    expect_rc 0
    [ "$(sort "$T/out" | tr '\n' ' ')" = "[0] hi [1] hi [2] hi [3] hi [4] hi [5] hi [6] hi [7] hi " ] ||
      fail "run $it of 'echo hi': $(tr '\n' ' ' <"$T/out")"
    wr -np 4 printf x
    [ "$(sort "$T/out" | tr '\n' ' ')" = "[0] x [1] x [2] x [3] x " ] || fail "partial lines lost: $(tr '\n' ' ' <"$T/out")"
  done
}

# horovodrun's layout: DIR/rank.<i>/stdout and stderr, <i> zero-padded to the
# digits of N-1 (rank.00 .. rank.11 for 12 ranks), the bytes exactly as the
# rank wrote them; the console still gets the output, tagged
case_output_files() {
  mkdir -p "$T/o/a/rank.0"
  echo stale >"$T/o/a/rank.0/stdout"
  wr -np 3 --output-filename "$T/o/a" -- bash "$RANK" files
  expect_rc 0
  local r p n
  for r in 0 1 2; do
    [ "$(cat "$T/o/a/rank.$r/stdout" 2>&1)" = "out $r" ] || fail "rank.$r/stdout: $(cat "$T/o/a/rank.$r/stdout" 2>&1)"
    [ "$(cat "$T/o/a/rank.$r/stderr" 2>&1)" = "err $r" ] || fail "rank.$r/stderr: $(cat "$T/o/a/rank.$r/stderr" 2>&1)"
    grep -qx "\[$r\] out $r" "$T/out" || fail "rank $r's stdout did not reach the console too"
    grep -qx "\[$r\] err $r" "$T/err" || fail "rank $r's stderr did not reach the console too"
  done
  [ ! -e "$T/o/a/rank.3" ] || fail "rank.3 exists for -np 3"
  for n in 12 11 10; do
    wr -np $n --output-filename "$T/o/n$n" -- bash "$RANK" files
    expect_rc 0
    [ "$(grep -c ' out ' "$T/out")" = $n ] || fail "-np $n: the console lacks stdout lines"
    local want="" last=$((n - 1))
    for r in $(seq 0 $last); do
      p=$(printf "%0${#last}d" $r)
      want="$want rank.$p"
      [ "$(cat "$T/o/n$n/rank.$p/stdout" 2>&1)" = "out $r" ] && [ "$(cat "$T/o/n$n/rank.$p/stderr" 2>&1)" = "err $r" ] ||
        fail "-np $n: rank.$p holds the wrong output"
    done
    [ "$(cd "$T/o/n$n" && echo rank.*)" = "${want# }" ] || fail "-np $n: folders $(cd "$T/o/n$n" && echo rank.*)"
  done
  # the file gets the bytes untagged, a partial last line as it is
  wr -np 1 --output-filename "$T/o/c" -- printf 'a\nb'
  expect_rc 0
  printf 'a\nb' | cmp -s - "$T/o/c/rank.0/stdout" || fail "rank.0/stdout is not the rank's bytes: $(od -c "$T/o/c/rank.0/stdout")"
  [ "$(cat "$T/out")" = "$(printf '[0] a\n[0] b')" ] || fail "console: $(cat "$T/out")"
  wr -np 1 --output-filename /dev/null/x true
  expect_rc 1
  expect_err "cannot create directory"
}

case_fail_exit() {
  local t0 dt
  t0=$(now_ms)
  wr -np 4 -- bash "$RANK" fail_exit "$T"
  dt=$(($(now_ms) - t0))
  expect_rc 3
  [ "$dt" -lt 5000 ] || fail "took $dt ms, expected < grace 3 s + 2 s"
  expect_err "weftrun: rank 2 (pid $(cat "$T/pid.2")) exited with status 3; stopping the other 3 ranks"
  [ "$(grep -c '^weftrun: ' "$T/err")" = 1 ] || fail "expected exactly one weftrun message"
  # the rank's last words come before weftrun's message about it
  [ "$(grep -n . "$T/err" | sed -n 's/^\([0-9]*\):\[2\] rank 2 bye$/\1/p')" = 1 ] ||
    fail "rank 2's last line is not the first line of stderr"
  expect_gone "$T"/pid.*
  # The same, deterministic: weftrun is stopped while rank 1 writes its last
  # line and exits, so on resuming it sees the exit and the line together.
  rm -f "$T"/pid.*
  local wpid k
  "$WR" -np 2 -- bash "$RANK" last_words "$T" >"$T/out" 2>"$T/err" &
  wpid=$!
  wait_files "$T"/pid.{0,1}
  kill -STOP $wpid
  touch "$T/go"
  for k in $(seq 100); do gone "$(cat "$T/pid.1")" && break; sleep 0.05; done
  kill -CONT $wpid
  wait $wpid
  rc=$?
  expect_rc 3
  [ "$(head -1 "$T/err")" = "[1] rank 1 bye" ] || fail "weftrun spoke before rank 1's last line was relayed"
  expect_err "rank 1 (pid $(cat "$T/pid.1")) exited with status 3; stopping the other rank"
  expect_gone "$T"/pid.*
  # others that ignore SIGTERM are SIGKILLed after the grace
  rm -f "$T"/pid.* "$T"/child.*
  t0=$(now_ms)
  wr -np 3 --grace 1 -- bash "$RANK" fail_exit_stubborn "$T"
  dt=$(($(now_ms) - t0))
  expect_rc 3
  { [ "$dt" -ge 1000 ] && [ "$dt" -lt 3500 ]; } || fail "stubborn ranks: took $dt ms, expected grace 1 s .. 3.5 s"
  expect_err "rank 2 (pid $(cat "$T/pid.2")) exited with status 3; stopping the other 2 ranks"
  expect_err "2 ranks did not stop within 1 s; killing them"
  expect_gone "$T"/pid.* "$T"/child.*
}

case_fail_signal() {
  wr -np 3 -- bash "$RANK" fail_signal "$T"
  expect_rc 137
  expect_err "weftrun: rank 1 (pid $(cat "$T/pid.1")) was killed by signal 9 (Killed); stopping the other 2 ranks"
  expect_gone "$T"/pid.*
}

case_signals() {
  # SIGINT to weftrun, ranks (and their children) ignore it and SIGTERM
  # (--foreground: timeout(1) must not signal weftrun a second time)
  local wpid t0 dt
  timeout --foreground -k 5 40 "$WR" -np 3 --grace 1 -- bash "$RANK" stubborn "$T" >"$T/out" 2>"$T/err" &
  wpid=$!
  wait_files "$T"/pid.{0,1,2} "$T"/child.{0,1,2}
  t0=$(now_ms)
  kill -INT $wpid
  wait $wpid
  rc=$?
  dt=$(($(now_ms) - t0))
  expect_rc 130
  { [ "$dt" -ge 900 ] && [ "$dt" -lt 3000 ]; } || fail "SIGINT: took $dt ms, expected grace 1 s .. 3 s"
  expect_err "got SIGINT; passing it to 3 ranks"
  expect_gone "$T"/pid.* "$T"/child.*
  # the same signal twice in a row (as timeout(1) sends it) is one request:
  # the grace still holds
  rm -f "$T"/pid.* "$T"/child.*
  timeout --foreground -k 5 40 "$WR" -np 2 --grace 1 -- bash "$RANK" stubborn "$T" >"$T/out" 2>"$T/err" &
  wpid=$!
  wait_files "$T"/pid.{0,1} "$T"/child.{0,1}
  t0=$(now_ms)
  kill -TERM $wpid
  kill -TERM $wpid
  wait $wpid
  rc=$?
  dt=$(($(now_ms) - t0))
  expect_rc 143
  { [ "$dt" -ge 900 ] && [ "$dt" -lt 3000 ]; } || fail "duplicate SIGTERM: took $dt ms, expected grace 1 s .. 3 s"
  grep -q "while stopping" "$T/err" && fail "a duplicate signal cut the grace short"
  expect_gone "$T"/pid.* "$T"/child.*
  # a second SIGINT later kills at once, long grace or not
  rm -f "$T"/pid.* "$T"/child.*
  timeout --foreground -k 5 40 "$WR" -np 2 --grace 30 -- bash "$RANK" stubborn "$T" >"$T/out" 2>"$T/err" &
  wpid=$!
  wait_files "$T"/pid.{0,1} "$T"/child.{0,1}
  t0=$(now_ms)
  kill -INT $wpid
  sleep 0.3
  kill -INT $wpid
  wait $wpid
  rc=$?
  dt=$(($(now_ms) - t0))
  expect_rc 130
  [ "$dt" -lt 2000 ] || fail "second SIGINT: took $dt ms"
  expect_err "killing the 2 remaining ranks now"
  expect_gone "$T"/pid.* "$T"/child.*
  # SIGTERM and SIGHUP are forwarded; ranks that obey exit at once
  local sig code
  for sig in TERM HUP; do
    rm -f "$T"/pid.*
    timeout --foreground -k 5 40 "$WR" -np 2 -- bash "$RANK" sleep "$T" >"$T/out" 2>"$T/err" &
    wpid=$!
    wait_files "$T"/pid.{0,1}
    t0=$(now_ms)
    kill -$sig $wpid
    wait $wpid
    rc=$?
    dt=$(($(now_ms) - t0))
    code=$((128 + $(kill -l $sig)))
    expect_rc $code
    [ "$dt" -lt 2000 ] || fail "SIG$sig: took $dt ms, ranks obey it"
    expect_gone "$T"/pid.*
  done
}

case_pdeathsig() {
  # weftrun SIGKILLed: the kernel kills its ranks (PR_SET_PDEATHSIG)
  local wpid
  "$WR" -np 3 -- bash "$RANK" sleep "$T" >"$T/out" 2>"$T/err" &
  wpid=$!
  wait_files "$T"/pid.{0,1,2}
  kill -KILL $wpid
  wait $wpid 2>/dev/null
  expect_gone "$T"/pid.*
}

case_not_found() {
  wr -np 3 weft_no_such_command_x
  expect_rc 127
  expect_err "weftrun: rank 0 (pid"
  expect_err "could not execute 'weft_no_such_command_x' (No such file or directory) and exited with status 127"
  grep -qF "[0] weftrun: cannot execute 'weft_no_such_command_x'" "$T/out" "$T/err" ||
    fail "the rank did not report the failed exec"
  # ranks 1 and 2 never start; weftrun must not touch its own stdin for them
  local t0 dt
  t0=$(now_ms)
  timeout -k 5 40 "$WR" -np 3 weft_no_such_command_x >"$T/out" 2>"$T/err" < <(echo from_stdin; sleep 5)
  rc=$?
  dt=$(($(now_ms) - t0))
  expect_rc 127
  grep -q from_stdin "$T/out" "$T/err" && fail "weftrun relayed its own stdin"
  [ "$dt" -lt 4000 ] || fail "weftrun waited for its stdin to close ($dt ms)"
  # found but not executable
  printf 'echo hi\n' >"$T/noexec"
  chmod -x "$T/noexec"
  wr -np 2 "$T/noexec"
  expect_rc 126
  expect_err "Permission denied"
}

case_usage() {
  local args
  while IFS= read -r args; do
    # shellcheck disable=SC2086 # word splitting is the point
    wr $args
    [ "$rc" = 2 ] || fail "'weftrun $args' exited $rc, expected 2"
    grep -q "^weftrun: .*" "$T/err" && grep -qF "Try 'weftrun --help'" "$T/err" ||
      fail "'weftrun $args' gave no clear message: $(cat "$T/err")"
  done <<'EOF'

true
-np
-np 0 true
-np -3 true
-np abc true
-np 2
-np 2 --
-np 99999 true
--bogus -np 2 true
-np 2 -x =v true
-np 2 -x 1A=v true
-np 2 --timeout
-np 2 --timeout 0 true
-np 2 --timeout -1 true
-np 2 --grace x true
-np 2 --output-filename= true
-np 5 -H a:2,b:2 true
-np 2 -H a,a true
-np 2 -H a:0 true
-np 2 -H a:x true
-np 2 -H , true
-np 2 -H a;b true
-np 2 -H a@:2 true
-np 2 -H @a:2 true
-np 2 -H a@b@c:2 true
-np 2 --hostfile /nonexistent true
-np 2 --rsh true
-np 2 --network-interface a/b true
EOF
  # a host file: comments, HOST, HOST:N, HOST slots=N; then a bad one
  printf '# hosts\nlocalhost slots=2\n\n' >"$T/hosts"
  wr -np 2 --hostfile "$T/hosts" bash "$RANK" env
  expect_rc 0
  printf 'localhost slots=two\n' >"$T/hosts"
  wr -np 2 --hostfile "$T/hosts" true
  expect_rc 2
  expect_err "$T/hosts:1: expected slots=N"
  wr --help
  expect_rc 0
  grep -q "^Usage: weftrun -np N" "$T/out" || fail "--help has no usage line"
  wr --version
  expect_rc 0
  grep -Eq "^weftrun \(weft\) [0-9]+\.[0-9]+\.[0-9]+$" "$T/out" || fail "--version: $(cat "$T/out")"
  # forms that are fine
  wr -n 2 --np=2 -np=2 --timeout=10 --grace=0.5 -v true
  expect_rc 0
  expect_err "rank 1 (pid"
}

case_timeout() {
  local t0 dt
  t0=$(now_ms)
  wr --timeout 1 -np 2 sleep 30
  dt=$(($(now_ms) - t0))
  expect_rc 124
  { [ "$dt" -ge 1000 ] && [ "$dt" -lt 3500 ]; } || fail "took $dt ms, expected 1 .. 3.5 s"
  expect_err "timeout"
  wr --timeout 20 -np 2 true
  expect_rc 0
}

case_success() {
  wr -np 2 -- bash "$RANK" early
  expect_rc 0
  [ "$(cat "$T/out")" = "[1] done" ] || fail "rank 1 did not finish after rank 0 exited: $(cat "$T/out")"
  [ ! -s "$T/err" ] || fail "unexpected messages: $(cat "$T/err")"
  # a rank leaves a process holding its stdout: weftrun still ends, kills it
  local t0 dt
  t0=$(now_ms)
  wr -np 2 -- bash "$RANK" leave_child "$T"
  dt=$(($(now_ms) - t0))
  expect_rc 0
  [ "$dt" -lt 5000 ] || fail "leftover processes kept weftrun for $dt ms"
  grep -q "^\[1\] rank 1 leaving$" "$T/out" || fail "output missing"
  expect_err "still hold its output open"
  expect_gone "$T"/child.*
}

# -H: local hosts start directly; the others through --rsh. Here the
# "remote shell" is env(1) on this machine ('env FAKE_HOST={host}' +
# 'sh -s'), so the remote path runs without ssh or namespaces. Remote ranks
# get weftrun's environment in their start script ('env -i' clears the
# shell's own, as a fresh ssh login has none of the caller's).
case_hosts() {
  export INHERITED=yes FWD=fwd-value
  wr -np 5 -H localhost:2,hostb:2,hostc:3 --rsh 'env -i PATH=/usr/bin:/bin FAKE_HOST={host}' -x FOO=bar -x FWD \
    -x WEFT_SIZE=9 -- bash "$RANK" hosts
  expect_rc 0
  local r line secret
  secret=$(sed -n 's/.* WEFT_SECRET=\([^ ]*\).*/\1/p' <<<"$(grep '^\[0\] ' "$T/out")")
  [[ $secret =~ ^[0-9a-f]{64}$ ]] || fail "rank 0 got no secret"
  for r in 0 1 2 3 4; do
    line=$(grep "^\[$r\] " "$T/out")
    local host lr ls cr fake fwd inh
    case $r in 0 | 1) host=localhost lr=$r ls=2 cr=0 fake="<unset>" fwd=fwd-value inh=yes ;;
      2 | 3) host=hostb lr=$((r - 2)) ls=2 cr=1 fake=hostb fwd=fwd-value inh=yes ;;
      4) host=hostc lr=0 ls=1 cr=2 fake=hostc fwd=fwd-value inh=yes ;; esac
    for kv in "WEFT_RANK=$r" WEFT_SIZE=5 "WEFT_LOCAL_RANK=$lr" "WEFT_LOCAL_SIZE=$ls" "WEFT_CROSS_RANK=$cr" \
              WEFT_CROSS_SIZE=3 "HOROVOD_CROSS_RANK=$cr" "WEFT_HOSTNAME=$host" FOO=bar "FWD=$fwd" \
              "FAKE_HOST=$fake" "INHERITED=$inh" "WEFT_SECRET=$secret"; do
      [[ " $line " == *" $kv "* ]] || fail "rank $r: expected $kv in: $line"
    done
    [[ $line =~ WEFT_ADDR=[^\ ]+:[0-9]+ ]] || fail "rank $r: no WEFT_ADDR in: $line"
    # the secret is never on a command line: the remote shell is "sh -s"
    [[ ${line#*PARENT=} == *"$secret"* ]] && fail "rank $r: the secret is on its parent's command line"
    if [ $r -ge 2 ]; then [[ $line == *"PARENT=sh -s "* ]] || fail "rank $r: parent is not 'sh -s': $line"; fi
  done
  # rank 0 is local, the others are not: rank 0 listens on an address of this
  # machine the others can reach, never loopback (Debian maps the host name to
  # 127.0.1.1)
  local a0 mine
  a0=$(grep '^\[0\] ' "$T/out" | sed -n 's/.* WEFT_ADDR=\([^ ]*\):[0-9][0-9]* .*/\1/p')
  [[ $a0 =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] && [[ $a0 != 127.* ]] ||
    fail "rank 0 listens on '$a0', not a non-loopback IPv4 address"
  mine=" $(hostname -I 2>/dev/null) "
  [[ $mine == *" $a0 "* ]] || fail "rank 0 listens on $a0, which is not one of this machine's addresses:$mine"
  # rank 0 on a "remote" host: its name as given (USER@ goes to the remote
  # shell only) and a high port
  wr -np 2 -H bob@hosta:1,hostb:1 --rsh 'env FAKE_HOST={host}' -- bash "$RANK" hosts
  expect_rc 0
  grep -q "^\[1\] .*WEFT_ADDR=hosta:[2-5][0-9][0-9][0-9][0-9] " "$T/out" || fail "rank 0 remote: bad WEFT_ADDR"
  grep -q "^\[0\] .*WEFT_HOSTNAME=hosta .*FAKE_HOST=bob@hosta " "$T/out" || fail "USER@HOST: $(grep '^\[0\] ' "$T/out")"
  # USER@ on this machine's name: still started directly, WEFT_HOSTNAME without the user
  wr -np 3 -H me@localhost:1,alice@hostb:2 --rsh 'env FAKE_HOST={host}' -- bash "$RANK" hosts
  expect_rc 0
  for r in 0 1 2; do
    line=$(grep "^\[$r\] " "$T/out")
    case $r in 0) host=localhost fake="<unset>" ;; *) host=hostb fake=alice@hostb ;; esac
    for kv in "WEFT_HOSTNAME=$host" "FAKE_HOST=$fake"; do
      [[ " $line " == *" $kv "* ]] || fail "USER@HOST, rank $r: expected $kv in: $line"
    done
  done
  a0=$(grep '^\[0\] ' "$T/out" | sed -n 's/.* WEFT_ADDR=\([^ ]*\):[0-9][0-9]* .*/\1/p')
  [[ $mine == *" $a0 "* ]] || fail "USER@HOST: rank 0 listens on '$a0'"
  wr -np 2 -H u@hostb:1,hostb:1 --rsh 'env FAKE_HOST={host}' true
  expect_rc 2
  expect_err "host 'hostb' is listed twice"
  # a remote rank that fails or is killed: named with its host, its status
  wr -np 3 -H localhost:1,hostb:2 --rsh 'env FAKE_HOST={host}' -- bash "$RANK" fail_signal "$T"
  expect_rc 137
  grep -q "^weftrun: rank 1 (pid [0-9]* on host hostb) was killed by signal 9" "$T/err" ||
    fail "the killed remote rank was not named with its host"
  expect_gone "$T"/pid.*
  wr -np 3 -H hostb:3 --rsh 'env FAKE_HOST={host}' -- bash "$RANK" fail_exit "$T"
  expect_rc 3
  grep -q "^weftrun: rank 2 (pid [0-9]* on host hostb) exited with status 3" "$T/err" || fail "exit 3 not reported"
  expect_gone "$T"/pid.*
  # output files of remote ranks are written by weftrun
  wr -np 2 -H hostb:2 --rsh 'env FAKE_HOST={host}' --output-filename "$T/o" -- bash "$RANK" files
  expect_rc 0
  [ "$(cat "$T/o/rank.1/stdout")" = "out 1" ] && [ "$(cat "$T/o/rank.1/stderr")" = "err 1" ] ||
    fail "remote output files are wrong"
  # a status line on a remote rank's stderr is taken out of the output
  wr -np 2 -H hostb:2 --rsh 'env FAKE_HOST={host}' -- bash -c \
    'printf "before weft-link %s rank=%s cause=self status=-5\nafter\n" "$WEFT_LAUNCHER_TAG" "$WEFT_RANK" >&2'
  expect_rc 0
  grep -q "weft-link" "$T/err" "$T/out" && fail "a status line was relayed"
  grep -q "^\[1\] before $" "$T/err" && grep -q "^\[1\] after$" "$T/err" || fail "the text around a status line was lost"
}

# A remote shell that takes a while to connect (reads its start script late)
# while weftrun's pipe to it is 4 KiB (WEFTRUN_TEST_PIPE_BYTES, as for a user
# over pipe-user-pages-soft) and the script far larger: weftrun must not block
# on the write, must deliver the whole script, and --timeout and signals must
# still work while the shell "connects".
case_slow_rsh() {
  printf '#!/bin/sh\nsleep "$SLOW"\nh=$1\nshift\nexec env FAKE_HOST="$h" "$@"\n' >"$T/slowrsh"
  chmod +x "$T/slowrsh"
  local big t0 dt r sum
  big=$(head -c 50000 /dev/zero | tr '\0' x)
  sum=$(printf '%s' "$big" | cksum | cut -d' ' -f1)
  export WEFTRUN_TEST_PIPE_BYTES=4096 SLOW=2
  t0=$(now_ms)
  wr -v -np 4 -H hostb:2,hostc:2 --rsh "$T/slowrsh {host}" -x "BIG=$big" -- bash "$RANK" biglen
  dt=$(($(now_ms) - t0))
  expect_rc 0
  for r in 0 1 2 3; do
    grep -q "^\[$r\] host=host[bc] len=50000 sum=$sum\$" "$T/out" || fail "rank $r did not get the whole script"
  done
  # the four shells "connected" at the same time (2 s): weftrun did not wait
  # for each before starting the next (8 s)
  [ "$dt" -lt 6000 ] || fail "took $dt ms: the ranks were started one after the other"
  # a shell that never reads: --timeout still ends the job
  SLOW=30
  t0=$(now_ms)
  wr --timeout 1 --grace 1 -np 2 -H hostb:2 --rsh "$T/slowrsh {host}" -x "BIG=$big" -- bash "$RANK" biglen
  dt=$(($(now_ms) - t0))
  expect_rc 124
  expect_err "timeout"
  [ "$dt" -lt 4000 ] || fail "--timeout 1 took $dt ms while the shells did not read"
  # ... and SIGINT
  local wpid
  timeout --foreground -k 5 40 "$WR" --grace 1 -np 2 -H hostb:2 --rsh "$T/slowrsh {host}" -x "BIG=$big" -- \
    bash "$RANK" biglen >"$T/out" 2>"$T/err" &
  wpid=$!
  sleep 0.5
  t0=$(now_ms)
  kill -INT $wpid
  wait $wpid
  rc=$?
  dt=$(($(now_ms) - t0))
  expect_rc 130
  [ "$dt" -lt 3000 ] || fail "SIGINT took $dt ms while the shells did not read"
}

# The status channel (WEFT_LAUNCHER_FD, src/bootstrap/launcher_link.c) with a real
# weft program: rank 1 exits 3, rank 0 loses it and names it on the channel.
# weft_init takes the variables out of the environment and keeps the pipe
# from its children; a process whose fd 4 is not weftrun's pipe (a file, or
# closed) never gets the line.
case_link_channel() {
  local probe=$3 r
  wr -v -np 2 -- "$probe"
  expect_rc 3
  for r in 0 1; do
    grep -q "^\[$r\] rank $r env=<unset> fd4=cloexec\$" "$T/out" || fail "rank $r: $(grep "^\[$r\] " "$T/out")"
  done
  expect_err "rank 0 reports its failure (status"
  expect_err "came from rank 1"
  # fd 4 is a file the rank opened (it inherited the variables, not the pipe).
  # Without status lines weftrun cannot tell the cause: when both ranks end
  # between two of its looks (a loaded machine), rank 0's status (5, it
  # lost rank 1) may be reported instead of rank 1's (3)
  wr -v -np 2 -- bash -c 'exec 4>"$0/link.$WEFT_RANK"; exec "$1"' "$T" "$probe"
  [ "$rc" = 3 ] || [ "$rc" = 5 ] || fail "file on fd 4: expected exit code 3 or 5, got $rc"
  for r in 0 1; do
    grep -q "^\[$r\] rank $r env=<unset> fd4=inherit\$" "$T/out" || fail "file on fd 4, rank $r: $(grep "^\[$r\] " "$T/out")"
    [ -e "$T/link.$r" ] && [ ! -s "$T/link.$r" ] || fail "rank $r wrote into the file on fd 4: $(cat "$T/link.$r")"
  done
  grep -q "reports its failure" "$T/err" && fail "a status line came through a file"
  grep -q "rank 0 failed: " "$T/err" || fail "rank 0 did not see the failure"
  # fd 4 closed at start (weft_init then opens its own sockets there)
  wr -v -np 2 -- bash -c 'exec 4>&-; exec "$0"' "$probe"
  [ "$rc" = 3 ] || [ "$rc" = 5 ] || fail "closed fd 4: expected exit code 3 or 5, got $rc" # as above
  grep -q "^\[0\] rank 0 env=<unset> " "$T/out" || fail "closed fd 4: $(cat "$T/out")"
  grep -q "reports its failure" "$T/err" && fail "a status line came through a descriptor weftrun did not give"
  grep -q "rank 0 failed: WEFT_ERR_PEER_LOST" "$T/err" || fail "closed fd 4: rank 0 did not see rank 1 lost"
}

# horovodrun's flags, the remote environment, ssh (hvd_cases.sh)
. "$HERE/hvd_cases.sh"

"case_$CASE" "$@" || fail "case returned $?"
[ -e "$T/FAILED" ] && { echo "FAIL [$CASE]: a check failed in a subshell: $(cat "$T/FAILED")" >&2; exit 1; }
echo "PASS [$CASE]"
