// Apache Curator's recipes against a ZooKeeper ensemble (args: the connect
// string, host:port,...): InterProcessMutex, LeaderLatch and
// DistributedQueue, each between two clients (two sessions). Prints
// `ok <check>` per check and `all ok` at the end; exits 1 on a failure.
// Run by tests/zk_curator.rs, against quorumkv and against ZooKeeper itself,
// with Curator's defaults: the recipes create their parents as containers.

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.queue.DistributedQueue;
import org.apache.curator.framework.recipes.queue.QueueBuilder;
import org.apache.curator.framework.recipes.queue.QueueConsumer;
import org.apache.curator.framework.recipes.queue.QueueSerializer;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorRecipes {
    static final String ROOT = "/curator-recipes";
    static final long DEADLINE_MS = 30_000;

    static void check(boolean cond, String what) {
        if (!cond) {
            throw new IllegalStateException("FAILED: " + what);
        }
    }

    static CuratorFramework client(String hosts) throws Exception {
        CuratorFramework c = CuratorFrameworkFactory.builder()
                .connectString(hosts)
                .sessionTimeoutMs(20_000)
                .connectionTimeoutMs(10_000)
                .retryPolicy(new ExponentialBackoffRetry(100, 10))
                .build();
        c.start();
        check(c.blockUntilConnected(20, TimeUnit.SECONDS), "client connects to " + hosts);
        return c;
    }

    /// Two clients, two threads each taking the lock `rounds` times: the
    /// holders never overlap, and a counter read-modify-written under the
    /// lock (without a version) loses no update.
    static void mutex(CuratorFramework a, CuratorFramework b) throws Exception {
        String counter = ROOT + "/counter";
        a.create().creatingParentsIfNeeded().forPath(counter, "0".getBytes(StandardCharsets.UTF_8));
        int rounds = 8;
        AtomicInteger holders = new AtomicInteger();
        AtomicInteger overlaps = new AtomicInteger();
        List<Throwable> errors = new ArrayList<>();
        List<Thread> threads = new ArrayList<>();
        for (CuratorFramework c : new CuratorFramework[] {a, b}) {
            InterProcessMutex lock = new InterProcessMutex(c, ROOT + "/lock");
            Thread t = new Thread(() -> {
                try {
                    for (int i = 0; i < rounds; i++) {
                        check(lock.acquire(DEADLINE_MS, TimeUnit.MILLISECONDS), "lock acquired in time");
                        try {
                            if (holders.incrementAndGet() != 1) {
                                overlaps.incrementAndGet();
                            }
                            byte[] v = c.getData().forPath(counter);
                            int n = Integer.parseInt(new String(v, StandardCharsets.UTF_8));
                            Thread.sleep(15); // widen the window another holder would use
                            c.setData().forPath(counter, Integer.toString(n + 1).getBytes(StandardCharsets.UTF_8));
                            holders.decrementAndGet();
                        } finally {
                            lock.release();
                        }
                    }
                } catch (Throwable e) {
                    synchronized (errors) {
                        errors.add(e);
                    }
                }
            });
            threads.add(t);
            t.start();
        }
        for (Thread t : threads) {
            t.join();
        }
        if (!errors.isEmpty()) {
            throw new IllegalStateException("mutex: " + errors.get(0), errors.get(0));
        }
        check(overlaps.get() == 0, "no two holders at once (" + overlaps.get() + " overlaps)");
        int n = Integer.parseInt(new String(a.getData().forPath(counter), StandardCharsets.UTF_8));
        check(n == 2 * rounds, "counter is " + n + ", want " + (2 * rounds));
        check(a.getChildren().forPath(ROOT + "/lock").isEmpty(), "no lock node left");
        System.out.println("ok mutex");
    }

    static void await(java.util.function.BooleanSupplier cond, String what) throws InterruptedException {
        long end = System.currentTimeMillis() + DEADLINE_MS;
        while (!cond.getAsBoolean()) {
            check(System.currentTimeMillis() < end, what + " within " + DEADLINE_MS + " ms");
            Thread.sleep(20);
        }
    }

    /// Two participants: one leader, named alike by both; the leader
    /// closes its latch and the other takes over.
    static void leaderLatch(CuratorFramework a, CuratorFramework b) throws Exception {
        LeaderLatch la = new LeaderLatch(a, ROOT + "/leader", "a");
        LeaderLatch lb = new LeaderLatch(b, ROOT + "/leader", "b");
        la.start();
        lb.start();
        await(() -> la.hasLeadership() || lb.hasLeadership(), "a leader is chosen");
        // Let both settle, then exactly one leads and both name it.
        await(() -> la.getState() == LeaderLatch.State.STARTED && lb.getState() == LeaderLatch.State.STARTED, "both started");
        for (int i = 0; i < 25; i++) {
            check(!(la.hasLeadership() && lb.hasLeadership()), "never two leaders");
            Thread.sleep(20);
        }
        LeaderLatch leader = la.hasLeadership() ? la : lb;
        LeaderLatch other = leader == la ? lb : la;
        check(!other.hasLeadership(), "exactly one leader");
        check(la.getLeader().getId().equals(leader.getId()), "a names the leader");
        check(lb.getLeader().getId().equals(leader.getId()), "b names the leader");
        check(la.getParticipants().size() == 2, "two participants");
        System.out.println("ok leader-latch one leader (" + leader.getId() + ")");
        leader.close();
        check(other.await(DEADLINE_MS, TimeUnit.MILLISECONDS), "the other takes over after close");
        check(other.getLeader().getId().equals(other.getId()), "the new leader names itself");
        check(other.getParticipants().size() == 1, "one participant left");
        other.close();
        System.out.println("ok leader-latch failover");
    }

    static final QueueSerializer<String> STRINGS = new QueueSerializer<String>() {
        public byte[] serialize(String item) {
            return item.getBytes(StandardCharsets.UTF_8);
        }

        public String deserialize(byte[] bytes) {
            return new String(bytes, StandardCharsets.UTF_8);
        }
    };

    /// A producer on one client puts N items; a consumer on the other
    /// takes them all, each once.
    static void queue(CuratorFramework a, CuratorFramework b) throws Exception {
        int n = 40;
        Map<String, Integer> seen = new ConcurrentHashMap<>();
        QueueConsumer<String> consumer = new QueueConsumer<String>() {
            public void consumeMessage(String item) {
                seen.merge(item, 1, Integer::sum);
            }

            public void stateChanged(CuratorFramework c, ConnectionState s) {}
        };
        String path = ROOT + "/queue";
        DistributedQueue<String> producer = QueueBuilder.builder(a, null, STRINGS, path).buildQueue();
        DistributedQueue<String> taker = QueueBuilder.builder(b, consumer, STRINGS, path).buildQueue();
        producer.start();
        taker.start();
        for (int i = 0; i < n; i++) {
            producer.put("item-" + i);
        }
        try {
            await(() -> seen.size() == n, "all " + n + " items consumed");
        } catch (IllegalStateException e) {
            throw new IllegalStateException(e.getMessage() + ": got " + seen.size()
                    + ", left in the queue " + a.getChildren().forPath(path)
                    + "; the consumer's session answers a read: " + answers(b, path), e);
        }
        for (int i = 0; i < n; i++) {
            Integer times = seen.get("item-" + i);
            check(times != null && times == 1, "item-" + i + " consumed once, not " + times);
        }
        check(seen.size() == n, "nothing but the items put");
        await(() -> {
            try {
                return a.getChildren().forPath(path).isEmpty();
            } catch (Exception e) {
                return false;
            }
        }, "the queue empties");
        producer.close();
        taker.close();
        System.out.println("ok queue " + n + " items");
    }

    /// Whether `c`'s session answers a read of `path` within 5 s.
    static boolean answers(CuratorFramework c, String path) throws Exception {
        java.util.concurrent.CountDownLatch done = new java.util.concurrent.CountDownLatch(1);
        c.getChildren().inBackground((client, event) -> done.countDown()).forPath(path);
        return done.await(5, TimeUnit.SECONDS);
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: CuratorRecipes HOST:PORT[,HOST:PORT...]");
            System.exit(2);
        }
        String hosts = args[0];
        int code = 0;
        try (CuratorFramework a = client(hosts); CuratorFramework b = client(hosts)) {
            mutex(a, b);
            leaderLatch(a, b);
            queue(a, b);
            System.out.println("all ok");
        } catch (Throwable e) {
            e.printStackTrace();
            code = 1;
        }
        System.out.flush();
        System.exit(code);
    }
}
