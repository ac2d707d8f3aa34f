// `bench`: the twin of `etcd-mutex bench` for the Rust anchor-bench. Times
// --iterations uncontended acquire+release cycles on one client, then
// --iterations handovers between two (A releases, B's queued acquire
// returns), and reports the median and 90th percentile of each in one
// {"event":"bench"}.
package fencing.curatormutex;

import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.locks.LockSupport;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;

import fencing.curatormutex.LineProto.Failure;

final class Bench {
    /** Bounds waiting for waiter B to queue behind A. */
    static final long QUEUE_WAIT_MS = 5_000;

    private Bench() {}

    static void run(String[] args) throws Exception {
        Map<String, String> f = LineProto.parseFlags("bench", args,
                List.of("connect", "path", "iterations", "settle-ms", "session-timeout-ms"));
        String path = f.get("path");
        int iterations = LineProto.intFlag(f, "iterations", 0);
        int settleMs = LineProto.intFlag(f, "settle-ms", 150);
        int sessionTimeoutMs = LineProto.intFlag(f, "session-timeout-ms", 4000);
        if (path == null || iterations <= 0 || settleMs < 0) {
            throw new Failure("bench needs --connect, --path and --iterations > 0 (--settle-ms >= 0)");
        }
        long[] unc = new long[iterations];
        long[] hand = new long[iterations];
        ExecutorService waiter = Executors.newSingleThreadExecutor(Zk.daemonThreads("bench-waiter"));
        try (CuratorFramework a = Zk.connect(f.get("connect"), sessionTimeoutMs);
             CuratorFramework b = Zk.connect(f.get("connect"), sessionTimeoutMs)) {
            InterProcessMutex ma = new InterProcessMutex(a, path);
            InterProcessMutex mb = new InterProcessMutex(b, path);

            // Uncontended: one mutex, after one untimed warm-up (which also
            // creates the container parents).
            Zk.acquire(ma, path);
            Zk.release(ma, path);
            for (int i = 0; i < iterations; i++) {
                long t0 = System.nanoTime();
                Zk.acquire(ma, path);
                Zk.release(ma, path);
                unc[i] = System.nanoTime() - t0;
            }

            // Handover: A holds, B queues from another thread; t0 just before
            // A's release, t1 when B's acquire returns (taken in B's thread).
            // InterProcessMutex is owned per thread, so B also releases there.
            for (int i = 0; i < iterations; i++) {
                Zk.acquire(ma, path);
                Future<Long> got = waiter.submit(() -> {
                    Zk.acquire(mb, path);
                    long t1 = System.nanoTime();
                    Zk.release(mb, path);
                    return t1;
                });
                try {
                    waitChildren(a, path, 2, got);
                    Thread.sleep(settleMs);
                } catch (Exception e) {
                    Zk.release(ma, path);
                    got.cancel(true);
                    throw e;
                }
                long t0 = System.nanoTime();
                Zk.release(ma, path);
                long t1;
                try {
                    t1 = got.get(Zk.LOCK_TIMEOUT_S + 5, TimeUnit.SECONDS);
                } catch (java.util.concurrent.ExecutionException e) {
                    throw e.getCause() instanceof Exception ex ? ex : e;
                } catch (TimeoutException e) {
                    got.cancel(true);
                    throw new Failure("waiter B did not finish within " + (Zk.LOCK_TIMEOUT_S + 5) + " s");
                }
                hand[i] = t1 - t0;
            }
        } finally {
            waiter.shutdownNow();
        }

        long[] us = stats(unc);
        long[] hs = stats(hand);
        Map<String, Object> m = LineProto.event("bench");
        m.put("uncontended_median_us", us[0]);
        m.put("uncontended_p90_us", us[1]);
        m.put("handover_median_us", hs[0]);
        m.put("handover_p90_us", hs[1]);
        m.put("iterations", iterations);
        m.put("settle_ms", settleMs);
        LineProto.emit(m);
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
