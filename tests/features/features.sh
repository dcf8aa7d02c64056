#!/usr/bin/env bash
# features.sh - the feature tests that need more than one program run or
# that check what the library writes (log lines, timeline files, weft-info),
# one case per ctest test:
#
#   features.sh CASE NP WEFTRUN FEATBIN PYTHON WEFTINFO SRCDIR
#
#   fusion-integer | fusion-random   feat_fusion (three worlds: default
#       fusion, a 16 KiB threshold, fusion off; outputs compared bit for
#       bit), then the timelines prove fusion happened in the default world
#       (ALLREDUCE phases of 2+ tensors open at once on every rank) and never
#       with WEFT_FUSION_THRESHOLD=0 (at most one at a time); the engine's
#       debug log shows fused allreduces run in place (segments) with empty
#       tensors among them
#   stall-warn | stall-shutdown | stall-group | stall-horovod
#       feat_stall, then each rank's stderr: the stall report names the
#       tensor and the missing rank on the coordinator; every waiting rank
#       logs "this rank waits"; a rank that is not waiting does not
#       (stall-horovod: the same as stall-shutdown through the HOROVOD_*
#       names of the knobs)
#   timeline       feat_timeline under WEFT_TIMELINE=.../env.%r.json with
#       WEFT_TIMELINE_MARK_CYCLES=1, then timeline_check.py on every file
#   params         weft-info lists every knob with its default and alias,
#       and every variable the library reads is in its table; every src/
#       folder includes only the folders below it (the layers), and api/
#       reaches the engine only through engine/submit.h
#   alias-fusion   HOROVOD_FUSION_THRESHOLD=0 disables fusion exactly like
#       WEFT_FUSION_THRESHOLD=0 (counted from the engine's debug log), and
#       WEFT_* wins over HOROVOD_*
#   alias-timeline HOROVOD_TIMELINE / HOROVOD_TIMELINE_MARK_CYCLES
#   fusion-pack    WEFT_FUSION_PACK_MAX_BYTES below the probe's tensors: over
#       TCP every tensor runs alone (fusing would pack it); on one host's
#       staging they still fuse, and run in place (segments), but not when
#       WEFT_ALGO_ALLREDUCE forces an algorithm that packs; with the limit
#       off (0) they fuse over TCP too. Counted from the engine's debug log.
#   fusion-gather  feat_fuse_gather --probe: allgathers and reducescatters
#       submitted at once run as fewer collectives than tensors (engine debug
#       log), and as one each with WEFT_FUSION_THRESHOLD=0
#   cache-hits     feat_cache: a member's response cache reports hits
#   grouped-unit   feat_fuse_gather: the coordinator logs that each grouped op's
#       tensors were published together (all of them, as one unit)
#   cache-resend   feat_cache with WEFT_CACHE_CAPACITY=1 on the coordinator
#       only: members name entries it has evicted, so it must answer RESEND
#       and they must resend in full (both logged at debug level, counted
#       here); results stay right. Then the reverse (members at 1): results
#       stay right too.
#
# Temporary files go to a fresh directory under $TMPDIR, removed on success
# and kept (and named) on failure.
set -u
CASE=$1 NP=$2 WEFTRUN=$3 FEATBIN=$4 PYTHON=$5 WEFTINFO=$6 SRCDIR=$7
CHECK="$SRCDIR/timeline_check.py"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/weft-features.XXXXXX") || exit 1

# Failures are recorded in a file, not a shell variable: a check that runs
# in a subshell ($(...), a pipeline, ( ... )) still fails the case.
fail() {
  echo "FAIL: $*"
  echo "$*" >>"$TMP/FAILURES"
}

finish() {
  local FAILS=0
  [ -e "$TMP/FAILURES" ] && FAILS=$(wc -l <"$TMP/FAILURES")
  if [ "$FAILS" -eq 0 ]; then
    rm -rf "$TMP"
    echo "PASS: $CASE"
    exit 0
  fi
  echo "FAILED: $CASE ($FAILS failure(s)); files kept in $TMP"
  exit 1
}

