// The anchor client of the Rust fault campaign (integration/campaign):
// Curator's InterProcessMutex on the same lock path as the campaign's Rust
// clients (their zk:// path + "/" + the lock), under the same faults,
// speaking their line protocol. It learns of a lost grant only through
// Curator's ConnectionStateListener (SUSPENDED or LOST), as a Curator user
// would; the campaign's checker exempts it from noticing a loss in time and
// demands instead that the storage refused its late writes.
//
// Lines out, one JSON object each: {"acquire_start":{...}}, {"grant":{...,
// "token"}}, {"lost":{..., "token", "reason"}}, {"release":{..., "token",
// "id"}} and {"mem_write":{"id", ..., "token", "value"}}, every one with
// "resource". Lines in: {"id":N,"accepted":BOOL}, the answers to release
// and mem_write. The token is the czxid of the own lock node, the token the
// Rust ZkSource mints for it. Closing stdin ends the program.
package fencing.curatormutex;

import java.io.IOException;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.state.ConnectionState;

import fencing.curatormutex.LineProto.Failure;

final class Campaign {
    /** The Rust clients' write limit: an answer later than this is no answer. */
    static final long REPLY_LIMIT_MS = 2_000;
    /** One bounded acquire, as the Rust clients and the Go anchor wait. */
    static final long ACQUIRE_LIMIT_MS = 5_000;
    static final long WRITE_EVERY_MS = 25;

    private static final Pattern ID = Pattern.compile("\"id\"\\s*:\\s*(\\d+)");
    private static final Pattern ACCEPTED = Pattern.compile("\"accepted\"\\s*:\\s*(true|false)");

    private final String resource;
    private final BlockingQueue<long[]> replies = new LinkedBlockingQueue<>();
    private volatile boolean stopped;
    /** Moves on every SUSPENDED or LOST: a grant taken before it moved is lost. */
    private final AtomicLong interruptions = new AtomicLong();
    private volatile String lastInterruption = "";
    private long nextId;
    private long value;

    private Campaign(String resource) {
        this.resource = resource;
    }

    static void run(String[] args) throws Exception {
        Map<String, String> f = LineProto.parseFlags("campaign", args,
                List.of("connect", "path", "lock", "session-timeout-ms", "seed", "long-hold-ms", "long-percent"));
        String path = f.get("path");
        String lock = f.get("lock");
        int sessionTimeoutMs = LineProto.intFlag(f, "session-timeout-ms", 1000);
        int longHoldMs = LineProto.intFlag(f, "long-hold-ms", 3000);
        int longPercent = LineProto.intFlag(f, "long-percent", 5);
        long seed;
        try {
            seed = Long.parseLong(f.getOrDefault("seed", "1").trim());
        } catch (NumberFormatException e) {
            throw new Failure("--seed must be an integer, got \"" + f.get("seed") + "\"");
        }
        if (path == null || lock == null || sessionTimeoutMs <= 0 || longHoldMs < 1000) {
            throw new Failure("campaign needs --connect, --path, --lock, --session-timeout-ms > 0"
                    + " and --long-hold-ms >= 1000");
        }
        Campaign a = new Campaign(lock);
        Thread reader = new Thread(a::readStdin, "stdin");
        reader.setDaemon(true);
        reader.start();
        // Not waiting to connect: a client restarted inside a partition
        // keeps trying (Curator reconnects) until stdin closes.
        try (CuratorFramework client = Zk.started(f.get("connect"), sessionTimeoutMs)) {
            client.getConnectionStateListenable().addListener((c, state) -> {
                if (state == ConnectionState.SUSPENDED || state == ConnectionState.LOST) {
                    a.lastInterruption = state.name();
                    a.interruptions.incrementAndGet();
                }
            });
            Random rng = new Random(seed);
            while (!a.stopped) {
                if (!client.getZookeeperClient().isConnected()) {
                    client.blockUntilConnected(200, TimeUnit.MILLISECONDS);
                    continue;
                }
                // The Rust clients' mix: mostly 10-150 ms, some from 1 s up.
                long hold = 10 + rng.nextInt(141);
                if (rng.nextInt(100) < longPercent) {
                    hold = 1000 + rng.nextInt(longHoldMs - 999);
                }
                a.holdOnce(client, path, hold);
            }
        }
    }

