#!/usr/bin/env bash
# netns.sh - a test cluster on one machine: network namespaces as "hosts".
#
#   netns.sh up N          creates N hosts (2..8) and prints one line:
#                            "<subnet> <host1> <host2> ..."
#                          Each host is a network namespace named after its
#                          address (10.X.Y.i, /24), so that
#                            weftrun -H 10.X.Y.1:2,10.X.Y.2:2 --rsh 'ip netns exec {host}'
#                          both resolves and enters the host. The hosts are
#                          joined by veth pairs to a bridge inside one more
#                          namespace (wfbr-10.X.Y); the root namespace's
#                          interfaces are never touched. X.Y is random, and
#                          taken only if free, so parallel runs do not collide.
#   netns.sh down SUBNET   deletes the hosts and the bridge of SUBNET (10.X.Y).
#   netns.sh cut HOST      takes HOST's link to the bridge down (a partition:
#                          packets vanish, no RST); netns.sh mend HOST undoes it.
#   netns.sh run N CMD...  up N, runs CMD with WEFT_CLUSTER_HOSTS="host1 host2 ..."
#                          and WEFT_CLUSTER_SUBNET set, then down (on every exit
#                          path); exits with CMD's status.
#
# Needs root (or CAP_SYS_ADMIN + CAP_NET_ADMIN) and ip(8). Exit status 77 when
# namespaces cannot be created here (a container without the capability).
set -u

die() { echo "netns.sh: $*" >&2; exit 1; }
skip() { echo "netns.sh: SKIP: $*" >&2; exit 77; }

bridge_of() { echo "wfbr-$1"; }

down() {
  local sub=$1 ns
  [[ $sub =~ ^10\.[0-9]+\.[0-9]+$ ]] || die "down wants a subnet 10.X.Y, not '$sub'"
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    case $ns in "$sub".* | "$(bridge_of "$sub")") ip netns del "$ns" 2>/dev/null ;; esac
  done
  return 0
}

# reaches A B: from host A, a TCP connection to a closed port of B is
# refused (B answered) rather than timing out (no ping needed)
reaches() {
  local err
  err=$(ip netns exec "$1" timeout 2 bash -c "exec 3<>/dev/tcp/$2/9" 2>&1)
  [[ $err == *"refused"* ]]
}

up() {
  local n=$1 sub="" try i err
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 2 ] && [ "$n" -le 8 ] || die "up wants 2 to 8 hosts, not '$n'"
  command -v ip >/dev/null || skip "no ip(8) command"
  for try in $(seq 20); do
    sub="10.$((64 + RANDOM % 64)).$((RANDOM % 256))"
    # the bridge namespace is the lock: creating it fails if the subnet is taken
    if err=$(ip netns add "$(bridge_of "$sub")" 2>&1); then break; fi
    case $err in
      *"File exists"*) sub="" ;;
      *) skip "cannot create network namespaces: $err" ;;
    esac
  done
  [ -n "$sub" ] || die "no free subnet found"
  local br
  br=$(bridge_of "$sub")
  {
    ip -n "$br" link add br0 type bridge &&
      ip -n "$br" link set br0 up &&
      ip -n "$br" link set lo up
  } || { down "$sub"; die "cannot create the bridge in $br"; }
  local hosts=""
  for i in $(seq "$n"); do
    local h="$sub.$i"
    {
      ip netns add "$h" &&
        ip link add eth0 netns "$h" type veth peer name "h$i" netns "$br" &&
        ip -n "$br" link set "h$i" master br0 &&
        ip -n "$br" link set "h$i" up &&
        ip -n "$h" addr add "$h/24" dev eth0 &&
        ip -n "$h" link set eth0 up &&
        ip -n "$h" link set lo up
    } >&2 || { down "$sub"; die "cannot set up host $h"; }
    hosts="$hosts $h"
  done
  # wait until every host reaches every other (the bridge learns, DAD ends)
  local a b ok
  for try in $(seq 50); do
    ok=1
    for a in $hosts; do
      for b in $hosts; do
        [ "$a" = "$b" ] && continue
        reaches "$a" "$b" || { ok=0; break 2; }
      done
    done
    [ $ok = 1 ] && break
    sleep 0.1
  done
  [ $ok = 1 ] || { down "$sub"; die "the hosts cannot reach each other"; }
  echo "$sub$hosts"
}

link() { # link HOST up|down
  local h=$1 state=$2 sub i
  [[ $h =~ ^(10\.[0-9]+\.[0-9]+)\.([0-9]+)$ ]] || die "'$h' is not a cluster host"
  sub=${BASH_REMATCH[1]} i=${BASH_REMATCH[2]}
  ip -n "$(bridge_of "$sub")" link set "h$i" "$state"
}

case ${1:-} in
  up) up "${2:-}" ;;
  down) down "${2:-}" ;;
  cut) link "${2:-}" down ;;
  mend) link "${2:-}" up ;;
  run)
    shift
    n=${1:-}
    shift
    [ $# -gt 0 ] || die "run wants N and a command"
    out=$(up "$n") || exit $?
    set -- "$@"
    WEFT_CLUSTER_SUBNET=${out%% *}
    WEFT_CLUSTER_HOSTS=${out#* }
    export WEFT_CLUSTER_SUBNET WEFT_CLUSTER_HOSTS
    trap 'down "$WEFT_CLUSTER_SUBNET"' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    "$@"
    exit $?
    ;;
  *)
    echo "usage: netns.sh up N | down SUBNET | cut HOST | mend HOST | run N CMD..." >&2
    exit 2
    ;;
esac
