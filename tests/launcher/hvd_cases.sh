# shellcheck shell=bash disable=SC2154 # rc, T, RANK, CASE: launcher_test.sh's
# hvd_cases.sh - launcher_test.sh's cases for horovodrun's flags
# (tools/weftrun_hvd.c), the environment of remote ranks and the ssh command.
# Sourced by launcher_test.sh: its helpers (wr, fail, expect_rc, ...) and
# $T, $RANK, $WR are set. Remote hosts are faked with --rsh 'env -i ...'
# (a clean environment, as a fresh ssh login has) or a fake ssh on PATH.

# the weft settings horovodrun's flags map to
HVD_VARS="WEFT_FUSION_THRESHOLD WEFT_CYCLE_TIME_MS WEFT_CYCLE_TIME_US WEFT_CACHE_CAPACITY WEFT_HIERARCHICAL_ALLREDUCE
  WEFT_HIERARCHICAL_ALLGATHER WEFT_TIMELINE WEFT_TIMELINE_MARK_CYCLES WEFT_STALL_CHECK_DISABLE WEFT_STALL_CHECK_SECONDS
  WEFT_STALL_SHUTDOWN_SECONDS WEFT_LOG_LEVEL WEFT_INIT_TIMEOUT_SECONDS"
FAKE_RSH='env -i PATH=/usr/bin:/bin FAKE_HOST={host}'

# every rank's line in $T/out holds each NAME=value given (a space after each)
expect_vars() {
  local n=$1 r line kv
  shift
  [ "$(grep -c '^\[[0-9]*\] ' "$T/out")" = "$n" ] || fail "expected $n rank lines: $(cat "$T/out")"
  for r in $(seq 0 $((n - 1))); do
    line=$(grep "^\[$r\] " "$T/out")
    for kv in "$@"; do
      [[ " ${line#* } " == *" $kv "* ]] || fail "rank $r: expected $kv in: $line"
    done
  done
}

case_hvd_flags() {
  # weftrun's environment and -x name some of them: the flags win
  export WEFT_CYCLE_TIME_US=500 WEFT_FUSION_THRESHOLD=1
  # shellcheck disable=SC2086 # HVD_VARS is a list of names
  wr -np 2 --gloo -x WEFT_LOG_LEVEL=trace --fusion-threshold-mb 64 --cycle-time-ms 2.5 --cache-capacity=0 \
    --hierarchical-allreduce --no-hierarchical-allgather --timeline-filename "$T/tl.json" --timeline-mark-cycles \
    --no-stall-check --stall-check-warning-time-seconds 30 --stall-check-shutdown-time-seconds=90 \
    --log-level WARNING --start-timeout 45 -- bash "$RANK" vars $HVD_VARS
  expect_rc 0
  expect_vars 2 WEFT_FUSION_THRESHOLD=67108864 WEFT_CYCLE_TIME_MS=2.5 WEFT_CYCLE_TIME_US=0 WEFT_CACHE_CAPACITY=0 \
    WEFT_HIERARCHICAL_ALLREDUCE=1 WEFT_HIERARCHICAL_ALLGATHER=0 "WEFT_TIMELINE=$T/tl.json" WEFT_TIMELINE_MARK_CYCLES=1 \
    WEFT_STALL_CHECK_DISABLE=1 WEFT_STALL_CHECK_SECONDS=30 WEFT_STALL_SHUTDOWN_SECONDS=90 WEFT_LOG_LEVEL=warn \
    WEFT_INIT_TIMEOUT_SECONDS=45
  # no flags: weftrun sets none of them
  unset WEFT_CYCLE_TIME_US WEFT_FUSION_THRESHOLD
  # shellcheck disable=SC2086
  wr -np 1 bash "$RANK" vars $HVD_VARS
  expect_rc 0
  [ "$(grep -o '=<unset>' "$T/out" | wc -l)" = 14 ] || fail "without flags: $(cat "$T/out")"
  # the last of a flag wins; the on and off forms; a fraction of a MB
  wr -np 1 --fusion-threshold-mb 1 --fusion-threshold-mb 0.5 --no-hierarchical-allreduce --hierarchical-allreduce \
    --hierarchical-allgather -- bash "$RANK" vars WEFT_FUSION_THRESHOLD WEFT_HIERARCHICAL_ALLREDUCE \
    WEFT_HIERARCHICAL_ALLGATHER
  expect_rc 0
  expect_vars 1 WEFT_FUSION_THRESHOLD=524288 WEFT_HIERARCHICAL_ALLREDUCE=1 WEFT_HIERARCHICAL_ALLGATHER=1
  # Horovod's log levels as weft's
  local pair
  for pair in TRACE=trace DEBUG=debug INFO=info WARNING=warn ERROR=none FATAL=none warning=warn; do
    wr -np 1 --log-level "${pair%=*}" bash "$RANK" vars WEFT_LOG_LEVEL
    expect_rc 0
    expect_vars 1 "WEFT_LOG_LEVEL=${pair#*=}"
  done
  # remote ranks get them too
  wr -np 2 -H hostb:2 --rsh "$FAKE_RSH" --fusion-threshold-mb 2 --log-level DEBUG -- \
    bash "$RANK" vars WEFT_FUSION_THRESHOLD WEFT_LOG_LEVEL
  expect_rc 0
  expect_vars 2 WEFT_FUSION_THRESHOLD=2097152 WEFT_LOG_LEVEL=debug FAKE_HOST=hostb
  # a weft program acts on them: rank 0 writes the timeline, DEBUG lines appear
  # (link_probe: rank 1 exits 3, rank 0 finalizes after losing it)
  local probe=$3
  wr -np 2 --timeline-filename "$T/tl2.json" --log-level DEBUG -- "$probe"
  expect_rc 3
  grep -q '"traceEvents"' "$T/tl2.json" 2>/dev/null || fail "--timeline-filename: no timeline written"
  grep -q '^\[0\] \[weft r0 DEBUG ' "$T/err" || fail "--log-level DEBUG: no DEBUG line from rank 0"
  wr -np 2 -- "$probe"
  grep -q ' DEBUG ' "$T/err" && fail "DEBUG lines without --log-level DEBUG"
  return 0
}