# run_job NAME [env assignments...] -- program args...: runs NP ranks with
# per-rank output files under $TMP/NAME, prints them, records the status.
run_job() {
  local name=$1
  shift
  local envs=()
  while [ "$1" != "--" ]; do
    envs+=("$1")
    shift
  done
  shift
  mkdir -p "$TMP/$name"
  env "${envs[@]}" WEFT_TIMEOUT_SECONDS=30 "$WEFTRUN" -np "$NP" --timeout 100 --output-filename "$TMP/$name/out" "$@"
  local rc=$?
  for ((r = 0; r < NP; r++)); do
    sed "s/^/[$name $r] /" "$TMP/$name/out/rank.$r/stdout" 2>/dev/null
    sed "s/^/[$name $r stderr] /" "$TMP/$name/out/rank.$r/stderr" 2>/dev/null
  done
  [ "$rc" -eq 0 ] || fail "$name: the job exited with status $rc"
  return "$rc"
}

stderr_of() { cat "$TMP/$1/out/rank.$2/stderr" 2>/dev/null; }

# has NAME RANK PATTERN WHY: rank's stderr must match the extended regex.
has() { stderr_of "$1" "$2" | grep -Eq -- "$3" || fail "$1: rank $2's stderr has no line matching /$3/ ($4)"; }
lacks() { ! stderr_of "$1" "$2" | grep -Eq -- "$3" || fail "$1: rank $2's stderr matches /$3/ ($4)"; }

case "$CASE" in
fusion-integer | fusion-random)
  values=${CASE#fusion-}
  run_job fusion WEFT_LOG_LEVEL=debug WEFT_LOG_SUBSYS=engine -- "$FEATBIN/feat_fusion" --values "$values" --tl "$TMP"
  # one host: fused allreduces ran where the tensors lie, empty tensors among them (fewer segments than tensors)
  stderr_of fusion 0 | awk '/fused allreduce of [0-9]+ tensors in place/ { n = $0; sub(/.* of /, "", n); t = n + 0;
      sub(/.*\(/, "", n); if (n + 0 < t) found = 1 } END { exit !found }' ||
    fail "no fused allreduce ran in place with an empty tensor among its tensors"
  for ((r = 0; r < NP; r++)); do
    for run in fused small unfused; do
      "$PYTHON" "$CHECK" validate "$TMP/fusion_$run.$r.json" --size "$NP" --cycles no || fail "timeline fusion_$run.$r"
    done
    "$PYTHON" "$CHECK" overlap "$TMP/fusion_fused.$r.json" --min 2 || fail "rank $r: no fusion with the default threshold"
    "$PYTHON" "$CHECK" overlap "$TMP/fusion_unfused.$r.json" --max 1 || fail "rank $r: fusion with WEFT_FUSION_THRESHOLD=0"
  done
  ;;
stall-warn)
  run_job warn WEFT_STALL_CHECK_SECONDS=1 -- "$FEATBIN/feat_stall" --mode warn "$TMP/warn"
  has warn 0 "WARN.*stalled: tensor 'stuck'.*waiting for rank\(s\) 2( |$)" "the coordinator's report"
  has warn 1 "this rank waits: .*'stuck'.*waiting for rank\(s\) 2( |$)" "a waiting rank"
  lacks warn 2 "this rank waits" "rank 2 is the one not waiting"
  lacks warn 0 "timed out" "no stall shutdown was asked for"
  ;;
stall-shutdown | stall-horovod)
  if [ "$CASE" = stall-shutdown ]; then
    knobs=(WEFT_STALL_CHECK_SECONDS=1 WEFT_STALL_SHUTDOWN_SECONDS=2)
  else
    knobs=(HOROVOD_STALL_CHECK_TIME_SECONDS=1 HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=2)
  fi
  run_job sd "${knobs[@]}" -- "$FEATBIN/feat_stall" --mode shutdown "$TMP/sd"
  has sd 0 "WARN.*stalled: tensor 'stuck'.*waiting for rank\(s\) 2( |;|$)" "the coordinator's report"
  has sd 1 "this rank waits: .*'stuck'.*waiting for rank\(s\) 2( |;|$)" "a waiting rank"
  lacks sd 2 "this rank waits" "rank 2 is the one not waiting"
  ;;
