#!/usr/bin/env python3
"""A Jepsen-style workload through kazoo, recorded for `quorumkv check`.

Usage: kazoo_jepsen.py HOST:PORT,... HISTORY SECONDS [CLIENTS] [LOCKERS]

CLIENTS threads (default 4), each with its own kazoo session on all the
hosts, do creates (persistent, ephemeral, sequential under /q), sets
(some conditional), deletes, gets, exists and get_children on a few
paths for SECONDS; LOCKERS threads (default 2), each with its own
session, take kazoo's Lock on /lock in turn, the lock node's sequence
number as the fencing token. Every operation is written to HISTORY as a
JSON line in the format `quorumkv check --model znode` reads
(crates/check/src/znode/jsonl.rs): answered (ok), answered with a
ZooKeeper error (fail), or without an answer (info: ConnectionLoss,
OperationTimeout, a session kazoo says expired or closed, no answer
within the call timeout; the effect may or may not have happened).

Prints one JSON line of counts at the end: ok, fail, info, holds,
lock_failures, lost (sessions kazoo saw expire).
"""
import json
import random
import sys
import threading
import time

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from kazoo.recipe.lock import Lock

HOSTS, HISTORY, SECONDS = sys.argv[1], sys.argv[2], float(sys.argv[3])
CLIENTS = int(sys.argv[4]) if len(sys.argv) > 4 else 4
LOCKERS = int(sys.argv[5]) if len(sys.argv) > 5 else 2
# Answers ZooKeeper gives: the request was refused, nothing changed.
DEFINITE = (
    NoNodeError,
    NodeExistsError,
    BadVersionError,
    NotEmptyError,
    NoChildrenForEphemeralsError,
)
# Longer than a kill, a restart or a pause, so that no session expires.
SESSION_TIMEOUT = 20.0
CALL_TIMEOUT = 5.0
PATHS = ["/a", "/b", "/a/c"]
START = time.monotonic_ns()
out_lock = threading.Lock()
counts = {"ok": 0, "fail": 0, "info": 0, "holds": 0, "lock_failures": 0, "lost": 0}
out = open(HISTORY, "w")


def now():
    return time.monotonic_ns() - START


def write(rec):
    with out_lock:
        out.write(json.dumps(rec, separators=(",", ":")) + "\n")
        if rec["f"] != "hold":
            counts[rec["type"]] += 1


def session(zk):
    """The session id as ZooKeeper's servers write it (kazoo's is signed).

    Not `zk.client_id`: kazoo says None there while the connection is
    suspended (its replica killed or paused), yet a request made then
    waits in kazoo's queue and goes out on the same session once kazoo
    reconnects. `_session_id` is that session: kazoo keeps it while
    suspended and drops it only when the session is lost. 0 (no ZooKeeper
    session has it; the checker refuses the line) only after a loss,
    which the test does not allow."""
    sid = zk._session_id
    return sid & 0xFFFFFFFFFFFFFFFF if sid else 0


def connect(stop):
    """A session; the times kazoo said it was lost before `stop` (kazoo
    says LOST on its own close too)."""
    zk = KazooClient(hosts=HOSTS, timeout=SESSION_TIMEOUT)
    lost = []

    def listen(state):
        if state == KazooState.LOST and not stop.is_set():
            lost.append(now())

    zk.add_listener(listen)
    call = now()
    zk.start(timeout=30)
    write({"f": "open", "session": session(zk), "invoke": call,
           "complete": now(), "type": "ok"})
    return zk, lost


def value(f, r):
    """What an answer reads as in the history."""
    if f == "get":
        return [r[0].decode("utf-8", "replace"), r[1].version]
    if f == "exists":
        return None if r is None else r.version
    if f == "set":
        return r.version
    if f == "children":
        return sorted(r)
    if f == "create":
        return r
    return None