# a bad value is a usage error (exit 2) that names the flag
case_hvd_bad_values() {
  local args flag
  while IFS= read -r args; do
    [ -n "$args" ] || continue
    flag=${args%% *}
    flag=${flag%%=*}
    # shellcheck disable=SC2086 # word splitting is the point
    wr -np 2 $args true
    [ "$rc" = 2 ] || fail "'weftrun -np 2 $args true' exited $rc, expected 2"
    head -1 "$T/err" | grep -q "^weftrun: .*$flag" && grep -qF "Try 'weftrun --help'" "$T/err" ||
      fail "'$args': the message does not name $flag: $(cat "$T/err")"
  done <<'EOF'
--fusion-threshold-mb x
--fusion-threshold-mb -1
--fusion-threshold-mb 1e99
--cycle-time-ms 5ms
--cycle-time-ms -2
--cache-capacity 1.5
--cache-capacity -1
--cache-capacity 99999999999
--timeline-filename=
--stall-check-warning-time-seconds x
--stall-check-shutdown-time-seconds -1
--log-level VERBOSE
--log-level
--start-timeout 0
--start-timeout abc
-p 0
-p 70000
-p ssh
--ssh-port 22x
-i /nonexistent/key
--ssh-identity-file /nonexistent/key
--network-interfaces eth0,,lo
--network-interfaces eth0,a/b
--network-interfaces averyveryverylongname0
--config-file=
EOF
  # ssh's options need ssh as the remote shell
  wr -np 2 -p 2222 --rsh "$FAKE_RSH" true
  expect_rc 2
  expect_err "-p/--ssh-port is for ssh, but --rsh"
}

