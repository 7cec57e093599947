#!/usr/bin/env python3
"""Users of quorumkv's users file on the ZooKeeper port, through kazoo.

Usage: kazoo_users.py HOSTS WRITER:PASSWORD READER:PASSWORD [CA [CERT KEY]]

WRITER has the readwrite role, READER the read role. With CA, the
connections use TLS and check the replicas' certificates against it (and
present CERT/KEY where given). Prints one `ok NAME` line per check and
`all ok` at the end; exits non-zero (with a traceback) at the first
failure.
"""
import sys
import time
import uuid

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoAuthError
from kazoo.protocol.states import KeeperState
from kazoo.security import ACL, Id, make_digest_acl

HOSTS = sys.argv[1]
WRITER, READER = sys.argv[2], sys.argv[3]
TLS = {}
if len(sys.argv) > 4:
    TLS = {"use_ssl": True, "verify_certs": True, "ca": sys.argv[4]}
if len(sys.argv) > 6:
    TLS.update(certfile=sys.argv[5], keyfile=sys.argv[6])
ROOT = "/users-" + uuid.uuid4().hex[:8]


def ok(name):
    print("ok", name, flush=True)


def client(auth=None):
    auth_data = [("digest", auth)] if auth else None
    return KazooClient(hosts=HOSTS, auth_data=auth_data, timeout=10, **TLS)


def refused(call):
    """The exception `call` raised (it must raise)."""
    try:
        call()
    except KazooException as e:
        return e
    raise AssertionError("served: %r" % (call,))


# 1. No login: the session opens, and every request but ping and close is
#    refused with NoAuth.
anon = client()
anon.start(timeout=15)
for call in (lambda: anon.get("/"), lambda: anon.create("/anon", b"x")):
    e = refused(call)
    assert isinstance(e, NoAuthError), e
anon.add_auth("digest", READER)
assert anon.exists("/anon") is None
anon.stop()
anon.close()
ok("no login, no read nor write; a late add_auth logs in")

# 2. A wrong password: the login fails with AUTH_FAILED (kazoo then
#    closes; its session callback is wrapped to see the state it passed).
bad = client(WRITER.split(":")[0] + ":not-the-password")
seen = []
session_callback = bad._session_callback
bad._session_callback = lambda state: (seen.append(state), session_callback(state))
bad.start_async()
deadline = time.monotonic() + 10
# (kazoo reports CONNECTED on the connect reply, before its auth packet.)
while KeeperState.AUTH_FAILED not in seen or bad.connected:
    assert time.monotonic() < deadline, "no AUTH_FAILED: %s" % seen
    time.sleep(0.05)
bad.stop()
bad.close()
ok("a wrong password is refused (AUTH_FAILED)")

# 3. The writer logs in and writes, with a digest ACL and a `user` ACL.
writer_name, writer_pw = WRITER.split(":", 1)
w = client(WRITER)
w.start(timeout=15)
w.create(ROOT, b"root")
w.create(ROOT + "/open", b"everybody reads")
w.create(ROOT + "/digest", b"writer only",
         acl=[make_digest_acl(writer_name, writer_pw, all=True)])
w.create(ROOT + "/user", b"writer only",
         acl=[ACL(31, Id("user", writer_name))])
assert w.get(ROOT + "/digest")[0] == b"writer only"
assert w.get(ROOT + "/user")[0] == b"writer only"
me = [(a.id.scheme, a.id.id) for a in w.get_acls(ROOT + "/user")[0]]
assert me == [("user", writer_name)], me
ok("the writer writes and reads its digest and user ACLs")

# 4. The reader reads what the ACLs let it, and writes nothing.
r = client(READER)
r.start(timeout=15)
assert r.get(ROOT + "/open")[0] == b"everybody reads"
for path in ("/digest", "/user"):
    refused_read = refused(lambda: r.get(ROOT + path))
    assert isinstance(refused_read, NoAuthError), refused_read
ok("the reader reads, but not the writer's nodes")
for write in (lambda: r.create(ROOT + "/r", b"x"),
              lambda: r.set(ROOT + "/open", b"x"),
              lambda: r.delete(ROOT + "/open")):
    e = refused(write)
    assert isinstance(e, NoAuthError), e
t = r.transaction()
t.check(ROOT + "/open", 0)
t.create(ROOT + "/in-a-multi", b"x")
e = refused(lambda: t.commit())
assert isinstance(e, NoAuthError), e
assert r.get(ROOT + "/open")[0] == b"everybody reads"
assert r.exists(ROOT + "/in-a-multi") is None
ok("the reader's writes and multis are refused with NoAuth")

# 5. The reader's session still works after the refusals.
assert sorted(r.get_children(ROOT)) == ["digest", "open", "user"]
r.stop()
r.close()

w.delete(ROOT, recursive=True)
w.stop()
w.close()
ok("the reader's session outlives its refusals; cleaned up")
print("all ok", flush=True)