def call(zk, rec, start):
    """Run one request (`start` sends it, returns kazoo's async result) and
    record it; the answer, or None."""
    rec["session"] = session(zk)
    rec["invoke"] = now()
    try:
        r = start().get(timeout=CALL_TIMEOUT)
        rec.update(complete=now(), type="ok", value=value(rec["f"], r))
        write(rec)
        return rec["value"]
    except DEFINITE as e:
        rec.update(complete=now(), type="fail", error=type(e).__name__)
    except Exception as e:  # ConnectionLoss, timeouts, a session gone
        rec.update(complete=None, type="info", error=type(e).__name__)
    write(rec)
    return None


def one_op(zk, rng, me, n, versions):
    path = rng.choice(PATHS)
    data = "c%d-%d" % (me, n)
    k = rng.randrange(100)
    if k < 12:
        eph = rng.random() < 0.3
        rec = {"f": "create", "path": path, "data": data, "ephemeral": eph,
               "sequential": False}
        call(zk, rec, lambda: zk.create_async(path, data.encode(), ephemeral=eph))
    elif k < 22:
        eph = rng.random() < 0.3
        rec = {"f": "create", "path": "/q/n-", "data": data, "ephemeral": eph,
               "sequential": True}
        call(zk, rec, lambda: zk.create_async("/q/n-", data.encode(),
                                              ephemeral=eph, sequence=True))
    elif k < 40:
        v = versions.get(path, -1) if rng.random() < 0.5 else -1
        rec = {"f": "set", "path": path, "data": data,
               "version": None if v < 0 else v}
        call(zk, rec, lambda: zk.set_async(path, data.encode(), v))
    elif k < 48:
        v = versions.get(path, -1) if rng.random() < 0.5 else -1
        rec = {"f": "delete", "path": path, "version": None if v < 0 else v}
        call(zk, rec, lambda: zk.delete_async(path, v))
    elif k < 75:
        r = call(zk, {"f": "get", "path": path}, lambda: zk.get_async(path))
        if r is not None:
            versions[path] = r[1]
    elif k < 87:
        call(zk, {"f": "exists", "path": path}, lambda: zk.exists_async(path))
    else:
        p = rng.choice(["/a", "/q"])
        call(zk, {"f": "children", "path": p}, lambda: zk.get_children_async(p))


def client(me, stop):
    rng = random.Random(me)
    zk, lost = connect(stop)
    call(zk, {"f": "create", "path": "/q", "data": "", "ephemeral": False,
              "sequential": False}, lambda: zk.create_async("/q", b""))
    versions, n = {}, 0
    while not stop.is_set():
        n += 1
        one_op(zk, rng, me, n, versions)
        time.sleep(0.01)
    rec = {"f": "close", "session": session(zk), "invoke": now()}
    zk.stop()
    zk.close()
    # kazoo's stop() does not say whether the close reached a server.
    write(dict(rec, complete=None, type="info"))
    with out_lock:
        counts["lost"] += len(lost)


def locker(me, stop):
    zk, lost = connect(stop)
    lock = Lock(zk, "/lock", "locker-%d" % me)
    while not stop.is_set():
        try:
            got = lock.acquire(timeout=CALL_TIMEOUT)
        except Exception:
            got = False
        if not got:
            with out_lock:
                counts["lock_failures"] += 1
            time.sleep(0.05)
            continue
        acquired, before = now(), len(lost)
        token = int(lock.node[-10:])
        time.sleep(random.uniform(0, 0.004))
        released = now()
        try:
            lock.release()
        except Exception:
            with out_lock:
                counts["lock_failures"] += 1
        write({"f": "hold", "lock": "/lock", "process": me, "token": token,
               "acquired": acquired, "released": released,
               "expired": len(lost) > before})
        with out_lock:
            counts["holds"] += 1
        time.sleep(0.01)
    zk.stop()
    zk.close()
    with out_lock:
        counts["lost"] += len(lost)


def main():
    stop = threading.Event()
    threads = [threading.Thread(target=client, args=(i, stop)) for i in range(CLIENTS)]
    threads += [threading.Thread(target=locker, args=(CLIENTS + i, stop))
                for i in range(LOCKERS)]
    for t in threads:
        t.start()
    print("started", flush=True)
    time.sleep(SECONDS)
    stop.set()
    for t in threads:
        t.join()
    out.close()
    print(json.dumps(counts), flush=True)


main()