# horovodrun's YAML config file: the same settings; flags win over it
case_hvd_config() {
  cat >"$T/hvd.yaml" <<'EOF'
# as horovodrun's docs show it
controller: gloo
params:
  fusion_threshold_mb: 32
  cycle_time_ms: 10
  cache_capacity: 2048
  hierarchical_allreduce: true
  hierarchical_allgather: false
autotune:
  enabled: true
  warmup_samples: 5
timeline:
  filename: 'horovod timeline.json'
  mark_cycles: yes
stall_check:
  enabled: false
  warning_time_seconds: 120
  shutdown_time_seconds: 240
library_options:
  gloo_timeout_seconds: 60
logging:
  level: INFO
EOF
  # shellcheck disable=SC2086
  wr -np 2 --config-file "$T/hvd.yaml" -- bash "$RANK" vars $HVD_VARS
  if grep -q "built without libyaml" "$T/err"; then
    expect_rc 1
    expect_err "libyaml-dev"
    skip_case "weftrun was built without libyaml"
  fi
  expect_rc 0
  expect_vars 2 WEFT_FUSION_THRESHOLD=33554432 WEFT_CYCLE_TIME_MS=10 WEFT_CYCLE_TIME_US=0 WEFT_CACHE_CAPACITY=2048 \
    WEFT_HIERARCHICAL_ALLREDUCE=1 WEFT_HIERARCHICAL_ALLGATHER=0 WEFT_TIMELINE_MARK_CYCLES=1 WEFT_STALL_CHECK_DISABLE=1 \
    WEFT_STALL_CHECK_SECONDS=120 WEFT_STALL_SHUTDOWN_SECONDS=240 WEFT_LOG_LEVEL=info WEFT_INIT_TIMEOUT_SECONDS=\<unset\>
  grep -q "^\[0\] .*WEFT_TIMELINE=horovod timeline.json WEFT_TIMELINE_MARK" "$T/out" ||
    fail "timeline.filename: $(cat "$T/out")"
  [ ! -s "$T/err" ] || fail "keys without a weft equivalent were not passed over quietly: $(cat "$T/err")"
  # flags win, wherever they are on the command line
  # shellcheck disable=SC2086
  wr -np 1 --fusion-threshold-mb 8 --config-file "$T/hvd.yaml" --log-level ERROR --no-hierarchical-allreduce \
    --stall-check-warning-time-seconds 5 -- bash "$RANK" vars $HVD_VARS
  expect_rc 0
  expect_vars 1 WEFT_FUSION_THRESHOLD=8388608 WEFT_LOG_LEVEL=none WEFT_HIERARCHICAL_ALLREDUCE=0 \
    WEFT_STALL_CHECK_SECONDS=5 WEFT_CACHE_CAPACITY=2048 WEFT_STALL_SHUTDOWN_SECONDS=240
  # null values leave a setting alone; an unknown key is warned about; stall_check.enabled: true
  printf 'params:\n  fusion_threshold_mb: ~\n  cache_capacity:\n  typo_capacity: 3\nstall_check:\n  enabled: true\n' \
    >"$T/null.yaml"
  wr -np 1 --config-file "$T/null.yaml" -- bash "$RANK" vars WEFT_FUSION_THRESHOLD WEFT_CACHE_CAPACITY \
    WEFT_STALL_CHECK_DISABLE
  expect_rc 0
  expect_vars 1 "WEFT_FUSION_THRESHOLD=<unset>" "WEFT_CACHE_CAPACITY=<unset>" WEFT_STALL_CHECK_DISABLE=0
  expect_err "ignoring unknown key 'params.typo_capacity'"
  # an empty file (comments only) is fine
  printf '# nothing\n' >"$T/empty.yaml"
  wr -np 1 --config-file "$T/empty.yaml" true
  expect_rc 0
  # errors: exit 2, naming the file and the key or line
  printf 'params:\n  cache_capacity: lots\n' >"$T/bad.yaml"
  wr -np 1 --config-file "$T/bad.yaml" true
  expect_rc 2
  expect_err "--config-file $T/bad.yaml: params.cache_capacity wants a whole number (0 or more), not 'lots'"
  printf 'logging:\n  level: LOUD\n' >"$T/bad.yaml"
  wr -np 1 --config-file "$T/bad.yaml" true
  expect_rc 2
  expect_err "logging.level wants one of TRACE, DEBUG, INFO, WARNING, ERROR, FATAL, not 'LOUD'"
  printf 'params:\n  fusion_threshold_mb: [1\n' >"$T/bad.yaml"
  wr -np 1 --config-file "$T/bad.yaml" true
  expect_rc 2
  expect_err "--config-file $T/bad.yaml: line "
  printf -- '- a\n- b\n' >"$T/bad.yaml"
  wr -np 1 --config-file "$T/bad.yaml" true
  expect_rc 2
  expect_err "expected sections such as 'params:'"
  wr -np 1 --config-file "$T/none.yaml" true
  expect_rc 2
  expect_err "--config-file: cannot open '$T/none.yaml'"
}

# A case that cannot run here exits 77 (ctest: skipped), unless WEFT_TESTS_NO_SKIP=1 (or CI) forbids it.
skip_case() {
  local v=${WEFT_TESTS_NO_SKIP:-}
  [ -n "$v" ] || { [ -n "${CI:-}" ] && [ "${CI:-}" != false ] && v=1; }
  [ -n "$v" ] && [ "$v" != 0 ] && fail "cannot run here ($*), and WEFT_TESTS_NO_SKIP=1 (or CI) forbids skipping"
  echo "SKIP [$CASE]: $*"
  exit 77
}

