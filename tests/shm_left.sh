#!/bin/sh
# shm_left.sh before|after FILE: the /dev/shm check around the whole suite
# (issue 3: no test may leave a file there, not even one that SIGKILLs a
# rank). "before" (fixture setup, runs first) records weft's entries in FILE;
# "after" (fixture cleanup, runs after every other test, passed or failed)
# fails naming every weft entry that was not there before and is still there
# 2 s later. A job's segment exists for a moment in every weft_init (created,
# mapped by the host's ranks, unlinked), so an entry seen once may belong to
# a job starting elsewhere on this machine; one that stays is a leak. The
# check sees the whole machine: another weft suite leaking while this one
# runs fails it too.
mode=$1
file=$2
entries() { ls -A /dev/shm 2>/dev/null | grep '^weft-' | LC_ALL=C sort; }
new() { entries | LC_ALL=C comm -13 "$file" -; }
case "$mode" in
  before)
    entries >"$file" || exit 1
    echo "/dev/shm: $(wc -l <"$file") weft entries before the tests"
    ;;
  after)
    [ -f "$file" ] || { echo "no record of /dev/shm before the tests ($file): run the suite, not this test alone"; exit 1; }
    first=$(new)
    if [ -n "$first" ]; then
      sleep 2
      now=$(new)
      left=$(printf '%s\n%s\n' "$first" "$now" | LC_ALL=C sort | uniq -d)
      if [ -n "$left" ]; then
        echo "FAIL: the tests left these in /dev/shm:"
        echo "$left"
        exit 1
      fi
    fi
    echo "/dev/shm: nothing left by the tests"
    ;;
  *)
    echo "usage: shm_left.sh before|after FILE" >&2
    exit 2
    ;;
esac