stall-group)
  run_job grp WEFT_STALL_CHECK_SECONDS=1 WEFT_STALL_SHUTDOWN_SECONDS=2 -- "$FEATBIN/feat_stall" --mode group "$TMP/grp"
  # {1,2,3}'s coordinator is world rank 1; the culprit is world rank 3
  has grp 1 "WARN.*stalled: tensor 'gstuck'.*waiting for rank\(s\) 3( |;|$)" "the set coordinator's report, world ranks"
  has grp 2 "this rank waits: .*'gstuck'.*waiting for rank\(s\) 3( |;|$)" "a waiting member, world ranks"
  lacks grp 3 "this rank waits" "rank 3 is the one not waiting"
  lacks grp 0 "gstuck" "rank 0 is not in the set"
  ;;
timeline)
  mkdir -p "$TMP/tl"
  run_job tl WEFT_TIMELINE="$TMP/tl/env.%r.json" WEFT_TIMELINE_MARK_CYCLES=1 -- "$FEATBIN/feat_timeline" "$TMP/tl"
  err=()
  [ "$NP" -gt 1 ] && err=(--error tl.bad)
  for ((r = 0; r < NP; r++)); do
    coord=()
    [ "$r" -eq 0 ] && coord=(--coordinator)
    "$PYTHON" "$CHECK" validate "$TMP/tl/env.$r.json" --size "$NP" "${coord[@]}" --cycles yes "${err[@]}" \
      --expect tl.ar=ALLREDUCE:4000 --expect tl.ag=ALLGATHER:120 --expect tl.bc=BROADCAST:28 \
      --expect tl.bar=BARRIER:0 --expect tl.rs=REDUCESCATTER:$((16 * NP)) --expect tl.a2a=ALLTOALL:$((8 * NP)) \
      --expect tl.f1=ALLREDUCE:400 --expect tl.f2=ALLREDUCE:200 || fail "env.$r.json"
    "$PYTHON" "$CHECK" validate "$TMP/tl/rt.$r.json" --size "$NP" "${coord[@]}" --cycles no \
      --expect rt.ar=ALLREDUCE:4000 || fail "rt.$r.json"
    "$PYTHON" "$CHECK" validate "$TMP/tl/fin.$r.json" --size "$NP" "${coord[@]}" --cycles no \
      --expect fin.ar=ALLREDUCE:4000 || fail "fin.$r.json (left running at weft_finalize)"
    [ -e "$TMP/tl/second.$r.json" ] && fail "second.$r.json exists: a second timeline started over the first"
  done
  if [ "$NP" -ge 3 ]; then # the set {1, 2}: its coordinator, rank 1, marks ranks 1 and 2 ready, by world rank
    "$PYTHON" - "$TMP/tl/env.1.json" <<'PYEOF' || fail "env.1.json: tl.set's readiness marks"
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
tid = [e["tid"] for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name" and e["args"]["name"] == "tl.set"]
marks = sorted(e["name"] for e in ev if tid and e.get("tid") == tid[0] and e.get("ph") == "i")
print("tl.set marks on rank 1:", marks)
sys.exit(0 if marks == ["rank 1 ready", "rank 2 ready"] else 1)
PYEOF
  fi
  "$PYTHON" "$CHECK" validate "$TMP/tl/r0only.json" --size "$NP" --coordinator --cycles yes \
    --expect r0.ar=ALLREDUCE:4000 || fail "r0only.json"
  "$PYTHON" -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["otherData"].get("rank") != 0)' \
    "$TMP/tl/r0only.json" || fail "r0only.json was not written by rank 0"
  ;;