    /** Locks, writes every 25 ms for hold ms (or until the connection is interrupted), and unlocks. */
    private void holdOnce(CuratorFramework client, String path, long hold) throws InterruptedException {
        send("acquire_start", "");
        Zk.OwnNodeMutex m = new Zk.OwnNodeMutex(client, path);
        boolean ok;
        try {
            ok = m.acquire(ACQUIRE_LIMIT_MS, TimeUnit.MILLISECONDS);
        } catch (Exception e) {
            ok = false;
        }
        if (!ok) {
            Thread.sleep(50);
            return;
        }
        // What a Curator user goes by from now on: the listener.
        long interrupted = interruptions.get();
        long token;
        try {
            token = Zk.ownToken(client, m, path);
        } catch (Exception e) {
            System.err.println("campaign: no token after acquire: " + LineProto.describe(e));
            releaseQuietly(m);
            return;
        }
        if (interruptions.get() != interrupted) {
            releaseQuietly(m);
            return;
        }
        send("grant", ",\"token\":" + token);
        long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(hold);
        while (System.nanoTime() < until && !stopped) {
            Thread.sleep(WRITE_EVERY_MS);
            if (interruptions.get() != interrupted) {
                lost(m, token);
                return;
            }
            long id = ++nextId;
            value++;
            send("mem_write", ",\"id\":" + id + ",\"token\":" + token + ",\"value\":" + value);
            await(id);
        }
        if (interruptions.get() != interrupted) {
            lost(m, token);
            return;
        }
        long id = ++nextId;
        send("release", ",\"token\":" + token + ",\"id\":" + id);
        await(id);
        releaseQuietly(m);
    }

    private void lost(Zk.OwnNodeMutex m, long token) {
        StringBuilder reason = new StringBuilder(",\"reason\":");
        LineProto.quote(reason, "connection " + lastInterruption);
        send("lost", ",\"token\":" + token + reason);
        releaseQuietly(m);
    }

    /** Gives the lock back; after a lost session there may be nothing left to give. */
    private static void releaseQuietly(Zk.OwnNodeMutex m) {
        try {
            m.release();
        } catch (Exception e) {
            System.err.println("campaign: release: " + LineProto.describe(e));
        }
    }

    /** One line of the protocol: {"kind":{"resource":..., fields}}. */
    private void send(String kind, String fields) {
        StringBuilder b = new StringBuilder(128).append('{');
        LineProto.quote(b, kind);
        b.append(":{\"resource\":");
        LineProto.quote(b, resource);
        b.append(fields).append("}}\n");
        if (!LineProto.writeLine(b)) {
            System.exit(0); // the controller is gone
        }
    }

    /** Waits for the answer to request id; false when none came in time. */
    private boolean await(long id) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(REPLY_LIMIT_MS);
        while (true) {
            long left = deadline - System.nanoTime();
            if (left <= 0 || (stopped && replies.isEmpty())) {
                return false;
            }
            long[] r = replies.poll(Math.min(left, TimeUnit.MILLISECONDS.toNanos(50)), TimeUnit.NANOSECONDS);
            if (r != null && r[0] == id) {
                return r[1] != 0;
            }
        }
    }

    /** Passes answers on; sets stopped when stdin closes. */
    private void readStdin() {
        try {
            String line;
            while ((line = LineProto.stdin().readLine()) != null) {
                Matcher id = ID.matcher(line);
                Matcher accepted = ACCEPTED.matcher(line);
                if (id.find() && accepted.find()) {
                    replies.add(new long[] {Long.parseLong(id.group(1)), accepted.group(1).equals("true") ? 1 : 0});
                }
            }
        } catch (IOException | NumberFormatException e) {
            System.err.println("campaign: reading stdin: " + LineProto.describe(e));
        }
        stopped = true;
    }
}
