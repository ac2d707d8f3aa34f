// `waiters`: hand-over down a queue, the twin of `etcd-mutex waiters` for
// the Rust waiter-bench (see run).
package fencing.curatormutex;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.locks.LockSupport;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;

import fencing.curatormutex.LineProto.Failure;

final class Waiters {
    // waiters: WAITER_TIMEOUT_S bounds each queued acquire (queueing, the
    // driver's pause before the release line and the whole chain ahead of
    // it); QUEUE_ALL_MS bounds queueing all of them.
    static final long WAITER_TIMEOUT_S = 120;
    static final long QUEUE_ALL_MS = 60_000;

    private Waiters() {}

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
    static void run(String[] args) throws Exception {
        Map<String, String> f = LineProto.parseFlags("waiters", args,
                List.of("connect", "path", "count", "session-timeout-ms", "warmup"));
        String path = f.get("path");
        int count = LineProto.intFlag(f, "count", 0);
        int sessionTimeoutMs = LineProto.intFlag(f, "session-timeout-ms", 4000);
        int warmup = LineProto.intFlag(f, "warmup", 0);
        if (path == null || count <= 0 || warmup < 0) {
            throw new Failure("waiters needs --connect, --path and --count > 0 (--warmup >= 0)");
        }
        List<CuratorFramework> clients = new ArrayList<>(count + 1);
        ExecutorService pool = Executors.newFixedThreadPool(count, Zk.daemonThreads("waiter"));
        try {
            for (int i = 0; i <= count; i++) {
                clients.add(Zk.connect(f.get("connect"), sessionTimeoutMs));
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
                LineProto.emit(LineProto.event("queued"));
                LineProto.nextLine("release line");
            });
            Map<String, Object> done = LineProto.event("done");
            done.put("granted_us", us);
            LineProto.emit(done);
            LineProto.stdin().readLine();
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
        Zk.acquire(holder, path);
        List<Future<Long>> grants = new ArrayList<>(count);
        for (InterProcessMutex m : mutexes.subList(1, mutexes.size())) {
            grants.add(pool.submit(() -> {
                Zk.acquire(m, path, WAITER_TIMEOUT_S, "waiter acquire");
                long at = System.nanoTime();
                Zk.release(m, path);
                return at;
            }));
        }
        waitQueued(first, path, count + 1, grants);
        beforeRelease.run();
        long t0 = System.nanoTime();
        Zk.release(holder, path);
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
}
