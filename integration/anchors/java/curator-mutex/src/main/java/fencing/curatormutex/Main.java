// Command curator-mutex drives Apache Curator's InterProcessMutex so that Rust
// tests can contend with a real Java holder on the same ZooKeeper lock path
// (node = <path>/_c_<uuid>-lock-<seq>, EPHEMERAL_SEQUENTIAL, holder = lowest
// sequence). It is the ZooKeeper twin of integration/go/etcd-mutex.
//
// Every event is one JSON object on its own line on stdout, flushed at once.
// Logging goes to stderr only, at WARN (src/main/resources/simplelogger.properties),
// so stdout stays pure JSON.
package fencing.curatormutex;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.locks.LockSupport;
import java.nio.charset.StandardCharsets;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.client.ZKClientConfig;
import org.apache.zookeeper.data.Stat;

public final class Main {
    // Timeouts: LOCK_TIMEOUT_S bounds a (possibly contended) acquire; the
    // request timeout bounds every other single ZooKeeper request (including
    // the closeSession on shutdown) so a dead ensemble cannot hang the test.
    static final long LOCK_TIMEOUT_S = 30;
    static final int CONNECT_TIMEOUT_MS = 5_000;
    static final long REQUEST_TIMEOUT_MS = 5_000;
    static final int SHUTDOWN_WAIT_MS = 5_000;
    static final long QUEUE_WAIT_MS = 5_000;
    // waiters: WAITER_TIMEOUT_S bounds each queued acquire (queueing, the
    // driver's pause before the release line and the whole chain ahead of
    // it); QUEUE_ALL_MS bounds queueing all of them.
    static final long WAITER_TIMEOUT_S = 120;
    static final long QUEUE_ALL_MS = 60_000;

    static String id = "java-" + ProcessHandle.current().pid();

    private Main() {}

    public static void main(String[] args) {
        // Backstop in case the properties file is missing from the jar; must run
        // before the first logger is created.
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        System.setProperty("org.slf4j.simpleLogger.logFile", "System.err");
        int code = 0;
        try {
            if (args.length < 1) {
                throw new Failure("usage: curator-mutex contend|bench|waiters|hold|held|campaign [flags]");
            }
            String[] rest = Arrays.copyOfRange(args, 1, args.length);
            switch (args[0]) {
                case "contend" -> contend(rest);
                case "bench" -> bench(rest);
                case "waiters" -> waiters(rest);
                case "hold" -> hold(rest);
                case "held" -> Held.run(rest);
                case "campaign" -> Campaign.run(rest);
                default -> throw new Failure("unknown subcommand \"" + args[0] + "\" (want contend, bench, waiters, hold, held or campaign)");
            }
        } catch (Throwable e) {
            emitError(e);
            code = 1;
        }
        System.out.flush();
        // Curator's and ZooKeeper's threads are closed by now; exit explicitly so
        // that a stray non-daemon thread can never keep the process alive.
        System.exit(code);
    }

    // ---- output -------------------------------------------------------------

    static synchronized void emit(Map<String, Object> fields) {
        StringBuilder b = new StringBuilder(96).append('{');
        boolean first = true;
        for (Map.Entry<String, Object> f : fields.entrySet()) {
            if (!first) {
                b.append(',');
            }
            first = false;
            quote(b, f.getKey());
            b.append(':');
            Object v = f.getValue();
            if (v instanceof Number) {
                b.append(v);
            } else if (v instanceof long[] list) {
                b.append('[');
                for (int i = 0; i < list.length; i++) {
                    if (i > 0) {
                        b.append(',');
                    }
                    b.append(list[i]);
                }
                b.append(']');
            } else {
                quote(b, String.valueOf(v));
            }
        }
        b.append("}\n");
        System.out.print(b);
        System.out.flush();
    }

