// `held`: N InterProcessMutex held at once on one CuratorFramework client
// (one session), the ZooKeeper twin of `etcd-mutex held` for the Rust
// held-bench, speaking the same lines.
//
// It connects, takes and releases --warmup locks unreported (a fresh JVM
// runs Curator in the interpreter otherwise), emits {"event":"connected"},
// takes --count mutexes (prefix/lock-I), --in-flight at a time, and emits
// {"event":"held"} with the throughput, resident memory before and after,
// its own CPU time over the acquires and how busy the host's CPUs were.
// Then it holds them and answers stdin lines: "cpu" gets {"event":"cpu"}
// with the process's CPU time and the wall time since it started, in µs;
// any other line releases them all, --release-in-flight at a time, and
// {"event":"released"} reports memory again.
//
// InterProcessMutex must be released by the thread that acquired it, so
// each mutex belongs to one of max(in-flight, release-in-flight) owner
// threads for its whole life; semaphores bound the acquires and the
// releases in flight.
package fencing.curatormutex;

import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Queue;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;

import fencing.curatormutex.LineProto.Failure;

final class Held {
    /** Bounds taking or releasing every lock (10,000 of them at worst). */
    static final long PHASE_LIMIT_S = 120;

    private Held() {}

    static void run(String[] args) throws Exception {
        Map<String, String> f = LineProto.parseFlags("held", args, List.of("connect", "prefix", "count",
                "in-flight", "release-in-flight", "session-timeout-ms", "warmup"));
        String prefix = f.get("prefix");
        int count = LineProto.intFlag(f, "count", 0);
        int inFlight = LineProto.intFlag(f, "in-flight", 64);
        int releaseInFlight = LineProto.intFlag(f, "release-in-flight", 1);
        int sessionTimeoutMs = LineProto.intFlag(f, "session-timeout-ms", 10_000);
        int warmup = LineProto.intFlag(f, "warmup", 0);
        if (prefix == null || count <= 0 || inFlight <= 0 || releaseInFlight <= 0 || sessionTimeoutMs <= 0
                || warmup < 0) {
            throw new Failure("held needs --prefix, --count > 0, --in-flight > 0, --release-in-flight > 0, "
                    + "--session-timeout-ms > 0 and --warmup >= 0");
        }
        long started = System.nanoTime();
        try (CuratorFramework client = Zk.connect(f.get("connect"), sessionTimeoutMs)) {
            for (int i = 0; i < warmup; i++) {
                String path = prefix + "/warm-up-" + i;
                InterProcessMutex m = new InterProcessMutex(client, path);
                Zk.acquire(m, path);
                Zk.release(m, path);
            }
            LineProto.emit(LineProto.event("connected"));
            new Held().hold(client, prefix, count, inFlight, releaseInFlight, started);
        }
    }

    private final Queue<Throwable> failures = new ConcurrentLinkedQueue<>();

