#!/bin/sh
# grow_hosts.sh DIR FIRST LATER - a host discovery script for weftrun
# (--host-discovery-script): localhost:FIRST at its first run, localhost:LATER
# from the second on (weftrun runs it every second). DIR keeps the count.
n=$(cat "$1/runs" 2>/dev/null || echo 0)
echo $((n + 1)) >"$1/runs"
if [ "$n" -ge 1 ]; then echo "localhost:$3"; else echo "localhost:$2"; fi
