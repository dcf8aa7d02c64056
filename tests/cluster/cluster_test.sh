#!/usr/bin/env bash
# cluster_test.sh - multi-host weftrun on a test cluster of network
# namespaces (netns.sh): `cluster_test.sh CASE WEFTRUN MPDIR FAULTDIR`.
# MPDIR holds mp_reduce/mp_gather, FAULTDIR fault_peers. Cases:
#   2x2_reduce  2 hosts x 2 ranks of mp_reduce: passes; the rendezvous put
#               2 ranks on each host; same-host data went through shared
#               memory and cross-host data through TCP on the hosts' eth0
#   3x2_gather  3 hosts x 2 ranks of mp_gather, the same checks
#   user_at_host  2x2_reduce with the hosts given as USER@HOST
#   2x2_p2p     2 hosts x 2 ranks of mp_p2p (send/recv ring shifts: same-host
#               pairs through shm, cross-host pairs through TCP), the same
#               checks but loopback's share: small messages ride their
#               P2P_SEND control frames, over loopback between a host's ranks
#   remote      2 hosts x 1 rank of mp_remote_bulk: remote calls both ways
#               (chained on a pending output, fetches against the reference,
#               tensors up to 64 MiB on the bulk data path) over TCP on eth0;
#               then --kill-callee: the call in flight fails naming rank 1
#   kill        a rank on host 2 is SIGKILLed mid-job: weftrun stops the job
#               within the bound, names the rank and its host, exits 137
#   partition   host 2's link goes down mid-job (no RST): the job fails within
#               the bound, naming the lost peer; nothing is left behind
#   elastic     weftrun --min-np 3 on 2 hosts x 2 workers: a worker on host 2
#               is SIGKILLed mid-training; the 3 survivors re-form across the
#               hosts and finish with the reference's parameters (mp_elastic)
#   elastic_grow weftrun --host-discovery-script: 2 workers on host 1; at
#               step 15 discovery adds host 2 with 2 slots: weftrun starts
#               workers 2 and 3 there (through --rsh), the members take them
#               in at that commit, and all four finish with the reference's
#               parameters (mp_elastic_grow)
#   ssh_keys    weftrun's default remote shell, real ssh to an sshd in each
#               host: hosts missing from known_hosts are recorded and the job
#               runs (accept-new); after host 2's key changes, the job fails
#               promptly with ssh's refusal and known_hosts keeps the old key.
#               known_hosts is a tmpfs over ~/.ssh in a mount namespace of its
#               own: the user's is never read or written
# Exit 0 = pass, 77 = skipped (no network namespaces here; a failure instead
# with WEFT_TESTS_NO_SKIP=1 or CI set), else fail.
set -u
CASE=$1
WR=$2
MP=$3
FP=$4
HERE=$(cd "$(dirname "$0")" && pwd)
NETNS="$HERE/netns.sh"
D=$(mktemp -d "${TMPDIR:-/tmp}/weft_cluster.XXXXXX")
SUB=""
cleanup() {
  local f
  for f in "$D"/sshd.*.pid; do [ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
  [ -n "$SUB" ] && bash "$NETNS" down "$SUB"
  [ -n "${KEEP:-}" ] && cp -r "$D" /tmp/cluster_keep; rm -rf "$D"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# fail exits; in a subshell it would end only the subshell, so it also
# leaves a mark that the end looks for
fail() {
  echo "FAIL [cluster.$CASE]: $*" >&2
  echo "$*" >>"$D/FAILED"
  local f
  for f in "$D"/err "$D"/out; do
    [ -s "$f" ] && { echo "--- $(basename "$f") (last 40 lines):" >&2; tail -40 "$f" >&2; }
  done
  exit 1
}
# A case that cannot run here exits 77 (ctest: skipped), unless skipping is
# forbidden: WEFT_TESTS_NO_SKIP=1, the default where CI is set (CI must run
# what it claims to test: a missing capability fails there instead).
no_skip() {
  local v=${WEFT_TESTS_NO_SKIP:-}
  [ -n "$v" ] || { [ -n "${CI:-}" ] && [ "${CI:-}" != false ] && v=1; }
  [ -n "$v" ] && [ "$v" != 0 ]
}
skip() {
  no_skip && fail "cannot run here ($*), and WEFT_TESTS_NO_SKIP=1 (or CI) forbids skipping"
  echo "SKIP [cluster.$CASE]: $*"
  exit 77
}
now() { date +%s.%N; }
calc() { awk "BEGIN { printf \"%.3f\", $1 }"; }
less() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }

# up N: the cluster; HOSTS gets its host names
up() {
  local out rc
  out=$(bash "$NETNS" up "$1" 2>"$D/err.netns")
  rc=$?
  [ $rc = 77 ] && skip "$(cat "$D/err.netns")"
  [ $rc = 0 ] || fail "cannot build the test cluster: $(cat "$D/err.netns")"
  SUB=${out%% *}
  HOSTS=${out#* }
}
# hostlist SLOTS [USER]: "h1:SLOTS,h2:SLOTS,..." (or "USER@h1:SLOTS,...")
hostlist() { local h l="" u=${2:+$2@}; for h in $HOSTS; do l="$l,$u$h:$1"; done; echo "${l#,}"; }
# bytes sent on interface IF in host H
tx() { ip netns exec "$1" cat "/sys/class/net/$2/statistics/tx_bytes"; }
RSH='ip netns exec {host}'

# run_mp NHOSTS PROGRAM [USER]: NHOSTS x 2 ranks, with the checks of the
# header. With USER the hosts are USER@HOST: the remote shell (a wrapper of
# ip netns exec that drops USER@, as ssh would take it) gets USER@HOST; rank 0's
# address and WEFT_HOSTNAME must not carry it.
run_mp() {
  local nh=$1 prog=$2 np=$(( $1 * 2 )) large=${LARGE:-300007} h k rsh=$RSH
  up "$nh"
  if [ -n "${3:-}" ]; then
    printf '#!/bin/sh\nh=${1#*@}\nshift\nexec ip netns exec "$h" "$@"\n' >"$D/nsrsh"
    chmod +x "$D/nsrsh"
    rsh="$D/nsrsh {host}"
  fi
  declare -A tx0 lo0
  for h in $HOSTS; do tx0[$h]=$(tx "$h" eth0); lo0[$h]=$(tx "$h" lo); done
  WEFT_LOG_LEVEL=info timeout -k 5 150 "$WR" -np $np -H "$(hostlist 2 "${3:-}")" --rsh "$rsh" --timeout 140 \
    -x WEFT_TIMEOUT_SECONDS=60 "$MP/$prog" --large $large >"$D/out" 2>"$D/err"
  local rc=$?
  [ $rc = 0 ] || fail "the job exited $rc"
  for k in $(seq 0 $((np - 1))); do
    grep -q "^\[$k\] DONE rank $k: 0 failure" "$D/out" || fail "rank $k did not finish cleanly"
    # what the rendezvous computed from the hosts the ranks reported
    grep -q "^\[$k\] .*rendezvous done .*: $np ranks, local $((k % 2))/2, cross $((k / 2))/$nh" "$D/err" ||
      fail "rank $k: the rendezvous did not place it as local $((k % 2))/2, cross $((k / 2))/$nh"
    grep -q "^\[$k\] .*shared memory with 2 local ranks" "$D/err" || fail "rank $k did not use shared memory"
  done
  # every host sent at least its share of the data (4 bytes * large per
  # cross-host exchange, many collectives) over eth0, i.e. over TCP across
  # hosts, and far less over loopback: its two ranks talk through shm
  for h in $HOSTS; do
    local e=$(( $(tx "$h" eth0) - ${tx0[$h]} )) l=$(( $(tx "$h" lo) - ${lo0[$h]} ))
    echo "host $h: $e bytes out on eth0, $l on lo"
    [ $e -gt $(( large * 4 )) ] || fail "host $h sent only $e bytes to other hosts"
    [ "${LO_CHECK:-1}" = 0 ] || [ $l -lt $(( e / 4 )) ] ||
      fail "host $h sent $l bytes over loopback (eth0: $e): same-host data did not use shm"
  done
}

# loop_job: 2 hosts x 2 ranks allreducing until something breaks, in the
# background; sets WRPID once every rank wrote its pid file
loop_job() {
  up 2
  export FAULT_DIR=$D
  "$WR" -np 4 -H "$(hostlist 2)" --rsh "$RSH" --timeout 60 -x FAULT_DIR -x WEFT_HEARTBEAT_TIMEOUT=2 \
    -x WEFT_HEARTBEAT_INTERVAL=0.5 -x WEFT_TIMEOUT_SECONDS=30 "$FP/fault_peers" loop --die none \
    >"$D/out" 2>"$D/err" &
  WRPID=$!
  local k
  for k in $(seq 200); do
    [ -s "$D/pid.0" ] && [ -s "$D/pid.1" ] && [ -s "$D/pid.2" ] && [ -s "$D/pid.3" ] && break
    sleep 0.05
  done
  [ -s "$D/pid.3" ] || { kill -KILL $WRPID; fail "the ranks did not start"; }
  sleep 0.5
}
# nothing of the job is left
expect_gone() {
  local k p
  for k in 0 1 2 3; do
    p=$(cat "$D/pid.$k")
    for _ in $(seq 20); do [ -e "/proc/$p" ] || break; sleep 0.1; done
    [ -e "/proc/$p" ] && { kill -KILL "$p"; fail "rank $k (pid $p) is still alive"; }
  done
  return 0
}

# ssh_keys: an sshd per host (sshd_start HOST), weftrun run in host 1 with
# ssh's known_hosts kept in $D/known_hosts between runs (ssh_job)
sshd_start() {
  local h=$1 k
  [ -f "$D/hk.$h" ] || ssh-keygen -q -t ed25519 -N '' -C "host $h" -f "$D/hk.$h" || fail "ssh-keygen"
  printf '%s\n' "ListenAddress $h" "HostKey $D/hk.$h" "AuthorizedKeysFile $D/authorized_keys" \
    "PermitRootLogin prohibit-password" "PasswordAuthentication no" "KbdInteractiveAuthentication no" "UsePAM no" \
    "StrictModes no" "PidFile $D/sshd.$h.pid" >"$D/sshd.$h"
  rm -f "$D/sshd.$h.pid"
  ip netns exec "$h" /usr/sbin/sshd -f "$D/sshd.$h" -E "$D/sshd.$h.log" || fail "sshd did not start in $h"
  for k in $(seq 100); do
    [ -s "$D/sshd.$h.pid" ] && ip netns exec "$h" timeout 1 bash -c "exec 3<>/dev/tcp/$h/22" 2>/dev/null && return 0
    sleep 0.05
  done
  fail "sshd in $h does not listen: $(cat "$D/sshd.$h.log")"
}
sshd_stop() {
  local p
  p=$(cat "$D/sshd.$1.pid" 2>/dev/null) && kill "$p" 2>/dev/null
  for _ in $(seq 100); do { [ -n "$p" ] && [ -e "/proc/$p" ]; } || return 0; sleep 0.05; done
  fail "sshd in $1 did not stop"
}
ssh_job() {
  local t0
  t0=$(now)
  # shellcheck disable=SC2016 # expanded by the inner bash
  ip netns exec "$H1" unshare -m --propagation private bash -c '
    home=$(getent passwd "$(id -un)" | cut -d: -f6)
    mkdir -p "$home/.ssh" && mount -t tmpfs -o mode=700 tmpfs "$home/.ssh" || exit 97
    [ -e "$1" ] && cp "$1" "$home/.ssh/known_hosts"
    timeout -k 5 60 "$2" -np 2 -H "$3" -i "$4" --timeout 50 -x WEFT_TIMEOUT_SECONDS=30 "$5" --large 1001
    rc=$?
    cp "$home/.ssh/known_hosts" "$1" 2>/dev/null
    exit $rc' _ "$D/known_hosts" "$WR" "$H1:1,$H2:1" "$D/id" "$MP/mp_reduce" >"$D/out" 2>"$D/err"
  JOB_RC=$?
  JOB_DT=$(calc "$(now) - $t0")
  [ $JOB_RC = 97 ] && skip "cannot mount a tmpfs over ~/.ssh in a mount namespace"
  return 0
}
# the key known_hosts holds for host $1 (empty: none), and a host's own key
known_key() { ssh-keygen -F "$1" -f "$D/known_hosts" 2>/dev/null | grep -v '^#' | awk '{print $3}'; }
host_key() { awk '{print $2}' "$D/hk.$1.pub"; }

case $CASE in
2x2_reduce) run_mp 2 mp_reduce ;;
3x2_gather) run_mp 3 mp_gather ;;
user_at_host) LARGE=30011 run_mp 2 mp_reduce weftuser ;; # about the addresses: less data
2x2_p2p) LO_CHECK=0 run_mp 2 mp_p2p ;;
remote)
  up 2
  declare -A e0
  for h in $HOSTS; do e0[$h]=$(tx "$h" eth0); done
  timeout -k 5 100 "$WR" -np 2 -H "$(hostlist 1)" --rsh "$RSH" --timeout 90 -x WEFT_TIMEOUT_SECONDS=60 \
    "$MP/mp_remote_bulk" >"$D/out" 2>"$D/err" || fail "the job exited $?"
  for k in 0 1; do grep -q "^\[$k\] DONE rank $k: 0 failure" "$D/out" || fail "rank $k did not finish cleanly"; done
  # each host sent its 64 MiB put and input and the 2 x 64 MiB it was asked to fetch back across
  for h in $HOSTS; do
    e=$(( $(tx "$h" eth0) - ${e0[$h]} ))
    echo "host $h: $e bytes out on eth0"
    [ $e -gt $(( 4 * 64 << 20 )) ] || fail "host $h sent only $e bytes to the other host"
  done
  timeout -k 5 60 "$WR" -np 2 -H "$(hostlist 1)" --rsh "$RSH" --timeout 50 -x WEFT_TIMEOUT_SECONDS=30 \
    -x WEFT_HEARTBEAT_TIMEOUT=5 "$MP/mp_remote_bulk" --kill-callee >"$D/out" 2>"$D/err" ||
    fail "the kill job exited $?"
  grep -q "^\[0\] PASS rank 0: a 64 MiB put or fetch to rank 1 fails naming it" "$D/out" ||
    fail "rank 0's call did not fail naming rank 1"
  grep "^\[0\] INFO" "$D/out"
  ;;