    private void hold(CuratorFramework client, String prefix, int count, int inFlight, int releaseInFlight,
            long started) throws Exception {
        int owners = Math.max(inFlight, releaseInFlight);
        Semaphore acquires = new Semaphore(inFlight);
        Semaphore releases = new Semaphore(releaseInFlight);
        CountDownLatch taken = new CountDownLatch(owners);
        CountDownLatch releaseNow = new CountDownLatch(1);
        ExecutorService pool = Executors.newFixedThreadPool(owners);
        try {
            long rssBefore = rssKb();
            long[] hostBefore = hostTicks();
            long cpuBefore = cpuMicros();
            long t0 = System.nanoTime();
            List<Future<?>> done = new ArrayList<>();
            for (int w = 0; w < owners; w++) {
                int first = w;
                done.add(pool.submit(() -> {
                    List<InterProcessMutex> mine = new ArrayList<>();
                    try {
                        take(client, prefix, first, owners, count, acquires, mine);
                    } finally {
                        taken.countDown();
                    }
                    releaseNow.await();
                    for (InterProcessMutex m : mine) {
                        bounded(releases, () -> m.release());
                    }
                    return null;
                }));
            }
            if (!taken.await(PHASE_LIMIT_S, TimeUnit.SECONDS)) {
                throw new Failure(count + " acquires took over " + PHASE_LIMIT_S + " s");
            }
            double seconds = (System.nanoTime() - t0) / 1e9;
            if (!failures.isEmpty()) {
                throw new Failure("acquire", failures.peek());
            }
            Map<String, Object> held = LineProto.event("held");
            held.put("count", count);
            held.put("seconds", seconds);
            held.put("rss_kb_before", rssBefore);
            held.put("rss_kb_held", rssKb());
            held.put("host_busy_pct", busyPct(hostBefore, hostTicks()));
            held.put("cpu_us_acquire", cpuMicros() - cpuBefore);
            LineProto.emit(held);
            awaitReleaseLine(started);
            releaseNow.countDown();
            for (Future<?> d : done) {
                d.get(PHASE_LIMIT_S, TimeUnit.SECONDS);
            }
            Map<String, Object> released = LineProto.event("released");
            released.put("rss_kb_after", rssKb());
            LineProto.emit(released);
        } finally {
            releaseNow.countDown();
            pool.shutdownNow();
        }
    }

    /** Owner thread `first` takes locks first, first + owners, ... */
    private void take(CuratorFramework client, String prefix, int first, int owners, int count,
            Semaphore acquires, List<InterProcessMutex> mine) throws Exception {
        for (int i = first; i < count && failures.isEmpty(); i += owners) {
            String path = prefix + "/lock-" + i;
            InterProcessMutex m = new InterProcessMutex(client, path);
            try {
                bounded(acquires, () -> Zk.acquire(m, path));
            } catch (Exception e) {
                failures.add(e);
                throw e;
            }
            mine.add(m);
        }
    }

    interface Step {
        void run() throws Exception;
    }

    private static void bounded(Semaphore permits, Step step) throws Exception {
        permits.acquire();
        try {
            step.run();
        } finally {
            permits.release();
        }
    }

    private static void awaitReleaseLine(long started) throws Exception {
        while (true) {
            String line = LineProto.nextLine("release line");
            if (!line.trim().equals("cpu")) {
                return;
            }
            Map<String, Object> cpu = LineProto.event("cpu");
            cpu.put("cpu_us", cpuMicros());
            cpu.put("wall_us", (System.nanoTime() - started) / 1_000);
            LineProto.emit(cpu);
        }
    }

    /** This process's CPU time (every thread, user and system), in µs. */
    static long cpuMicros() {
        var os = (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        return os.getProcessCpuTime() / 1_000;
    }

    /** VmRSS of this process in KiB (0 if unknown). */
    static long rssKb() {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (line.startsWith("VmRSS:")) {
                    return Long.parseLong(line.substring(6).trim().split("\\s+")[0]);
                }
            }
        } catch (Exception e) {
            // reported as 0, as the Go side does
        }
        return 0;
    }

    /**
     * The host's CPU ticks from the first line of /proc/stat: all of them
     * and the busy ones (neither idle nor iowait; guest time is already in
     * user and nice).
     */
    static long[] hostTicks() {
        long[] t = new long[2];
        try {
            String[] f = Files.readAllLines(Path.of("/proc/stat")).get(0).trim().split("\\s+");
            for (int i = 1; i < f.length && i <= 8; i++) {
                long v = Long.parseLong(f[i]);
                t[0] += v;
                if (i != 4 && i != 5) {
                    t[1] += v;
                }
            }
        } catch (Exception e) {
            // zeros: busyPct reports 0
        }
        return t;
    }

    static double busyPct(long[] before, long[] after) {
        long total = after[0] - before[0];
        return total <= 0 ? 0 : 100.0 * (after[1] - before[1]) / total;
    }
}
