#!/bin/sh
# check_topology.sh WEFTRUN WEFT_INFO HIER_HOSTS - runs weft-info --topology
# as a 4-rank job over two fake hosts (hier_hosts.sh) and checks what rank 0
# prints: both hosts with their ranks and local ranks, shm within a host and
# tcp across, "hier" chosen for allreduce, allgather and broadcast, and the
# host segment's regions (2 local ranks: full 16 x 64 KiB rings) adding up
# to its total. Then on one host with declared NUMA layouts: the node
# grouping, the within-host order and "numa" chosen.
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
# the per-host shared memory: 2 local ranks, the regions add up to the total
expect '^ *per-host shared memory \(rank 0.s host, n = 2 local ranks\):$'
expect '^ *ring inboxes +4\.0 MiB +n x 2052 KiB: per receiver a doorbell and n-1 rings of 16 x 65536 B'
expect '^ *mailboxes +560\.0 KiB +n x 280 KiB: .* 16 per sender; remote calls: .* 16 per sender$'
expect '^ *formula: 4 KiB \+ n x \(2052 KiB ring inbox \+ [0-9]+ KiB stage \+ 280 KiB mailbox inbox\) \+ board;$'
if ! printf '%s\n' "$out" | awk '
  /^ *per-host shared memory/ { on = 1; next }
  on && /^ *formula:/ { on = 0 }
  on { v = ($3 == "MiB") ? $2 * 1024 : $2; if ($1 == "total") total = v; else if ($1 == "ring") sum += ($4 == "MiB") ? $3 * 1024 : $3; else sum += v }
  END { d = sum - total; if (total == 0 || d > 200 || d < -200) { printf "regions %.1f KiB, total %.1f KiB\n", sum, total; exit 1 } }'; then
  echo "check_topology.sh: the segment's regions do not add up to its total"
  fail=1
fi
# the selection tables, board first
expect '^ *one host, board: every rank folds every input up to'
expect '^ *spans hosts, some host with several ranks: any size -> hier$'
# a declared NUMA layout on one host (WEFT_NUMA_NODES, two nodes interleaved):
# the node grouping, the within-host order, the node-aware pattern's folds,
# and "numa" chosen for allreduce, broadcast and allgather from 64 KiB (not
# reducescatter); "off": none
out=$(WEFT_NUMA_NODES=0,1,0,1 "$weftrun" -np 4 --timeout 100 --no-tag-output "$info" --topology) || {
  echo "check_topology.sh: the NUMA job failed:"; echo "$out"; exit 1; }
echo "$out"
expect '^NUMA layout \(rank 0.s host, 2 groups\): node 0: ranks 0 2; node 1: ranks 1 3$'
expect '^ *within-host order \(ranks grouped by node\): 0 2 1 3$'
expect '^ *allreduce folds in rank order, each slice by its own rank \(nodes crossed per chunk, in 1/4 chunks: chain 12, flat 8\)$'
expect '^ *allreduce +shm +numa +numa +numa *$'
expect '^ *broadcast +shm +numa +numa +numa *$'
expect '^ *allgather +shm +numa +numa +numa *$'
expect '^ *reducescatter +shm +shm +shm +shm *$'
expect '^ *one host, staging, ranks on several NUMA nodes: >= 64 KiB -> numa$'
out=$(WEFT_NUMA_NODES=0,0,1,1 "$weftrun" -np 4 --timeout 100 --no-tag-output "$info" --topology) || {
  echo "check_topology.sh: the NUMA job failed:"; echo "$out"; exit 1; }
echo "$out"
expect 'allreduce folds in rank order, run by run .*; runs: \[0 1\] \[2 3\]$'
out=$(WEFT_NUMA_NODES=off "$weftrun" -np 4 --timeout 100 --no-tag-output "$info" --topology) || {
  echo "check_topology.sh: the job failed:"; echo "$out"; exit 1; }
echo "$out"
expect '^NUMA layout \(rank 0.s host\): none '
expect '^ *allreduce +shm +shm +shm +shm *$'
# outside a job: one rank, one host, no hierarchical algorithm
out=$(env -u WEFT_RANK -u WEFT_SIZE -u WEFT_ADDR "$info" --topology) || { echo "$out"; exit 1; }
echo "$out"
expect '1 rank on 1 host'
expect '^per-host shared memory: none \(one rank per host\)$'
expect '^ *allreduce +direct'
# (the chosen algorithms' rows; the selection tables below them list every row)
if printf '%s\n' "$out" | sed '/^selection tables/,$d' | grep -Eq ' hier( |$)'; then
  echo "check_topology.sh: a single rank chose hier"
  fail=1
fi
exit $fail
