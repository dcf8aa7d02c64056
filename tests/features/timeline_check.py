#!/usr/bin/env python3
"""timeline_check.py - checks weft's Chrome-trace timeline files (tests/features).

  timeline_check.py validate FILE [--size N] [--coordinator] [--cycles yes|no]
                    [--expect NAME=OP:BYTES ...] [--error NAME ...]
      The file is valid JSON with otherData.start_time_since_epoch_in_micros
      (a plausible wall-clock time), a process_name record, one thread_name
      lane per tensor (distinct names, announced before use), timestamps that
      never go back, and B/E events properly nested per lane with every
      phase closed. For each --expect, the tensor's lane holds, in order,
      NEGOTIATE_<OP> B/E then <OP> B/E (args.bytes == BYTES on both B
      events, args.algorithm a non-empty string on the <OP> one); with
      --coordinator (rank 0's file) a "rank R ready" mark for every rank R
      < N before its negotiation ends. --cycles yes: CYCLE_START marks present;
      no: absent. --error NAME: some E event of NAME's lane carries
      args.error; every other E event must not.

  timeline_check.py overlap FILE [--min K] [--max K]
      Prints the largest number of tensors whose ALLREDUCE phases are open
      at the same time (fused tensors run as one collective, so their
      phases overlap; unfused ones run one at a time) and checks the bounds.

Exit status 0 when every check holds; otherwise each failure is printed.
"""
import argparse
import json
import sys
import time


def load(path, errors):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        errors.append("%s: not valid JSON: %s" % (path, e))
        return None


def lanes_and_events(doc, path, errors):
    """Returns ({tid: name}, [events]) after the structural checks."""
    if not isinstance(doc, dict):
        errors.append("%s: top level is not an object" % path)
        return {}, []
    other = doc.get("otherData")
    start = other.get("start_time_since_epoch_in_micros") if isinstance(other, dict) else None
    if not isinstance(start, int) or isinstance(start, bool):
        errors.append("%s: otherData.start_time_since_epoch_in_micros missing or not an integer: %r" % (path, start))
    elif abs(start / 1e6 - time.time()) > 86400:
        errors.append("%s: start_time_since_epoch_in_micros %d is not within a day of now" % (path, start))
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        errors.append("%s: traceEvents is not a list" % path)
        return {}, []
    if not any(e.get("ph") == "M" and e.get("name") == "process_name" for e in events if isinstance(e, dict)):
        errors.append("%s: no process_name metadata" % path)
    lanes = {}
    names = {}
    last_ts = None
    for i, e in enumerate(events):
        if not isinstance(e, dict) or "ph" not in e:
            errors.append("%s: event %d is not an object with 'ph': %r" % (path, i, e))
            continue
        ph = e["ph"]
        if ph == "M":
            if e.get("name") == "thread_name":
                tid, nm = e.get("tid"), e.get("args", {}).get("name")
                if tid in lanes:
                    errors.append("%s: lane %r announced twice" % (path, tid))
                if nm in names:
                    errors.append("%s: tensor %r has two lanes (%r and %r)" % (path, nm, names[nm], tid))
                lanes[tid] = nm
                names[nm] = tid
            continue
        ts = e.get("ts")
        if not isinstance(ts, (int, float)):
            errors.append("%s: event %d has no numeric ts: %r" % (path, i, e))
            continue
        if last_ts is not None and ts < last_ts:
            errors.append("%s: event %d goes back in time (%s after %s)" % (path, i, ts, last_ts))
        last_ts = ts
        if e.get("name") == "CYCLE_START":
            continue
        if e.get("tid") not in lanes:
            errors.append("%s: event %d uses lane %r before its thread_name: %r" % (path, i, e.get("tid"), e))
    return lanes, [e for e in events if isinstance(e, dict) and e.get("ph") in ("B", "E", "i")]


def per_lane(events, path, errors):
    """Checks nesting; returns {tid: [(kind, event)]} with kind B/E/i."""
    stacks, seq = {}, {}
    for e in events:
        if e.get("name") == "CYCLE_START":
            continue
        tid = e.get("tid")
        seq.setdefault(tid, []).append((e["ph"], e))
        st = stacks.setdefault(tid, [])
        if e["ph"] == "B":
            st.append(e.get("name"))
        elif e["ph"] == "E":
            if not st:
                errors.append("%s: lane %r: E without an open phase (ts %s)" % (path, tid, e.get("ts")))
            else:
                st.pop()
    for tid, st in stacks.items():
        if st:
            errors.append("%s: lane %r: phases never closed: %s" % (path, tid, st))
    return seq