# Remote ranks get weftrun's environment less the deny list; every rank gets
# PYTHONUNBUFFERED=1 unless it is set.
case_env_forward() {
  local denied="HOSTNAME HOST OLDPWD SHLVL HOME USER LOGNAME MAIL SHELL DISPLAY XAUTHORITY TMUX STY
    DBUS_SESSION_BUS_ADDRESS XDG_RUNTIME_DIR XDG_SESSION_ID SSH_AUTH_SOCK SSH_CONNECTION CUDA_VISIBLE_DEVICES
    HIP_VISIBLE_DEVICES WEFT_LISTEN_FD WEFT_BIND_ADDR"
  local v
  for v in $denied; do export "$v=caller-$v"; done
  export KEEP_ME='a b'\''c' PATH_LIKE=/opt/x:/opt/y LD_LIBRARY_PATH=/opt/lib
  unset PYTHONUNBUFFERED
  f() { echo hi; }
  export -f f # BASH_FUNC_f%%: not a name sh can export
  # shellcheck disable=SC2086
  wr -np 3 -H localhost:1,hostb:2 --rsh "$FAKE_RSH" -x DISPLAY -- bash "$RANK" vars KEEP_ME PATH_LIKE \
    LD_LIBRARY_PATH PYTHONUNBUFFERED $denied PWD
  expect_rc 0
  expect_vars 3 "KEEP_ME=a b'c" PATH_LIKE=/opt/x:/opt/y LD_LIBRARY_PATH=/opt/lib PYTHONUNBUFFERED=1 \
    DISPLAY=caller-DISPLAY
  local r line
  for r in 1 2; do
    line=$(grep "^\[$r\] " "$T/out")
    [[ $line == *"FAKE_HOST=hostb "* ]] || fail "rank $r did not start through the fake remote shell: $line"
    for v in $denied; do
      [ "$v" = DISPLAY ] && continue # -x DISPLAY forwards it
      # (bash, the rank, sets HOSTNAME, SHLVL, SHELL and OLDPWD of its own)
      [[ " $line " == *" $v=caller-$v "* ]] && fail "rank $r (remote) got the caller's $v: $line"
    done
    [[ " $line " == *" PWD=$(pwd -P) "* ]] || fail "rank $r (remote) does not run in weftrun's directory: $line"
  done
  # local ranks inherit everything
  line=$(grep "^\[0\] " "$T/out")
  for v in $denied; do
    case $v in WEFT_LISTEN_FD | SHLVL | OLDPWD) continue ;; esac # weftrun's for rank 0; bash's own
    [[ " $line " == *" $v=caller-$v "* ]] || fail "rank 0 (local) lacks $v: $line"
  done
  # the start script is still one 'sh -s' read: no export of the function
  grep -q "BASH_FUNC" "$T/err" && fail "a bash function reached the remote shell: $(cat "$T/err")"
  # a PYTHONUNBUFFERED the user set is kept (inherited or -x), locally and remotely
  export PYTHONUNBUFFERED=0
  wr -np 2 -H localhost:1,hostb:1 --rsh "$FAKE_RSH" -- bash "$RANK" vars PYTHONUNBUFFERED
  expect_rc 0
  expect_vars 2 PYTHONUNBUFFERED=0
  wr -np 2 -H localhost:1,hostb:1 --rsh "$FAKE_RSH" -x PYTHONUNBUFFERED=7 -- bash "$RANK" vars PYTHONUNBUFFERED
  expect_rc 0
  expect_vars 2 PYTHONUNBUFFERED=7
  # Python's output comes unbuffered, as it is written (not at exit)
  if command -v python3 >/dev/null; then
    unset PYTHONUNBUFFERED
    wr --timeout 3 -np 1 python3 -c 'import time; print("early"); time.sleep(30)'
    expect_rc 124
    grep -qx '\[0\] early' "$T/out" || fail "python's output was buffered: $(cat "$T/out")"
  fi
}

