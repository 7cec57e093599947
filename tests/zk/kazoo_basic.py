#!/usr/bin/env python3
"""kazoo against a ZooKeeper ensemble (quorumkv's --zk-port or a real one).

Usage: kazoo_basic.py HOST:PORT[,HOST:PORT...]
Prints one `ok NAME` line per check and `all ok` at the end; exits non-zero
(with a traceback) at the first failure.
"""
import sys
import threading
import time
import uuid

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.recipe.barrier import Barrier
from kazoo.recipe.counter import Counter
from kazoo.recipe.election import Election
from kazoo.recipe.lock import Lock
from kazoo.recipe.party import Party
from kazoo.recipe.queue import Queue
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

HOSTS = sys.argv[1]
ROOT = "/kazoo-" + uuid.uuid4().hex[:8]


def fresh(zk, path):
    """ZooKeeper's reads are served by the client's server and may lag
    other sessions' writes: sync first where a read must see them (on
    quorumkv reads are linearizable and the sync is a no-op barrier)."""
    zk.sync(path)


def client():
    zk = KazooClient(hosts=HOSTS, timeout=10.0)
    zk.start(timeout=15)
    return zk


def ok(name):
    print("ok", name, flush=True)


def crud(zk):
    zk.create(ROOT, b"root")
    data, stat = zk.get(ROOT)
    assert data == b"root" and stat.version == 0 and stat.numChildren == 0, stat
    assert stat.czxid > 0 and stat.mzxid == stat.czxid and stat.ephemeralOwner == 0, stat
    s2 = zk.set(ROOT, b"v2", version=0)
    assert s2.version == 1 and s2.mzxid > stat.mzxid and s2.dataLength == 2, s2
    try:
        zk.set(ROOT, b"v3", version=0)
        raise AssertionError("a stale version was accepted")
    except BadVersionError:
        pass
    try:
        zk.create(ROOT)
        raise AssertionError("created twice")
    except NodeExistsError:
        pass
    assert zk.exists(ROOT + "/none") is None
    try:
        zk.get(ROOT + "/none")
        raise AssertionError("read a missing node")
    except NoNodeError:
        pass
    ok("create/get/set/exists and their errors")


def children(zk):
    for name in ("b", "a", "c"):
        zk.create(ROOT + "/" + name, b"x")
    assert sorted(zk.get_children(ROOT)) == ["a", "b", "c"]
    kids, stat = zk.get_children(ROOT, include_data=True)
    assert sorted(kids) == ["a", "b", "c"] and stat.numChildren == 3, stat
    seq = zk.create(ROOT + "/s-", b"", sequence=True)
    assert seq.startswith(ROOT + "/s-") and len(seq) == len(ROOT) + 3 + 10, seq
    try:
        zk.delete(ROOT)
        raise AssertionError("deleted a node with children")
    except NotEmptyError:
        pass
    zk.delete(ROOT + "/c", version=0)
    zk.delete(seq)
    assert sorted(zk.get_children(ROOT)) == ["a", "b"]
    zk.ensure_path(ROOT + "/deep/er/path")
    assert zk.exists(ROOT + "/deep/er/path") is not None
    ok("children, sequential, delete with version, ensure_path")


def watches(zk, other):
    fired = []
    got = threading.Event()

    def on(event):
        fired.append((event.type, event.path))
        got.set()

    zk.get(ROOT + "/a", watch=on)
    other.set(ROOT + "/a", b"changed")
    assert got.wait(10), "data watch did not fire"
    assert fired == [("CHANGED", ROOT + "/a")], fired
    got.clear()
    zk.get_children(ROOT, watch=on)
    other.create(ROOT + "/new")
    assert got.wait(10), "child watch did not fire"
    assert fired[1] == ("CHILD", ROOT), fired
    got.clear()
    zk.exists(ROOT + "/later", watch=on)
    other.create(ROOT + "/later")
    assert got.wait(10), "exists watch did not fire"
    assert fired[2] == ("CREATED", ROOT + "/later"), fired
    # One-shot: a second change fires nothing more.
    got.clear()
    other.set(ROOT + "/a", b"again")
    other.sync(ROOT)
    zk.sync(ROOT)
    assert not got.wait(1), fired
    ok("one-shot data, child and exists watches")


