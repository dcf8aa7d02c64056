#!/bin/sh
# hier_hosts.sh HOSTS command [args...] - runs one rank of a weftrun job as
# if on a host of its own: HOSTS is a comma list of host names, one per rank
# (rank i gets item i+1), e.g. hA,hA,hB,hB makes a 2-host job on loopback.
# WEFT_HOSTNAME names the host at the rendezvous; weftrun's own placement
# (one host) is dropped so that the rendezvous computes local and cross
# ranks. MP_HIER_HOSTS passes the list on to the program.
hosts=$1
shift
if [ -z "$hosts" ] || [ $# -eq 0 ]; then
  echo "usage: hier_hosts.sh HOSTS command [args...]" >&2
  exit 2
fi
if [ -z "$WEFT_RANK" ]; then
  echo "hier_hosts.sh: WEFT_RANK is not set (run under weftrun)" >&2
  exit 2
fi
host=$(printf '%s\n' "$hosts" | cut -d, -f"$((WEFT_RANK + 1))")
if [ -z "$host" ]; then
  echo "hier_hosts.sh: no host for rank $WEFT_RANK in '$hosts'" >&2
  exit 2
fi
unset WEFT_LOCAL_RANK WEFT_LOCAL_SIZE WEFT_CROSS_RANK WEFT_CROSS_SIZE
unset HOROVOD_LOCAL_RANK HOROVOD_LOCAL_SIZE HOROVOD_CROSS_RANK HOROVOD_CROSS_SIZE
WEFT_HOSTNAME=$host
MP_HIER_HOSTS=$hosts
export WEFT_HOSTNAME MP_HIER_HOSTS
exec "$@"