# the ssh command: the default template accepts a new host key (and only a
# new one: a changed key still fails, ssh's accept-new); -p and -i go right
# after "ssh". A fake ssh on PATH records its arguments and runs the shell
# here, as ssh would run it there.
case_hvd_ssh() {
  mkdir -p "$T/bin"
  cat >"$T/bin/ssh" <<'EOF'
#!/bin/sh
# fake ssh: ARGS... HOST sh -s
printf '%s\n' "$*" >>"$SSH_LOG"
eval "host=\${$(($# - 2))}"
exec env -i PATH=/usr/bin:/bin FAKE_HOST="$host" sh -s
EOF
  chmod +x "$T/bin/ssh"
  : >"$T/key"
  export SSH_LOG="$T/ssh.log"
  PATH="$T/bin:$PATH" wr -np 2 -H hostb:1,hostc:1 -- bash "$RANK" vars WEFT_RANK
  expect_rc 0
  grep -q '^\[0\] WEFT_RANK=0 FAKE_HOST=hostb ' "$T/out" && grep -q '^\[1\] WEFT_RANK=1 FAKE_HOST=hostc ' "$T/out" ||
    fail "the ranks did not start through ssh: $(cat "$T/out")"
  local dflt="-o BatchMode=yes -o StrictHostKeyChecking=accept-new"
  [ "$(sort "$SSH_LOG" | tr '\n' '|')" = "$dflt hostb sh -s|$dflt hostc sh -s|" ] ||
    fail "default ssh command: $(cat "$SSH_LOG")"
  : >"$SSH_LOG"
  PATH="$T/bin:$PATH" wr -np 1 -H bob@hostb:1 -p 2222 -i "$T/key" -- bash "$RANK" vars WEFT_RANK
  expect_rc 0
  [ "$(cat "$SSH_LOG")" = "-p 2222 -i $T/key -o BatchMode=yes -o StrictHostKeyChecking=accept-new bob@hostb sh -s" ] ||
    fail "-p/-i: $(cat "$SSH_LOG")"
  # the real ssh takes that command line (-G: prints its configuration, connects nowhere)
  if command -v ssh >/dev/null; then
    # shellcheck disable=SC2046 # the logged words, split
    ssh -G $(sed 's/ sh -s$//' "$SSH_LOG") >"$T/ssh.G" 2>&1 || fail "ssh -G: $(cat "$T/ssh.G")"
    grep -qx "port 2222" "$T/ssh.G" && grep -qx "stricthostkeychecking accept-new" "$T/ssh.G" &&
      grep -qx "identityfile $T/key" "$T/ssh.G" && grep -qx "batchmode yes" "$T/ssh.G" ||
      fail "ssh reads the options otherwise: $(grep -E '^(port|stricthost|identityfile|batchmode) ' "$T/ssh.G")"
  fi
  # a template that runs ssh by its path; the long forms
  : >"$SSH_LOG"
  wr -np 1 -H hostb:1 --rsh "$T/bin/ssh -o ConnectTimeout=5 {host}" --ssh-port=2200 --ssh-identity-file "$T/key" -- \
    bash "$RANK" vars WEFT_RANK
  expect_rc 0
  [ "$(cat "$SSH_LOG")" = "-p 2200 -i $T/key -o ConnectTimeout=5 hostb sh -s" ] ||
    fail "--rsh with -p/-i: $(cat "$SSH_LOG")"
}

# --network-interfaces: each host takes the first of the list it has
case_hvd_ifaces() {
  wr -np 3 -H localhost:1,hostb:2 --rsh "$FAKE_RSH" --network-interfaces nosuch0,lo -- bash "$RANK" vars WEFT_IFACE
  expect_rc 0
  expect_vars 3 WEFT_IFACE=lo
  wr -np 2 --network-interface lo -- bash "$RANK" vars WEFT_IFACE WEFT_ADDR
  expect_rc 0
  expect_vars 2 WEFT_IFACE=lo
  grep -q "WEFT_ADDR=127\.0\.0\.1:" "$T/out" || fail "rank 0 does not listen on lo's address: $(cat "$T/out")"
  # none there: the first, which the ranks (or, for rank 0 here, weftrun) report
  wr -np 2 -H hostb:2 --rsh "$FAKE_RSH" --network-interfaces nosuch0,nosuch1 -- bash "$RANK" vars WEFT_IFACE
  expect_rc 0
  expect_vars 2 WEFT_IFACE=nosuch0
  wr -np 2 --network-interfaces nosuch0,nosuch1 true
  expect_rc 1
  expect_err "network interface 'nosuch0' does not exist"
}