def ephemerals(zk):
    short = client()
    sid = short.client_id[0]
    short.create(ROOT + "/eph", b"", ephemeral=True)
    fresh(zk, ROOT)
    _, stat = zk.get(ROOT + "/eph")
    assert stat.ephemeralOwner == sid, (stat.ephemeralOwner, sid)
    gone = threading.Event()
    zk.exists(ROOT + "/eph", watch=lambda e: gone.set())
    short.stop()
    short.close()
    assert gone.wait(10), "the ephemeral outlived its closed session"
    assert zk.exists(ROOT + "/eph") is None
    ok("ephemeral node goes with its session's close")


def lock_and_counter(zk, other):
    held = []
    lock_a = Lock(zk, ROOT + "/lock", "a")
    lock_b = Lock(other, ROOT + "/lock", "b")
    with lock_a:
        held.append("a")
        t = threading.Thread(target=lambda: (lock_b.acquire(timeout=15), held.append("b"), lock_b.release()))
        t.start()
        t.join(0.5)
        assert held == ["a"], "b got the lock while a held it"
    t.join(15)
    assert held == ["a", "b"], held
    counter = Counter(zk, ROOT + "/counter")
    counter2 = Counter(other, ROOT + "/counter")
    for _ in range(5):
        counter += 1
        counter2 += 2
    fresh(zk, ROOT)
    fresh(other, ROOT)
    assert counter.value == 15 and counter2.value == 15, counter.value
    ok("Lock recipe (mutual exclusion, handover) and Counter recipe")


def more_recipes(zk, other):
    # Election: the first contender leads; the second leads once it quits.
    order = []
    first_leads = threading.Event()
    release = threading.Event()

    def lead(name):
        order.append(name)
        if name == "a":
            first_leads.set()
            release.wait(15)

    ea, eb = Election(zk, ROOT + "/election", "a"), Election(other, ROOT + "/election", "b")
    ta = threading.Thread(target=ea.run, args=(lead, "a"))
    ta.start()
    assert first_leads.wait(15)
    tb = threading.Thread(target=eb.run, args=(lead, "b"))
    tb.start()
    for _ in range(100):  # b's contender node is made by its thread
        if sorted(ea.contenders()) == ["a", "b"]:
            break
        time.sleep(0.1)
    assert sorted(ea.contenders()) == ["a", "b"], ea.contenders()
    release.set()
    ta.join(15)
    tb.join(15)
    assert order == ["a", "b"], order
    # Barrier: a waiter passes once the barrier is removed.
    barrier = Barrier(zk, ROOT + "/barrier")
    barrier.create()
    fresh(other, ROOT)
    assert not Barrier(other, ROOT + "/barrier").wait(0.2)
    barrier.remove()
    assert Barrier(other, ROOT + "/barrier").wait(5)
    # Queue: FIFO across two sessions.
    q_in, q_out = Queue(zk, ROOT + "/queue"), Queue(other, ROOT + "/queue")
    for item in (b"1", b"2", b"3"):
        q_in.put(item)
    fresh(other, ROOT)
    assert [q_out.get() for _ in range(3)] == [b"1", b"2", b"3"]
    assert q_out.get() is None
    # Party: members are ephemeral children.
    pa, pb = Party(zk, ROOT + "/party", "a"), Party(other, ROOT + "/party", "b")
    pa.join()
    pb.join()
    fresh(zk, ROOT)
    assert sorted(pa) == ["a", "b"] and len(pb) == 2
    pb.leave()
    fresh(zk, ROOT)
    assert list(pa) == ["a"]
    ok("Election, Barrier, Queue and Party recipes")