kill)
  loop_job
  h2=${HOSTS#* }
  t0=$(now)
  kill -KILL "$(cat "$D/pid.3")"
  wait $WRPID
  rc=$?
  dt=$(calc "$(now) - $t0")
  [ $rc = 137 ] || fail "weftrun exited $rc, not 137 (the killed rank's status)"
  grep -q "^weftrun: rank 3 (pid [0-9]* on host $h2) was killed by signal 9" "$D/err" ||
    fail "weftrun did not name rank 3 on host $h2 as the cause"
  expect_gone
  less "$dt" 8 || fail "the job took $dt s to stop (bound 8 s)"
  grep "^weftrun:" "$D/err"
  echo "job stopped ${dt}s after rank 3 on $h2 was killed (bound 8 s)"
  ;;
partition)
  loop_job
  h2=${HOSTS#* }
  t0=$(now)
  bash "$NETNS" cut "$h2" || fail "cannot take $h2's link down"
  wait $WRPID
  rc=$?
  dt=$(calc "$(now) - $t0")
  [ $rc = 5 ] || fail "weftrun exited $rc, not 5 (the ranks' status when they lose a peer)"
  # the ranks name the peer on the other side, and so does weftrun
  grep -q "rank [23] ($h2) is unresponsive" "$D/err" || fail "no rank on host $h2 was reported unresponsive"
  grep -q "^weftrun: rank [0-3] (pid [0-9]* on host $SUB\.[12]) exited with status 5 because it lost rank [0-3] on host" \
    "$D/err" || fail "weftrun did not name the lost peer"
  expect_gone
  less "$dt" 10 || fail "the job took $dt s to fail (bound: heartbeat timeout 2 s + 8 s)"
  grep "^weftrun:" "$D/err"
  echo "job failed ${dt}s after the partition (bound 10 s)"
  ;;
ssh_keys)
  [ -x /usr/sbin/sshd ] || skip "no /usr/sbin/sshd (Debian: openssh-server)"
  { command -v ssh && command -v ssh-keygen; } >/dev/null || skip "no ssh client (Debian: openssh-client)"
  command -v unshare >/dev/null || skip "no unshare(1)"
  up 2
  H1=${HOSTS%% *} H2=${HOSTS#* }
  mkdir -p /run/sshd # sshd's privilege separation directory
  ssh-keygen -q -t ed25519 -N '' -C weft-test -f "$D/id" || fail "ssh-keygen"
  cp "$D/id.pub" "$D/authorized_keys"
  sshd_start "$H1"
  sshd_start "$H2"
  # 1. neither host is known: both keys are recorded and the job runs
  ssh_job
  [ $JOB_RC = 0 ] || fail "the first job (hosts not in known_hosts) exited $JOB_RC"
  for k in 0 1; do grep -q "^\[$k\] DONE rank $k: 0 failure" "$D/out" || fail "rank $k did not finish cleanly"; done
  for h in "$H1" "$H2"; do
    [ "$(known_key "$h")" = "$(host_key "$h")" ] || fail "known_hosts did not record $h's key: $(cat "$D/known_hosts")"
  done
  echo "1. hosts not in known_hosts: recorded, the job ran (${JOB_DT}s)"
  # 2. host 2's key changes: ssh refuses it, the job fails promptly naming rank 1's host, the old key stays
  old=$(host_key "$H2")
  sshd_stop "$H2"
  rm -f "$D/hk.$H2" "$D/hk.$H2.pub"
  sshd_start "$H2"
  [ "$(host_key "$H2")" != "$old" ] || fail "the new host key equals the old one"
  ssh_job
  [ $JOB_RC = 0 ] && fail "the job ran although host $H2's key changed"
  grep -q "REMOTE HOST IDENTIFICATION HAS CHANGED\|Host key verification failed" "$D/err" ||
    fail "ssh's refusal of the changed key is not in the job's output"
  grep -q "^weftrun: rank 1 .*$H2" "$D/err" || fail "weftrun did not name rank 1 on $H2"
  [ "$(known_key "$H2")" = "$old" ] || fail "known_hosts no longer holds $H2's old key"
  less "$JOB_DT" 30 || fail "the refused job took $JOB_DT s to end (bound 30 s)"
  grep "^weftrun:" "$D/err"
  echo "2. a changed key: refused, the job exited $JOB_RC in ${JOB_DT}s, the old key kept"
  ;;
elastic)
  # weftrun --min-np 3, 2 hosts x 2 workers; worker 3 (host 2) SIGKILLs itself
  # mid-training: the three survivors, across both hosts, re-form (generation
  # 2: rank 0 on host 1 opens its port on the host's address, the others
  # reach it) and finish bit-exact (mp_elastic.c)
  up 2
  h2=${HOSTS#* }
  # weftrun runs in host 1 (the ranks must reach its driver: the root namespace
  # is not on the cluster's network) and binds eth0's address there
  h1=${HOSTS%% *}
  ip netns exec "$h1" timeout -k 5 110 "$WR" -np 4 -H "$(hostlist 2)" --rsh "$RSH" --network-interfaces eth0 \
    --min-np 3 --elastic-timeout 30 --timeout 100 \
    -x WEFT_TIMEOUT_SECONDS=30 "$MP/mp_elastic" --workers 4 --die-worker 3 --die-step 23 --steps 60 \
    --commit-every 10 >"$D/out" 2>"$D/err"
  rc=$?
  [ $rc = 0 ] || fail "the job exited $rc"
  grep -q "^weftrun: elastic: worker 3 (pid [0-9]* on host $h2) was killed by signal 9" "$D/err" ||
    fail "weftrun did not name worker 3 on $h2"
  grep -q "^weftrun: elastic: generation 2: 3 ranks (workers 0, 1, 2)" "$D/err" || fail "no generation 2 of 3 ranks"
  for k in 0 1 2; do grep -q "^\[$k\] PASS: worker $k" "$D/out" || fail "worker $k did not finish with the reference"; done
  grep "^weftrun:" "$D/err"
  ;;
elastic_grow)
  up 2
  h1=${HOSTS%% *} h2=${HOSTS#* }
  echo "$h1:2" >"$D/hosts"
  printf '%s:2\n%s:2\n' "$h1" "$h2" >"$D/hosts.next" # what rank 0 puts in place at step 15
  ip netns exec "$h1" timeout -k 5 110 "$WR" -np 2 --min-np 2 --max-np 4 --host-discovery-script "cat $D/hosts" \
    --rsh "$RSH" --network-interfaces eth0 --elastic-timeout 30 --timeout 100 -x WEFT_TIMEOUT_SECONDS=30 \
    "$MP/mp_elastic_grow" --steps 30 --commit-every 5 --workers 2 --grow-step 15 --grow-to 4 \
    --hosts-file "$D/hosts" >"$D/out" 2>"$D/err"
  rc=$?
  [ $rc = 0 ] || fail "the job exited $rc"
  for k in 2 3; do
    grep -q "^weftrun: elastic: host discovery: starting worker $k on host $h2" "$D/err" ||
      fail "weftrun did not start worker $k on $h2"
  done
  grep -q "^weftrun: elastic: generation 2: 4 ranks (workers 0, 1, 2, 3)" "$D/err" || fail "no generation 2 of 4 ranks"
  for k in 0 1 2 3; do grep -q "^\[$k\] PASS: worker $k" "$D/out" || fail "worker $k did not finish with the reference"; done
  grep "^weftrun:" "$D/err"
  ;;
*)
  echo "cluster_test.sh: unknown case '$CASE'" >&2
  exit 2
  ;;
esac
[ -e "$D/FAILED" ] && { echo "FAIL [cluster.$CASE]: a check failed in a subshell: $(cat "$D/FAILED")" >&2; exit 1; }
echo "PASS [cluster.$CASE]"
