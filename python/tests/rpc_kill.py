"""weft.rpc with a callee killed mid-call (run under weftrun, 3 ranks):
rank 1 dies by SIGKILL inside a call (its remote worker thread kills the
process 0.3 s into the function); rank 0's rpc_sync and rank 2's rpc_async
future to it, pending by then, fail within 10 s with WeftError
(WEFT_ERR_PEER_LOST) naming rank 1, and the survivors shut down promptly.

Rank 1 runs supervised: its process starts the real rank as a child and
exits 0 when the child died by SIGKILL as it announced (a note file), so
weftrun sees the planned death as a success and the survivors' results
decide the test."""

import os
import signal
import subprocess
import sys
import tempfile
import time

VICTIM = 1


def die():
    time.sleep(0.3)  # the callers' calls are pending by now
    with open(os.environ["RPC_KILL_NOTE"], "w") as f:
        f.write("planned")
    os.kill(os.getpid(), signal.SIGKILL)


def supervise():
    with tempfile.TemporaryDirectory() as d:
        note = os.path.join(d, "note")
        env = dict(os.environ, RPC_KILL_NOTE=note)
        rc = subprocess.call([sys.executable, os.path.abspath(__file__), "--child"], env=env)
        planned = os.path.exists(note) and open(note).read() == "planned"
    if rc == -signal.SIGKILL and planned:
        print("PASS rank %d: killed itself with SIGKILL as planned" % VICTIM, flush=True)
        return 0
    print("FAIL rank %d: exited with %d (planned kill noted: %s)" % (VICTIM, rc, planned), flush=True)
    return 1


def rank_main():
    import torch
    import weft
    import weft.rpc as rpc
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import rpc_kill  # the callee finds die() under this module's name

    weft.init()
    rpc.init_rpc()
    me = weft.rank()
    if me == VICTIM:
        while True:  # the call's worker thread kills this process
            time.sleep(1)
    t0 = time.time()
    failures = 0
    try:
        if me == 0:
            rpc.rpc_sync(VICTIM, rpc_kill.die, timeout=30)
        else:
            rpc.rpc_async("worker%d" % VICTIM, rpc_kill.die, timeout=30).wait()
        print("FAIL rank %d: the call completed although rank %d died" % (me, VICTIM), flush=True)
        failures += 1
    except weft.WeftError as e:
        took = time.time() - t0
        msg = str(e)
        if e.status_name != "WEFT_ERR_PEER_LOST" or "rank %d" % VICTIM not in msg or took > 10:
            print("FAIL rank %d: after %.2f s: %s: %s" % (me, took, e.status_name, msg), flush=True)
            failures += 1
        else:
            print("PASS rank %d: the call failed after %.2f s naming rank %d: %s" % (me, took, VICTIM, msg),
                  flush=True)
    del torch
    t1 = time.time()
    rpc.shutdown(graceful=False)
    try:
        weft.shutdown()
    except weft.WeftError as e:  # the world failed with rank 1's death
        print("INFO rank %d: shutdown: %s" % (me, e), flush=True)
    if time.time() - t1 > 5:
        print("FAIL rank %d: shutting down took %.2f s" % (me, time.time() - t1), flush=True)
        failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    if "--child" in sys.argv:
        sys.exit(rank_main())
    if int(os.environ.get("WEFT_RANK", "-1")) == VICTIM:
        sys.exit(supervise())
    sys.exit(rank_main())