def acl(zk, other):
    acls, stat = zk.get_acls(ROOT)
    assert len(acls) == 1 and acls[0].id.scheme == "world" and acls[0].perms == 31, acls
    assert stat.aversion == 0
    # digest: the node's owner reads it, another session is refused until
    # setACL opens it again.
    owner = client()
    owner.add_auth("digest", "alice:secret")
    path = ROOT + "/private"
    owner.create(path, b"x", acl=[make_digest_acl("alice", "secret", all=True)])
    assert owner.get(path)[0] == b"x"
    fresh(other, ROOT)
    try:
        other.get(path)
        raise AssertionError("read without the digest identity")
    except NoAuthError:
        pass
    acls, stat = owner.get_acls(path)
    assert [a.id.scheme for a in acls] == ["digest"] and stat.aversion == 0, acls
    try:
        owner.set_acls(path, OPEN_ACL_UNSAFE, version=5)
        raise AssertionError("setACL with a stale version")
    except BadVersionError:
        pass
    owner.set_acls(path, OPEN_ACL_UNSAFE, version=0)
    fresh(other, ROOT)
    assert other.get(path)[0] == b"x" and other.get_acls(path)[1].aversion == 1
    owner.stop()
    ok("getACL world:anyone, digest ACL with addAuth, setACL with version")


def transactions(zk, other):
    base = ROOT + "/tx"
    zk.create(base, b"b")
    fresh(other, base)
    w = watched(other, base)
    t = zk.transaction()
    t.check(base, 0)
    t.create(base + "/a", b"1")
    t.create(base + "/s-", b"2", sequence=True)
    t.create(base + "/s-", b"3", sequence=True, ephemeral=True)
    t.set_data(base + "/a", b"4", version=0)
    t.delete(base + "/a")
    t.set_data(base, b"b2")
    res = t.commit()
    assert res[0] is True and res[1] == base + "/a", res
    # Sequential names in order (ZooKeeper numbers by the parent's
    # cversion, quorumkv by its own counter: both consecutive here).
    assert res[2].startswith(base + "/s-") and seq(res[3]) == seq(res[2]) + 1, res
    assert res[4].version == 1 and res[5] is True and res[6].version == 1, res
    # One zxid for the whole transaction.
    assert res[4].mzxid == res[6].mzxid, res
    _, stat = zk.get(res[3])
    assert stat.ephemeralOwner == zk.client_id[0] and stat.czxid == res[6].mzxid, stat
    assert w.wait(10), "the data watch on the base fired"
    before = seq(zk.create(base + "/s-", b"", sequence=True))
    # A failing check rolls everything back; kazoo reports each result.
    t = zk.transaction()
    t.create(base + "/b", b"x")
    t.set_data(base, b"b3")
    t.check(base, 0)
    t.delete(base + "/nope")
    res = t.commit()
    kinds = [type(r) for r in res]
    assert kinds == [RolledBackError, RolledBackError, BadVersionError, RuntimeInconsistency], res
    fresh(other, base)
    assert other.exists(base + "/b") is None
    data, stat = other.get(base)
    assert data == b"b2" and stat.version == 1, (data, stat)
    # The sequential counter was not used by the rolled-back transaction.
    t = zk.transaction()
    t.create(base + "/s-", b"", sequence=True)
    t.create(base + "/x", b"")
    assert seq(t.commit()[0]) == before + 1
    t = zk.transaction()
    t.create(base + "/x", b"")
    t.check(base, 1)
    res = t.commit()
    assert [type(r) for r in res] == [NodeExistsError, RuntimeInconsistency], res
    ok("transaction: check, create (sequential), set, delete; all or none")


def seq(path):
    """The sequence number of a sequential node's path."""
    return int(path[-10:])


def watched(zk, path):
    """An event set when the data watch on `path` fires."""
    fired = threading.Event()
    zk.get(path, watch=lambda _e: fired.set())
    return fired


def main():
    zk, other = client(), client()
    assert zk.client_id[0] != other.client_id[0]
    crud(zk)
    children(zk)
    watches(zk, other)
    ephemerals(zk)
    lock_and_counter(zk, other)
    more_recipes(zk, other)
    acl(zk, other)
    transactions(zk, other)
    zk.delete(ROOT, recursive=True)
    assert zk.exists(ROOT) is None
    zk.stop()
    other.stop()
    print("all ok", flush=True)


if __name__ == "__main__":
    main()
