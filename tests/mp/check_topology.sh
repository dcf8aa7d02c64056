#!/bin/sh
# check_topology.sh WEFTRUN WEFT_INFO HIER_HOSTS - runs weft-info --topology
# as a 4-rank job over two fake hosts (hier_hosts.sh) and checks what rank 0
# prints: both hosts with their ranks and local ranks, shm within a host and
# tcp across, and "hier" chosen for allreduce, allgather and broadcast.
# Then once outside a job: the single-rank view.
weftrun=$1 info=$2 hosts=$3
out=$("$weftrun" -np 4 --timeout 100 --no-tag-output sh "$hosts" hostA,hostA,hostB,hostB "$info" --topology) || {
  echo "check_topology.sh: the job failed:"; echo "$out"; exit 1; }
echo "$out"
fail=0
expect() {
  if ! printf '%s\n' "$out" | grep -Eq -- "$1"; then
    echo "check_topology.sh: no line matches '$1'"
    fail=1
  fi
}
expect '4 ranks on 2 hosts'
expect '^ *host 0 hostA: ranks 0 1 \(local ranks 0 1\)'
expect '^ *host 1 hostB: ranks 2 3 \(local ranks 0 1\)'
expect 'within a host shm, across hosts tcp'
expect '^ *allreduce +hier +hier +hier +hier *$'
expect '^ *allgather +hier +hier +hier +hier *$'
expect '^ *broadcast +hier +hier +hier +hier *$'
# the selection tables, board first
expect '^ *one host, board: every rank folds every input up to'
expect '^ *spans hosts, some host with several ranks: any size -> hier$'
# outside a job: one rank, one host, no hierarchical algorithm
out=$(env -u WEFT_RANK -u WEFT_SIZE -u WEFT_ADDR "$info" --topology) || { echo "$out"; exit 1; }
echo "$out"
expect '1 rank on 1 host'
expect '^ *allreduce +direct'
# (the chosen algorithms' rows; the selection tables below them list every row)
if printf '%s\n' "$out" | sed '/^selection tables/,$d' | grep -Eq ' hier( |$)'; then
  echo "check_topology.sh: a single rank chose hier"
  fail=1
fi
exit $fail