params)
  "$WEFTINFO" > "$TMP/info.txt" || fail "weft-info exited with $?"
  "$WEFTINFO" --params --json > "$TMP/info.json" || fail "weft-info --params --json exited with $?"
  "$WEFTINFO" --json > "$TMP/info_full.json" || fail "weft-info --json exited with $?"
  # the algorithms by collective, as WEFT_ALGO_<COLL> takes them
  grep -qx "  allreduce     direct, rd, ring, hier, cma, shm, numa" "$TMP/info.txt" ||
    fail "weft-info's text output does not list allreduce's algorithms"
  HOROVOD_FUSION_THRESHOLD=0 HOROVOD_STALL_CHECK_TIME_SECONDS=5 WEFT_CYCLE_TIME_US=250 \
    "$WEFTINFO" --params --json > "$TMP/info_set.json" || fail "weft-info with variables set"
  # name=default=alias (alias "-" for none)
  expect=(WEFT_FUSION_THRESHOLD=134217728=HOROVOD_FUSION_THRESHOLD WEFT_CYCLE_TIME_US=0=-
    WEFT_STALL_CHECK_SECONDS=60=HOROVOD_STALL_CHECK_TIME_SECONDS
    WEFT_STALL_SHUTDOWN_SECONDS=0=HOROVOD_STALL_SHUTDOWN_TIME_SECONDS WEFT_TIMELINE==HOROVOD_TIMELINE
    WEFT_TIMELINE_MARK_CYCLES=0=HOROVOD_TIMELINE_MARK_CYCLES WEFT_LOG_LEVEL=warn=HOROVOD_LOG_LEVEL
    WEFT_TIMEOUT_SECONDS=300=-)
  for e in "${expect[@]}"; do
    name=${e%%=*}
    grep -q "^  $name" "$TMP/info.txt" || fail "weft-info's text output does not list $name"
  done
  "$PYTHON" - "$TMP/info.json" "$TMP/info_set.json" "$SRCDIR/../../src" "$TMP/info_full.json" "${expect[@]}" <<'EOF' || fail "weft-info --json"
import json, os, re, sys
info, info_set, src, info_full, expect = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
bad = []
params = {p["name"]: p for p in json.load(open(info))["params"]}
for e in expect:
    name, default, alias = e.split("=")
    p = params.get(name)
    if not p:
        bad.append("%s is not in the table" % name)
        continue
    if p["default"] != default:
        bad.append("%s: default %r, expected %r" % (name, p["default"], default))
    if (p["alias"] or "-") != alias:
        bad.append("%s: alias %r, expected %r" % (name, p["alias"], alias))
for p in params.values():
    if p["type"] not in ("int", "double", "string", "bool", "path") or not p["doc"]:
        bad.append("%s: type %r, doc %r" % (p["name"], p["type"], p["doc"]))
    if p.get("scope") not in ("agreed", "rank", "launch"):
        bad.append("%s: scope %r" % (p["name"], p.get("scope")))
for name, scope in (("WEFT_FUSION_THRESHOLD", "agreed"), ("WEFT_ALGO_ALLREDUCE", "agreed"), ("WEFT_TRANSPORT", "agreed"),
                    ("WEFT_CMA", "agreed"), ("WEFT_FAST", "agreed"), ("WEFT_LOG_LEVEL", "rank"),
                    ("WEFT_TIMELINE", "rank"), ("WEFT_RANK", "launch"), ("WEFT_SECRET", "launch")):
    if params[name]["scope"] != scope:
        bad.append("%s: scope %r, expected %r" % (name, params[name]["scope"], scope))
# every collective's algorithms (weft_algorithm_name), as the WEFT_ALGO_<COLL>
# docs name them: two sources that must stay in step
full = json.load(open(info_full))
algos = full.get("algorithms", {})
if sorted(algos) != sorted(["allreduce", "allgather", "broadcast", "alltoall", "reducescatter"]):
    bad.append("weft-info --json: algorithms for %r" % sorted(algos))
for coll, names in algos.items():
    doc = params["WEFT_ALGO_" + coll.upper()]["doc"]
    m = re.match(r"force the %s algorithm: ([a-z, ]+) [(]" % coll, doc)
    if not m or m.group(1).split(", ") != names:
        bad.append("%s: weft-info lists %r, WEFT_ALGO_%s's doc %r" % (coll, names, coll.upper(), doc))
if "algorithms" in json.load(open(info)):
    bad.append("weft-info --params --json lists the algorithms")
if params["WEFT_TRANSPORT"]["accepts"] != "auto|shm|tcp|mpi":
    bad.append("WEFT_TRANSPORT accepts %r" % params["WEFT_TRANSPORT"]["accepts"])
s = {p["name"]: p for p in json.load(open(info_set))["params"]}
for name, value, by in (("WEFT_FUSION_THRESHOLD", "0", "HOROVOD_FUSION_THRESHOLD"),
                        ("WEFT_STALL_CHECK_SECONDS", "5", "HOROVOD_STALL_CHECK_TIME_SECONDS"),
                        ("WEFT_CYCLE_TIME_US", "250", "WEFT_CYCLE_TIME_US")):
    if s[name]["value"] != value or s[name]["set_by"] != by:
        bad.append("%s: value %r set by %r, expected %r by %r" % (name, s[name]["value"], s[name]["set_by"], value, by))