def validate(args):
    errors = []
    doc = load(args.file, errors)
    if doc is None:
        return errors
    lanes, events = lanes_and_events(doc, args.file, errors)
    seq = per_lane(events, args.file, errors)
    cycles = sum(1 for e in events if e.get("name") == "CYCLE_START")
    if args.cycles == "yes" and cycles == 0:
        errors.append("%s: no CYCLE_START marks although mark_cycles is on" % args.file)
    if args.cycles == "no" and cycles:
        errors.append("%s: %d CYCLE_START marks although mark_cycles is off" % (args.file, cycles))
    tid_of = {v: k for k, v in lanes.items()}
    for name in args.error:
        if name not in tid_of:
            errors.append("%s: no lane for tensor %r (expected an error phase)" % (args.file, name))
        elif not any(k == "E" and "error" in e.get("args", {}) for k, e in seq.get(tid_of[name], [])):
            errors.append("%s: tensor %r: no E event with args.error" % (args.file, name))
    for tid, evs in seq.items():
        if lanes.get(tid) in args.error:
            continue
        for k, e in evs:
            if k == "E" and "error" in e.get("args", {}):
                errors.append("%s: tensor %r ended with an unexpected error: %s" % (args.file, lanes.get(tid),
                                                                                     e["args"]["error"]))
    for spec in args.expect:
        try:
            name, rest = spec.split("=", 1)
            op, nbytes = rest.split(":", 1)
            nbytes = int(nbytes)
        except ValueError:
            errors.append("bad --expect %r (NAME=OP:BYTES)" % spec)
            continue
        if name not in tid_of:
            errors.append("%s: no lane for tensor %r" % (args.file, name))
            continue
        evs = seq.get(tid_of[name], [])
        phases = [(k, e.get("name")) for k, e in evs if k in ("B", "E")]
        want = [("B", "NEGOTIATE_" + op), ("E", None), ("B", op), ("E", None)]
        if len(phases) < 4 or any(p[0] != w[0] or (w[1] and p[1] != w[1]) for p, w in zip(phases, want)):
            errors.append("%s: tensor %r: phases %s, expected NEGOTIATE_%s B/E then %s B/E" %
                          (args.file, name, phases, op, op))
            continue
        b = [e for k, e in evs if k == "B"]
        for e in b[:2]:
            got = e.get("args", {}).get("bytes")
            if got != nbytes:
                errors.append("%s: tensor %r: %s has args.bytes %r, expected %d" % (args.file, name, e.get("name"),
                                                                                     got, nbytes))
        algo = b[1].get("args", {}).get("algorithm")
        if not isinstance(algo, str) or not algo:
            errors.append("%s: tensor %r: %s has no args.algorithm (%r)" % (args.file, name, op, algo))
        if args.coordinator:
            # the marks of the first negotiation: before its E (a peer's
            # request may arrive before this rank's own submission)
            ready = set()
            for k, e in evs:
                if k == "E":
                    break
                if k == "i":
                    ready.add(e.get("name"))
            missing = ["rank %d ready" % r for r in range(args.size) if "rank %d ready" % r not in ready]
            if missing:
                errors.append("%s: tensor %r: marks missing in its negotiation: %s (have %s)" %
                              (args.file, name, missing, sorted(ready)))
    return errors


def overlap(args):
    errors = []
    doc = load(args.file, errors)
    if doc is None:
        return errors
    lanes, events = lanes_and_events(doc, args.file, errors)
    stacks, open_ar, best = {}, set(), 0
    for e in events:
        tid = e.get("tid")
        if e["ph"] == "B":
            stacks.setdefault(tid, []).append(e.get("name"))
            if e.get("name") == "ALLREDUCE":
                open_ar.add(tid)
                best = max(best, len(open_ar))
        elif e["ph"] == "E" and stacks.get(tid):
            if stacks[tid].pop() == "ALLREDUCE":
                open_ar.discard(tid)
    print("%s: at most %d ALLREDUCE phases open at once" % (args.file, best))
    if args.min is not None and best < args.min:
        errors.append("%s: at most %d ALLREDUCE phases overlap, expected at least %d (no fusion?)" %
                      (args.file, best, args.min))
    if args.max is not None and best > args.max:
        errors.append("%s: %d ALLREDUCE phases overlap, expected at most %d" % (args.file, best, args.max))
    return errors


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("validate")
    v.add_argument("file")
    v.add_argument("--size", type=int, default=1)
    v.add_argument("--coordinator", action="store_true")
    v.add_argument("--cycles", choices=("yes", "no", "any"), default="any")
    v.add_argument("--expect", action="append", default=[])
    v.add_argument("--error", action="append", default=[])
    o = sub.add_parser("overlap")
    o.add_argument("file")
    o.add_argument("--min", type=int)
    o.add_argument("--max", type=int)
    args = p.parse_args()
    errors = validate(args) if args.cmd == "validate" else overlap(args)
    for e in errors:
        print("FAIL: " + e)
    if not errors and args.cmd == "validate":
        print("%s: valid" % args.file)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
