// The Java ZooKeeper client's TTL nodes, containers and TTL nodes in a
// multi, getEphemerals and whoAmI against an ensemble (args: the connect
// string, host:port,...). Prints `ok <check>` per check and `all ok` at
// the end; exits 1 on a failure. Run by tests/zk_extended.rs against
// quorumkv and against ZooKeeper 3.8 itself (started with
// -Dzookeeper.extendedTypesEnabled=true, without which ZooKeeper refuses
// TTL nodes), so what it asserts is ZooKeeper's behaviour.

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.Op;
import org.apache.zookeeper.OpResult;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.data.ClientInfo;
import org.apache.zookeeper.data.Stat;

public class ExtendedTypes {
    static final String ROOT = "/extended-types";
    static final long DEADLINE_MS = 30_000;
    static final byte[] DATA = "d".getBytes(StandardCharsets.UTF_8);

    static void check(boolean cond, String what) {
        if (!cond) {
            throw new IllegalStateException("FAILED: " + what);
        }
    }

    static ZooKeeper connect(String hosts) throws Exception {
        CountDownLatch up = new CountDownLatch(1);
        ZooKeeper zk = new ZooKeeper(hosts, 20_000, e -> {
            if (e.getState() == Watcher.Event.KeeperState.SyncConnected) {
                up.countDown();
            }
        });
        check(up.await(20, TimeUnit.SECONDS), "client connects to " + hosts);
        return zk;
    }

    /// Wait until `path` is gone; false if it is still there at the deadline.
    static boolean gone(ZooKeeper zk, String path) throws Exception {
        long end = System.currentTimeMillis() + DEADLINE_MS;
        while (System.currentTimeMillis() < end) {
            if (zk.exists(path, false) == null) {
                return true;
            }
            Thread.sleep(50);
        }
        return false;
    }

    /// TTL nodes: created (plain and sequential) with their stat, whose
    /// ephemeralOwner ZooKeeper shows as 0; one without children goes
    /// after its TTL; one with a child stays while it has it.
    static void ttlNodes(ZooKeeper zk) throws Exception {
        Stat st = new Stat();
        String p = zk.create(ROOT + "/ttl", DATA, ZooDefs.Ids.OPEN_ACL_UNSAFE,
                CreateMode.PERSISTENT_WITH_TTL, st, 300);
        check(p.equals(ROOT + "/ttl"), "a TTL node is created at its path: " + p);
        check(st.getEphemeralOwner() == 0, "a TTL node's ephemeralOwner is 0: " + st);
        check(st.getCzxid() > 0 && st.getDataLength() == 1, "create answers the stat: " + st);
        String s = zk.create(ROOT + "/seq-", DATA, ZooDefs.Ids.OPEN_ACL_UNSAFE,
                CreateMode.PERSISTENT_SEQUENTIAL_WITH_TTL, null, 300);
        check(s.matches(ROOT + "/seq-\\d{10}"), "a sequential TTL node has a suffix: " + s);
        System.out.println("ok ttl create " + p + " " + s);

        String parent = zk.create(ROOT + "/parent", DATA, ZooDefs.Ids.OPEN_ACL_UNSAFE,
                CreateMode.PERSISTENT_WITH_TTL, null, 300);
        zk.create(parent + "/kid", DATA, ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT);
        check(gone(zk, p), p + " is deleted after its TTL");
        check(gone(zk, s), s + " is deleted after its TTL");
        System.out.println("ok ttl nodes expire");
        check(zk.exists(parent, false) != null, "a TTL node with a child stays");
        zk.delete(parent + "/kid", -1);
        check(gone(zk, parent), "a TTL node whose last child went is deleted");
        System.out.println("ok a ttl node with a child stays until the child goes");
    }