# every variable the library reads by name is in the table; by name
# (wf_param_*) it reads only launch parameters: settings are resolved once
# at init (util/settings.h) and read from the world's struct
known = set(params) | set(p["alias"] for p in params.values() if p["alias"])
pat = re.compile(r'(getenv|wf_param_[a-z]+)\("([A-Z0-9_]+)"\)')
for top in (src, os.path.join(src, "..", "tools")):
    for root, _, files in os.walk(top):
        for f in files:
            if f.endswith((".c", ".h")):
                for how, name in pat.findall(open(os.path.join(root, f), errors="replace").read()):
                    if name not in known and not name.startswith("WEFTRUN_"):
                        bad.append("%s reads %s, which is not in the parameter table" % (f, name))
                    elif how.startswith("wf_param_") and name in params and params[name]["scope"] != "launch":
                        bad.append("%s reads the %s setting %s by name (%s): use the world's wf_settings" %
                                   (f, params[name]["scope"], name, how))
# the layers (docs/design.md): a folder includes only the folders below it,
# and api/ reaches the engine only through its submission interface
below = {"util": set(), "wire": {"util"}, "reduce": {"util"}, "device": {"util"}, "bootstrap": {"util", "wire"},
         "host": {"bootstrap", "util", "wire"}, "transport": {"bootstrap", "host", "util", "wire"},
         "algo": {"reduce", "util", "wire"}, "negotiate": {"util", "wire"},
         "engine": {"algo", "bootstrap", "device", "host", "negotiate", "reduce", "transport", "util", "wire"},
         "api": {"bootstrap", "engine", "util", "wire"},
         "remote": {"engine", "util", "wire"}}
inc = re.compile(r'#include "([a-z_]+)/([a-z_]+[.]h)"')
for folder in sorted(os.listdir(src)):
    if not os.path.isdir(os.path.join(src, folder)):
        continue
    if folder not in below:
        bad.append("src/%s is not in the layer table (docs/design.md's folder map)" % folder)
        continue
    for f in sorted(os.listdir(os.path.join(src, folder))):
        if not f.endswith((".c", ".h")):
            continue
        for dep, hdr in inc.findall(open(os.path.join(src, folder, f)).read()):
            if dep != folder and dep not in below[folder]:
                bad.append("src/%s/%s includes %s/%s: %s is not below %s" % (folder, f, dep, hdr, dep, folder))
            if folder == "api" and dep == "engine" and hdr != "submit.h":
                bad.append("src/api/%s includes engine/%s: api reaches the engine through engine/submit.h" % (f, hdr))
for b in bad:
    print("FAIL: " + b)
sys.exit(1 if bad else 0)
EOF
  ;;
fusion-gather)
  N=24
  # count the executed allgather / reducescatter collectives of the probe on rank 0
  gruns() {
    local name=$1 coll=$2
    shift 2
    stderr_of "$name" 0 | grep -c "run $coll 'fg\."
  }
  run_job fg_on WEFT_LOG_SUBSYS=engine WEFT_LOG_LEVEL=debug WEFT_CYCLE_TIME_US=100000 -- \
    "$FEATBIN/feat_fuse_gather" --probe $N >&2
  run_job fg_off WEFT_LOG_SUBSYS=engine WEFT_LOG_LEVEL=debug WEFT_CYCLE_TIME_US=100000 WEFT_FUSION_THRESHOLD=0 -- \
    "$FEATBIN/feat_fuse_gather" --probe $N >&2
  on_ag=$(gruns fg_on allgather) on_rs=$(gruns fg_on reducescatter)
  off_ag=$(gruns fg_off allgather) off_rs=$(gruns fg_off reducescatter)
  echo "collectives for $N allgathers / $N reducescatters: fused $on_ag / $on_rs, WEFT_FUSION_THRESHOLD=0 $off_ag / $off_rs"
  [ "$off_ag" -eq $N ] && [ "$off_rs" -eq $N ] || fail "WEFT_FUSION_THRESHOLD=0 still fused"
  [ "$on_ag" -lt $N ] || fail "allgathers were not fused ($on_ag collectives)"
  [ "$on_rs" -lt $N ] || fail "reducescatters were not fused ($on_rs collectives)"
  ;;