    static Map<String, Object> event(String name) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("event", name);
        return m;
    }

    static void emitError(Throwable e) {
        Map<String, Object> m = event("error");
        m.put("id", id);
        m.put("error", describe(e));
        emit(m);
    }

    static String describe(Throwable e) {
        if (e instanceof Failure) {
            return e.getMessage();
        }
        StringBuilder s = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (s.length() > 0) {
                s.append(": ");
            }
            String msg = t.getMessage();
            s.append(t.getClass().getSimpleName());
            if (msg != null && !msg.isEmpty()) {
                s.append(" (").append(msg).append(')');
            }
            if (t.getCause() == t) {
                break;
            }
        }
        return s.toString();
    }

    static void quote(StringBuilder b, String s) {
        b.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
                default -> {
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
                }
            }
        }
        b.append('"');
    }

    /** An error whose message is already the whole story. */
    static final class Failure extends Exception {
        Failure(String msg) {
            super(msg);
        }

        Failure(String msg, Throwable cause) {
            super(msg + ": " + describe(cause), cause);
        }
    }

    // ---- flags --------------------------------------------------------------

    /** --name value or --name=value; every flag takes a value. */
    static Map<String, String> parseFlags(String cmd, String[] args, List<String> known) throws Failure {
        Map<String, String> out = new HashMap<>();
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            if (!a.startsWith("--") || a.length() == 2) {
                throw new Failure(cmd + ": unexpected argument \"" + a + "\"");
            }
            String name = a.substring(2);
            String value;
            int eq = name.indexOf('=');
            if (eq >= 0) {
                value = name.substring(eq + 1);
                name = name.substring(0, eq);
            } else {
                if (i + 1 >= args.length) {
                    throw new Failure(cmd + ": flag --" + name + " needs a value");
                }
                value = args[++i];
            }
            if (!known.contains(name)) {
                throw new Failure(cmd + ": unknown flag --" + name + " (known: --" + String.join(", --", known) + ")");
            }
            out.put(name, value);
        }
        return out;
    }

    static int intFlag(Map<String, String> f, String name, int dflt) throws Failure {
        String v = f.get(name);
        if (v == null) {
            return dflt;
        }
        try {
            return Integer.parseInt(v.trim());
        } catch (NumberFormatException e) {
            throw new Failure("--" + name + " must be an integer, got \"" + v + "\"");
        }
    }

    // ---- ZooKeeper plumbing -------------------------------------------------

    /** Exposes the path of the lock node the calling thread holds. */
    static final class OwnNodeMutex extends InterProcessMutex {
        OwnNodeMutex(CuratorFramework client, String path) {
            super(client, path);
        }

        /** Full path of this thread's lock node, or null when it holds none. */
        String ownNode() {
            return getLockPath();
        }
    }

    static CuratorFramework connect(String connect, int sessionTimeoutMs) throws Exception {
        CuratorFramework client = started(connect, sessionTimeoutMs);
        if (!client.blockUntilConnected(CONNECT_TIMEOUT_MS, TimeUnit.MILLISECONDS)) {
            client.close();
            throw new Failure("not connected to " + connect + " within " + CONNECT_TIMEOUT_MS + " ms");
        }
        return client;
    }

    /** A started client, perhaps not connected yet. */
    static CuratorFramework started(String connect, int sessionTimeoutMs) throws Failure {
        if (connect == null || connect.isBlank()) {
            throw new Failure("--connect is required (host:port[,host:port...])");
        }
        ZKClientConfig zk = new ZKClientConfig();
        zk.setProperty(ZKClientConfig.ZOOKEEPER_REQUEST_TIMEOUT, Long.toString(REQUEST_TIMEOUT_MS));
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(connect.trim())
                .sessionTimeoutMs(sessionTimeoutMs)
                .connectionTimeoutMs(Math.min(CONNECT_TIMEOUT_MS, sessionTimeoutMs))
                .waitForShutdownTimeoutMs(SHUTDOWN_WAIT_MS)
                .zkClientConfig(zk)
                .retryPolicy(new ExponentialBackoffRetry(100, 3))
                .build();
        client.start();
        return client;
    }

    static void acquire(InterProcessMutex m, String path) throws Exception {
        boolean ok;
        try {
            ok = m.acquire(LOCK_TIMEOUT_S, TimeUnit.SECONDS);
        } catch (Exception e) {
            throw new Failure("acquire " + path, e);
        }
        if (!ok) {
            throw new Failure("acquire " + path + ": not granted within " + LOCK_TIMEOUT_S + " s");
        }
    }

    static void release(InterProcessMutex m, String path) throws Exception {
        try {
            m.release();
        } catch (Exception e) {
            throw new Failure("release " + path, e);
        }
    }

    /** Sequence suffix after the last "lock-", the order InterProcessMutex grants in. */
    static String sequenceOf(String node) {
        int i = node.lastIndexOf("lock-");
        return i < 0 ? node : node.substring(i + "lock-".length());
    }

    /**
     * The fencing token: czxid of the lock node the calling thread holds. Also
     * checks that the node still exists and is the lowest one, i.e. that we are
     * the holder by ZooKeeper's record, not only by Curator's belief.
     */
    static long ownToken(CuratorFramework client, OwnNodeMutex m, String lockPath) throws Exception {
        String own = m.ownNode();
        if (own == null) {
            throw new Failure("acquire returned but the mutex reports no lock node");
        }
        Stat st = client.checkExists().forPath(own);
        if (st == null) {
            throw new Failure("own lock node " + own + " missing after acquire (session expired?)");
        }
        List<String> children = client.getChildren().forPath(lockPath);
        String lowest = null;
        for (String c : children) {
            if (c.contains("lock-") && (lowest == null || sequenceOf(c).compareTo(sequenceOf(lowest)) < 0)) {
                lowest = c;
            }
        }
        String ownName = own.substring(own.lastIndexOf('/') + 1);
        if (!ownName.equals(lowest)) {
            throw new Failure("own lock node " + ownName + " is not the lowest under " + lockPath + " (lowest " + lowest + ")");
        }
        return st.getCzxid();
    }

    // ---- contend ------------------------------------------------------------

    static void contend(String[] args) throws Exception {
        Map<String, String> f = parseFlags("contend", args,
                List.of("connect", "path", "counter", "rounds", "session-timeout-ms", "hold-ms", "id"));
        if (f.containsKey("id")) {
            id = f.get("id");
        }
        String path = f.get("path");
        String counter = f.get("counter");
        int rounds = intFlag(f, "rounds", 0);
        int sessionTimeoutMs = intFlag(f, "session-timeout-ms", 4000);
        int holdMs = intFlag(f, "hold-ms", 5);
        if (path == null || counter == null || rounds <= 0) {
            throw new Failure("contend needs --connect, --path, --counter and --rounds > 0");
        }
        try (CuratorFramework client = connect(f.get("connect"), sessionTimeoutMs)) {
            OwnNodeMutex m = new OwnNodeMutex(client, path);
            for (int i = 0; i < rounds; i++) {
                acquire(m, path);
                long token;
                long value;
                try {
                    token = ownToken(client, m, path);
                    // Deliberately non-atomic read-modify-write: only the lock
                    // keeps the counter consistent, which is what the test checks.
                    boolean exists = true;
                    byte[] data = null;
                    try {
                        data = client.getData().forPath(counter);
                    } catch (KeeperException.NoNodeException e) {
                        exists = false;
                    }
                    value = 0;
                    if (exists) {
                        String s = data == null ? "" : new String(data, StandardCharsets.UTF_8).trim();
                        try {
                            value = s.isEmpty() ? 0 : Long.parseLong(s);
                        } catch (NumberFormatException e) {
                            throw new Failure("counter value \"" + s + "\" is not a decimal integer");
                        }
                    }
                    Thread.sleep(holdMs);
                    byte[] next = Long.toString(value + 1).getBytes(StandardCharsets.UTF_8);
                    if (exists) {
                        client.setData().forPath(counter, next);
                    } else {
                        client.create().creatingParentsIfNeeded().withMode(CreateMode.PERSISTENT).forPath(counter, next);
                    }
                } catch (Exception e) {
                    // Give the lock back before reporting, so a peer is not left
                    // waiting for our session to expire.
                    try {
                        m.release();
                    } catch (Exception ignored) {
                        // the session close below removes the node anyway
                    }
                    throw e instanceof Failure ? e : new Failure("round " + (i + 1), e);
                }
                Map<String, Object> held = event("held");
                held.put("id", id);
                held.put("token", token);
                held.put("read", value);
                emit(held);
                release(m, path);
            }
        }
        Map<String, Object> done = event("done");
        done.put("id", id);
        done.put("rounds", rounds);
        emit(done);
    }

    // ---- bench --------------------------------------------------------------

    static void bench(String[] args) throws Exception {
        Map<String, String> f = parseFlags("bench", args,
                List.of("connect", "path", "iterations", "settle-ms", "session-timeout-ms"));
        String path = f.get("path");
        int iterations = intFlag(f, "iterations", 0);
        int settleMs = intFlag(f, "settle-ms", 150);
        int sessionTimeoutMs = intFlag(f, "session-timeout-ms", 4000);
        if (path == null || iterations <= 0 || settleMs < 0) {
            throw new Failure("bench needs --connect, --path and --iterations > 0 (--settle-ms >= 0)");
        }
        long[] unc = new long[iterations];
        long[] hand = new long[iterations];
        ExecutorService waiter = Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "bench-waiter");
            t.setDaemon(true);
            return t;
        });
        try (CuratorFramework a = connect(f.get("connect"), sessionTimeoutMs);
             CuratorFramework b = connect(f.get("connect"), sessionTimeoutMs)) {
            InterProcessMutex ma = new InterProcessMutex(a, path);
            InterProcessMutex mb = new InterProcessMutex(b, path);

            // Uncontended: one mutex, after one untimed warm-up (which also
            // creates the container parents).
            acquire(ma, path);
            release(ma, path);
            for (int i = 0; i < iterations; i++) {
                long t0 = System.nanoTime();
                acquire(ma, path);
                release(ma, path);
                unc[i] = System.nanoTime() - t0;
            }

            // Handover: A holds, B queues from another thread; t0 just before
            // A's release, t1 when B's acquire returns (taken in B's thread).
            // InterProcessMutex is owned per thread, so B also releases there.
            for (int i = 0; i < iterations; i++) {
                acquire(ma, path);
                Future<Long> got = waiter.submit(() -> {
                    acquire(mb, path);
                    long t1 = System.nanoTime();
                    release(mb, path);
                    return t1;
                });
                try {
                    waitChildren(a, path, 2, got);
                    Thread.sleep(settleMs);
                } catch (Exception e) {
                    release(ma, path);
                    got.cancel(true);
                    throw e;
                }
                long t0 = System.nanoTime();
                release(ma, path);
                long t1;
                try {
                    t1 = got.get(LOCK_TIMEOUT_S + 5, TimeUnit.SECONDS);
                } catch (java.util.concurrent.ExecutionException e) {
                    throw e.getCause() instanceof Exception ex ? ex : e;
                } catch (TimeoutException e) {
                    got.cancel(true);
                    throw new Failure("waiter B did not finish within " + (LOCK_TIMEOUT_S + 5) + " s");
                }
                hand[i] = t1 - t0;
            }
        } finally {
            waiter.shutdownNow();
        }

        long[] us = stats(unc);
        long[] hs = stats(hand);
        Map<String, Object> m = event("bench");
        m.put("uncontended_median_us", us[0]);
        m.put("uncontended_p90_us", us[1]);
        m.put("handover_median_us", hs[0]);
        m.put("handover_p90_us", hs[1]);
        m.put("iterations", iterations);
        m.put("settle_ms", settleMs);
        emit(m);
    }

    /** Polls (bounded) until the lock path has at least n children. */
    static void waitChildren(CuratorFramework client, String path, int n, Future<?> waiter) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(QUEUE_WAIT_MS);
        while (true) {
            int count = client.getChildren().forPath(path).size();
            if (count >= n) {
                return;
            }
            if (waiter.isDone()) {
                waiter.get(); // surfaces B's error
                throw new Failure("waiter B finished before it queued behind A");
            }
            if (System.nanoTime() > deadline) {
                throw new Failure("waiter did not queue within " + QUEUE_WAIT_MS + " ms (" + count + " children under " + path + ")");
            }
            LockSupport.parkNanos(200_000);
        }
    }

    // ---- waiters ------------------------------------------------------------

    /**
     * Hand-over down a queue, the twin of etcd-mutex waiters: a holder takes
     * the lock, --count waiters queue behind it (each its own client, so its
     * own session, and its own thread: InterProcessMutex is owned per
     * thread), {"event":"queued"} once all their lock nodes exist; after a
     * line on stdin the holder releases, each waiter releases as soon as it
     * holds, and {"event":"done","granted_us":[...]} gives the grant times in
     * µs after the release, sorted. The clients close only after a second
     * line on stdin, so the driver can read server counters first. With
     * --warmup N the same chain runs N times before, unreported.
     */
    static void waiters(String[] args) throws Exception {
        Map<String, String> f = parseFlags("waiters", args,
                List.of("connect", "path", "count", "session-timeout-ms", "warmup"));
        String path = f.get("path");
        int count = intFlag(f, "count", 0);
        int sessionTimeoutMs = intFlag(f, "session-timeout-ms", 4000);
        int warmup = intFlag(f, "warmup", 0);
        if (path == null || count <= 0 || warmup < 0) {
            throw new Failure("waiters needs --connect, --path and --count > 0 (--warmup >= 0)");
        }
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        List<CuratorFramework> clients = new ArrayList<>(count + 1);
        ExecutorService pool = Executors.newFixedThreadPool(count, r -> {
            Thread t = new Thread(r, "waiter");
            t.setDaemon(true);
            return t;
        });
        try {
            for (int i = 0; i <= count; i++) {
                clients.add(connect(f.get("connect"), sessionTimeoutMs));
            }
            List<InterProcessMutex> mutexes = new ArrayList<>(count + 1);
            for (CuratorFramework c : clients) {
                mutexes.add(new InterProcessMutex(c, path));
            }
            // The same chain --warmup times unreported (no stdin, no events),
            // so the JIT has compiled the paths the reported one takes.
            for (int round = 0; round < warmup; round++) {
                chain(clients.get(0), mutexes, path, pool);
            }
            long[] us = chain(clients.get(0), mutexes, path, pool, () -> {
                emit(event("queued"));
                if (in.readLine() == null) {
                    throw new Failure("stdin closed before the release line");
                }
            });
            Map<String, Object> done = event("done");
            done.put("granted_us", us);
            emit(done);
            in.readLine();
        } finally {
            pool.shutdownNow();
            // Each close is bounded (request timeout, waitForShutdownTimeoutMs);
            // a holder that never released loses its node with its session.
            for (CuratorFramework c : clients) {
                c.close();
            }
        }
    }

    interface Step {
        void run() throws Exception;
    }

    static long[] chain(CuratorFramework first, List<InterProcessMutex> mutexes, String path, ExecutorService pool)
            throws Exception {
        return chain(first, mutexes, path, pool, () -> { });
    }

    /**
     * One hand-over chain: mutexes[0] (the holder) takes the lock, the others
     * queue, each in a pool thread; once all their nodes exist, beforeRelease
     * runs, the holder releases, and each waiter releases as soon as it holds.
     * Returns the grant times in µs after the release, sorted.
     */
    static long[] chain(CuratorFramework first, List<InterProcessMutex> mutexes, String path, ExecutorService pool,
                        Step beforeRelease) throws Exception {
        int count = mutexes.size() - 1;
        InterProcessMutex holder = mutexes.get(0);
        acquire(holder, path);
        List<Future<Long>> grants = new ArrayList<>(count);
        for (InterProcessMutex m : mutexes.subList(1, mutexes.size())) {
            grants.add(pool.submit(() -> {
                boolean ok;
                try {
                    ok = m.acquire(WAITER_TIMEOUT_S, TimeUnit.SECONDS);
                } catch (Exception e) {
                    throw new Failure("waiter acquire " + path, e);
                }
                if (!ok) {
                    throw new Failure("waiter acquire " + path + ": not granted within " + WAITER_TIMEOUT_S + " s");
                }
                long at = System.nanoTime();
                release(m, path);
                return at;
            }));
        }
        waitQueued(first, path, count + 1, grants);
        beforeRelease.run();
        long t0 = System.nanoTime();
        release(holder, path);
        long deadline = t0 + TimeUnit.SECONDS.toNanos(WAITER_TIMEOUT_S);
        long[] us = new long[count];
        for (int i = 0; i < count; i++) {
            long left = Math.max(0, deadline - System.nanoTime());
            try {
                us[i] = (grants.get(i).get(left, TimeUnit.NANOSECONDS) - t0) / 1_000;
            } catch (ExecutionException e) {
                throw e.getCause() instanceof Exception ex ? ex : e;
            } catch (TimeoutException e) {
                throw new Failure("waiter " + (i + 1) + " not granted within " + WAITER_TIMEOUT_S + " s of the release");
            }
        }
        Arrays.sort(us);
        return us;
    }

    /** Polls (bounded) until the lock path has at least n children; a waiter's failure surfaces at once. */
    static void waitQueued(CuratorFramework client, String path, int n, List<Future<Long>> waiters) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(QUEUE_ALL_MS);
        while (true) {
            int found = client.getChildren().forPath(path).size();
            if (found >= n) {
                return;
            }
            for (Future<Long> w : waiters) {
                if (w.isDone()) {
                    try {
                        w.get();
                    } catch (ExecutionException e) {
                        throw e.getCause() instanceof Exception ex ? ex : e;
                    }
                    throw new Failure("a waiter was granted while the holder held " + path);
                }
            }
            if (System.nanoTime() > deadline) {
                throw new Failure("only " + found + " of " + n + " lock nodes under " + path + " after " + QUEUE_ALL_MS + " ms");
            }
            LockSupport.parkNanos(5_000_000);
        }
    }

    // ---- hold ---------------------------------------------------------------

    /**
     * Takes the mutex at --path once (the OwnNodeMutex of contend, so the
     * token is the czxid of the own lock node), emits
     * {"event":"locked","id":..,"token":..,"at_ns":..} with at_ns the
     * wall-clock time (ns since the Unix epoch) taken as soon as acquire
     * returned, holds --hold-ms, releases and emits {"event":"done"}.
     */
    static void hold(String[] args) throws Exception {
        Map<String, String> f = parseFlags("hold", args,
                List.of("connect", "path", "session-timeout-ms", "hold-ms", "id"));
        if (f.containsKey("id")) {
            id = f.get("id");
        }
        String path = f.get("path");
        int sessionTimeoutMs = intFlag(f, "session-timeout-ms", -1);
        int holdMs = intFlag(f, "hold-ms", -1);
        if (path == null || sessionTimeoutMs <= 0 || holdMs < 0) {
            throw new Failure("hold needs --connect, --path, --session-timeout-ms > 0 and --hold-ms >= 0");
        }
        try (CuratorFramework client = connect(f.get("connect"), sessionTimeoutMs)) {
            OwnNodeMutex m = new OwnNodeMutex(client, path);
            acquire(m, path);
            long atNs = wallClockNanos();
            long token;
            try {
                token = ownToken(client, m, path);
            } catch (Exception e) {
                try {
                    m.release();
                } catch (Exception ignored) {
                    // the session close below removes the node anyway
                }
                throw e;
            }
            Map<String, Object> locked = event("locked");
            locked.put("id", id);
            locked.put("token", token);
            locked.put("at_ns", atNs);
            emit(locked);
            Thread.sleep(holdMs);
            release(m, path);
            emit(event("done"));
        }
    }

    /** Wall-clock time in ns since the Unix epoch (Instant: µs or finer on Linux). */
    static long wallClockNanos() {
        Instant now = Instant.now();
        return Math.addExact(Math.multiplyExact(now.getEpochSecond(), 1_000_000_000L), now.getNano());
    }

    /** Median and 90th percentile (nearest rank) in µs, as the Go program computes them. */
    static long[] stats(long[] nanos) {
        long[] d = nanos.clone();
        Arrays.sort(d);
        return new long[] {rank(d, 0.5), rank(d, 0.9)};
    }

    static long rank(long[] sorted, double p) {
        int i = (int) (p * sorted.length + 0.999999) - 1;
        if (i < 0) {
            i = 0;
        }
        return sorted[i] / 1_000;
    }
}