    /// A container's and a TTL node's creates in one multi, with a plain
    /// create: each answered with its path (the first two with a stat).
    static void multi(ZooKeeper zk) throws Exception {
        List<OpResult> rs = zk.multi(Arrays.asList(
                Op.create(ROOT + "/m-container", DATA, ZooDefs.Ids.OPEN_ACL_UNSAFE,
                        CreateMode.CONTAINER),
                Op.create(ROOT + "/m-ttl", DATA, ZooDefs.Ids.OPEN_ACL_UNSAFE,
                        CreateMode.PERSISTENT_WITH_TTL, 60_000),
                Op.create(ROOT + "/m-container/kid", DATA, ZooDefs.Ids.OPEN_ACL_UNSAFE,
                        CreateMode.PERSISTENT)));
        check(rs.size() == 3, "a multi answers each operation: " + rs);
        String[] want = {ROOT + "/m-container", ROOT + "/m-ttl", ROOT + "/m-container/kid"};
        for (int i = 0; i < 3; i++) {
            OpResult.CreateResult c = (OpResult.CreateResult) rs.get(i);
            check(c.getPath().equals(want[i]), "created " + want[i] + ": " + c.getPath());
            boolean stat = c.getStat() != null;
            check(stat == (i < 2), "result " + i + " carries a stat: " + stat);
            if (stat) {
                check(c.getStat().getEphemeralOwner() == 0, "owner 0 in " + c.getStat());
            }
        }
        check(zk.exists(ROOT + "/m-ttl", false) != null, "the TTL node is there");
        System.out.println("ok container and ttl creates in a multi");
        // A failing multi leaves neither: the TTL node exists already.
        try {
            zk.multi(Arrays.asList(
                    Op.create(ROOT + "/m-container2", DATA, ZooDefs.Ids.OPEN_ACL_UNSAFE,
                            CreateMode.CONTAINER),
                    Op.create(ROOT + "/m-ttl", DATA, ZooDefs.Ids.OPEN_ACL_UNSAFE,
                            CreateMode.PERSISTENT_WITH_TTL, 60_000)));
            check(false, "a multi creating an existing node fails");
        } catch (KeeperException.NodeExistsException e) {
            List<OpResult> res = e.getResults();
            int first = ((OpResult.ErrorResult) res.get(0)).getErr();
            int second = ((OpResult.ErrorResult) res.get(1)).getErr();
            check(first == 0 && second == KeeperException.Code.NODEEXISTS.intValue(),
                    "results " + first + " " + second);
        }
        check(zk.exists(ROOT + "/m-container2", false) == null, "nothing of a failed multi");
        zk.delete(ROOT + "/m-container/kid", -1);
        check(gone(zk, ROOT + "/m-container"), "the multi's container goes once emptied");
        zk.delete(ROOT + "/m-ttl", -1);
        System.out.println("ok a failed multi creates nothing");
    }

    /// getEphemerals: the session's ephemerals, all or by prefix (a string
    /// prefix); another session's are not among them.
    static void ephemerals(ZooKeeper zk, ZooKeeper other) throws Exception {
        String dir = zk.create(ROOT + "/eph", DATA, ZooDefs.Ids.OPEN_ACL_UNSAFE,
                CreateMode.PERSISTENT);
        for (String name : new String[] {"/e1", "/e2", "/f1"}) {
            zk.create(dir + name, DATA, ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.EPHEMERAL);
        }
        String seq = zk.create(dir + "/s-", DATA, ZooDefs.Ids.OPEN_ACL_UNSAFE,
                CreateMode.EPHEMERAL_SEQUENTIAL);
        other.create(dir + "/o1", DATA, ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.EPHEMERAL);
        TreeSet<String> all = new TreeSet<>(zk.getEphemerals());
        TreeSet<String> want = new TreeSet<>(Arrays.asList(dir + "/e1", dir + "/e2", dir + "/f1", seq));
        check(all.equals(want), "getEphemerals() is the session's: " + all);
        check(new TreeSet<>(zk.getEphemerals("/")).equals(want), "getEphemerals(/) too");
        TreeSet<String> e = new TreeSet<>(zk.getEphemerals(dir + "/e"));
        check(e.equals(new TreeSet<>(Arrays.asList(dir + "/e1", dir + "/e2"))),
                "a prefix matches as a string: " + e);
        check(zk.getEphemerals(dir + "/none").isEmpty(), "no match, none");
        check(other.getEphemerals(dir).equals(List.of(dir + "/o1")), "the other session's");
        System.out.println("ok getEphemerals " + all);
    }

    /// whoAmI: the connection's identities; a digest added with addAuth
    /// shows as (digest, user). ZooKeeper also lists the client's address
    /// (scheme ip), which quorumkv has no ACL scheme for and leaves out:
    /// the comparison is without `ip`.
    static void whoAmI(ZooKeeper zk) throws Exception {
        List<ClientInfo> before = zk.whoAmI();
        check(withoutIp(before).isEmpty(), "no identity before addAuth: " + show(before));
        zk.addAuthInfo("digest", "alice:secret".getBytes(StandardCharsets.UTF_8));
        List<ClientInfo> after = zk.whoAmI();
        check(withoutIp(after).equals(List.of("digest:alice")),
                "addAuth's digest, by its user: " + show(after));
        System.out.println("ok whoAmI " + show(before) + " then " + show(after));
    }

    static List<String> withoutIp(List<ClientInfo> infos) {
        List<String> out = new ArrayList<>();
        for (ClientInfo c : infos) {
            if (!c.getAuthScheme().equals("ip")) {
                out.add(c.getAuthScheme() + ":" + c.getUser());
            }
        }
        return out;
    }

    static String show(List<ClientInfo> infos) {
        List<String> out = new ArrayList<>();
        for (ClientInfo c : infos) {
            out.add(c.getAuthScheme() + ":" + c.getUser());
        }
        return out.toString();
    }

    public static void main(String[] args) throws Exception {
        String hosts = args[0];
        ZooKeeper zk = connect(hosts);
        ZooKeeper other = connect(hosts);
        int status = 1;
        try {
            zk.create(ROOT, DATA, ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT);
            ttlNodes(zk);
            multi(zk);
            ephemerals(zk, other);
            whoAmI(zk);
            System.out.println("all ok");
            status = 0;
        } catch (Throwable t) {
            t.printStackTrace(System.out);
        } finally {
            zk.close();
            other.close();
        }
        System.exit(status);
    }
}