cache-hits)
  # a member's response cache reports its hits when the world ends
  run_job cache WEFT_LOG_SUBSYS=engine WEFT_LOG_LEVEL=debug -- "$FEATBIN/feat_cache" >&2
  hits=$(stderr_of cache 1 | sed -n 's/.*response cache: \([0-9]*\) hits.*/\1/p' | head -1)
  echo "rank 1: ${hits:-no} cache hits"
  [ "${hits:-0}" -gt 0 ] || fail "rank 1 reports no response cache hits"
  ;;
grouped-unit)
  run_job grouped WEFT_LOG_SUBSYS=coord WEFT_LOG_LEVEL=debug -- "$FEATBIN/feat_fuse_gather" >&2
  has grouped 0 "grouped op 'fg\.gag': its 6 tensors published together" "the grouped allgather as one unit"
  has grouped 0 "grouped op 'fg\.grs': its 8 tensors published together" "the grouped reducescatter as one unit"
  ;;
cache-resend)
  # rank 0 (the world's coordinator) keeps one entry; the members keep the default
  run_job resend WEFT_LOG_SUBSYS=engine,coord WEFT_LOG_LEVEL=debug -- \
    sh -c '[ "$WEFT_RANK" = 0 ] && export WEFT_CACHE_CAPACITY=1; exec "$0"' "$FEATBIN/feat_cache" >&2
  asked=$(stderr_of resend 0 | sed -n "s/.*response cache: \([0-9]*\) of rank [0-9]*'s cached requests name evicted.*/\1/p" |
    awk '{s += $1} END {print s + 0}')
  for ((r = 1; r < NP; r++)); do
    resent=$(stderr_of resend $r | sed -n 's/.*response cache: [0-9]* hits, [0-9]* misses, \([0-9]*\) resent.*/\1/p' | head -1)
    echo "rank $r resent ${resent:-no} requests"
    [ "${resent:-0}" -gt 0 ] || fail "rank $r resent nothing although the coordinator keeps one cache entry"
  done
  echo "the coordinator asked for $asked requests again"
  [ "$asked" -gt 0 ] || fail "the coordinator logged no RESEND"
  # the reverse: one-entry member caches (their ids differ from the coordinator's: RESENDs, still right)
  run_job small -- sh -c '[ "$WEFT_RANK" = 0 ] || export WEFT_CACHE_CAPACITY=1; exec "$0"' "$FEATBIN/feat_cache" >&2
  ;;
alias-fusion)
  N=40
  # runs NAME [VAR=VALUE...]: the job, in this shell (its failures count),
  # then the executed allreduce collectives of the probe on rank 0 in the
  # variable NAME
  runs() {
    local name=$1
    shift
    run_job "$name" WEFT_LOG_SUBSYS=engine WEFT_CYCLE_TIME_US=100000 "$@" -- "$FEATBIN/feat_fusion" --probe $N >&2
    printf -v "$name" '%s' "$(stderr_of "$name" 0 | grep -c "run allreduce 'probe\.")"
  }
  runs off_weft WEFT_LOG_LEVEL=debug WEFT_FUSION_THRESHOLD=0
  runs off_hvd HOROVOD_LOG_LEVEL=debug HOROVOD_FUSION_THRESHOLD=0
  runs on_default WEFT_LOG_LEVEL=debug
  runs on_weft_wins WEFT_LOG_LEVEL=debug WEFT_FUSION_THRESHOLD=134217728 HOROVOD_FUSION_THRESHOLD=0
  echo "allreduce collectives for $N tensors: WEFT_FUSION_THRESHOLD=0: $off_weft, HOROVOD_FUSION_THRESHOLD=0:" \
    "$off_hvd, default: $on_default, WEFT_=128MiB + HOROVOD_=0: $on_weft_wins"
  [ "$off_weft" -eq $N ] || fail "WEFT_FUSION_THRESHOLD=0: $off_weft collectives for $N tensors"
  [ "$off_hvd" -eq $N ] || fail "HOROVOD_FUSION_THRESHOLD=0: $off_hvd collectives for $N tensors (alias ignored?)"
  [ "$on_default" -ge 1 ] && [ "$on_default" -le $((N / 2)) ] ||
    fail "default threshold: $on_default collectives for $N tensors (expected fusion)"
  [ "$on_weft_wins" -ge 1 ] && [ "$on_weft_wins" -le $((N / 2)) ] ||
    fail "WEFT_FUSION_THRESHOLD set and HOROVOD_FUSION_THRESHOLD=0: $on_weft_wins collectives (WEFT_* must win)"
  ;;
fusion-pack)
  N=40
  runs() { # as in alias-fusion: the job in this shell, the count in the variable NAME
    local name=$1
    shift
    run_job "$name" WEFT_LOG_LEVEL=debug WEFT_LOG_SUBSYS=engine WEFT_CYCLE_TIME_US=100000 "$@" -- \
      "$FEATBIN/feat_fusion" --probe $N >&2
    printf -v "$name" '%s' "$(stderr_of "$name" 0 | grep -c "run allreduce 'probe\.")"
  }
  runs tcp_limited WEFT_TRANSPORT=tcp WEFT_FUSION_PACK_MAX_BYTES=1000
  runs shm_limited WEFT_TRANSPORT=shm WEFT_FUSION_PACK_MAX_BYTES=1000
  in_place=$(stderr_of shm_limited 0 | grep -c "fused allreduce of [0-9]* tensors in place")
  [ "$in_place" -ge 1 ] || fail "shm: no fused allreduce ran in place (segments)"
  [ "$(stderr_of tcp_limited 0 | grep -c "in place")" -eq 0 ] || fail "tcp: an allreduce claims to run in place"
  runs forced WEFT_TRANSPORT=shm WEFT_FUSION_PACK_MAX_BYTES=1000 WEFT_ALGO_ALLREDUCE=direct
  [ "$forced" -eq $N ] || fail "shm with a forced packing algorithm: $forced collectives for $N tensors (packed?)"
  runs tcp_off WEFT_TRANSPORT=tcp WEFT_FUSION_PACK_MAX_BYTES=0
  echo "allreduce collectives for $N tensors of 4000 bytes: tcp with a 1000-byte pack limit: $tcp_limited," \
    "shm with it: $shm_limited, tcp without: $tcp_off"
  [ "$tcp_limited" -eq $N ] || fail "tcp, pack limit 1000: $tcp_limited collectives for $N tensors (packed?)"
  [ "$shm_limited" -ge 1 ] && [ "$shm_limited" -le $((N / 2)) ] ||
    fail "shm, pack limit 1000: $shm_limited collectives for $N tensors (expected fusion in place)"
  [ "$tcp_off" -ge 1 ] && [ "$tcp_off" -le $((N / 2)) ] ||
    fail "tcp, no pack limit: $tcp_off collectives for $N tensors (expected fusion)"
  ;;
alias-timeline)
  mkdir -p "$TMP/hv"
  run_job hv HOROVOD_TIMELINE="$TMP/hv/hv.%r.json" HOROVOD_TIMELINE_MARK_CYCLES=1 -- "$FEATBIN/feat_fusion" --probe 4
  for ((r = 0; r < NP; r++)); do
    coord=()
    [ "$r" -eq 0 ] && coord=(--coordinator)
    "$PYTHON" "$CHECK" validate "$TMP/hv/hv.$r.json" --size "$NP" "${coord[@]}" --cycles yes \
      --expect probe.0=ALLREDUCE:4000 || fail "HOROVOD_TIMELINE file of rank $r"
  done
  # DYNAMIC: no timeline until the API starts one (no file named DYNAMIC)
  mkdir -p "$TMP/dyncwd"
  (cd "$TMP/dyncwd" && run_job dyn HOROVOD_TIMELINE=DYNAMIC -- "$FEATBIN/feat_fusion" --probe 4) || fail "the DYNAMIC job"
  [ -z "$(ls -A "$TMP/dyncwd")" ] || fail "HOROVOD_TIMELINE=DYNAMIC wrote $(ls "$TMP/dyncwd")"
  ;;
*)
  echo "features.sh: unknown case '$CASE'"
  exit 2
  ;;
esac
finish
