// `repro`: CURATOR-678 step by step, for the reproduction in
// integration/tests/tests/anchor_bugs (docs/anchor-bugs.md).
package fencing.curatormutex;

import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.retry.RetryNTimes;
import org.apache.zookeeper.client.ZKClientConfig;
import org.apache.zookeeper.data.Stat;

import fencing.curatormutex.LineProto.Failure;

final class Repro {
    private Repro() {}

    /**
     * --case release-during-loss: takes the mutex at --path through --connect
     * (the test's proxies), emits {"event":"step","step":"release","node":..}
     * and waits for a stdin line, during which the test blackholes the
     * proxies; then calls release() as a user would and reports
     * {"event":"released","error":..}. At the next step ("heal") the test
     * lifts the blackhole. The program then waits (bounded) for its session
     * to be connected again and for its old node to go, and reports
     * {"event":"verdict","session_kept":..,"node_left":..,"reacquired":..,
     * "other_acquired":..}: whether this thread, and a client straight to
     * the servers (--direct), can take the lock again within 3 s.
     */
    static void run(String[] args) throws Exception {
        Map<String, String> f = LineProto.parseFlags("repro", args,
                List.of("case", "connect", "direct", "path", "session-timeout-ms"));
        String path = f.get("path");
        int sessionTimeoutMs = LineProto.intFlag(f, "session-timeout-ms", 20_000);
        if (!"release-during-loss".equals(f.get("case")) || path == null || f.get("direct") == null) {
            throw new Failure("repro needs --case release-during-loss, --connect, --direct and --path");
        }
        try (CuratorFramework client = quick(f.get("connect"), sessionTimeoutMs);
                CuratorFramework other = Zk.connect(f.get("direct"), sessionTimeoutMs)) {
            long session = client.getZookeeperClient().getZooKeeper().getSessionId();
            Zk.OwnNodeMutex m = new Zk.OwnNodeMutex(client, path);
            Zk.acquire(m, path);
            String node = m.ownNode();
            step("release", node);
            String error = "";
            try {
                m.release();
            } catch (Exception e) {
                error = LineProto.describe(e);
            }
            Map<String, Object> released = LineProto.event("released");
            released.put("error", error);
            LineProto.emit(released);
            step("heal", node);
            client.blockUntilConnected(10, TimeUnit.SECONDS);
            boolean kept = client.getZookeeperClient().getZooKeeper().getSessionId() == session;
            // A guaranteed delete Curator kept for later runs in the
            // background once the connection is back; wait for it, bounded.
            long healed = System.nanoTime();
            long deadline = healed + TimeUnit.SECONDS.toNanos(10);
            Stat left = other.checkExists().forPath(node);
            while (left != null && System.nanoTime() < deadline) {
                Thread.sleep(50);
                left = other.checkExists().forPath(node);
            }
            long goneAfterMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - healed);
            boolean reacquired = m.acquire(3, TimeUnit.SECONDS);
            if (reacquired) {
                m.release();
            }
            Zk.OwnNodeMutex theirs = new Zk.OwnNodeMutex(other, path);
            boolean otherAcquired = theirs.acquire(3, TimeUnit.SECONDS);
            if (otherAcquired) {
                theirs.release();
            }
            Map<String, Object> verdict = LineProto.event("verdict");
            verdict.put("session_kept", kept);
            verdict.put("node_left", left != null);
            verdict.put("node_gone_after_ms", goneAfterMs);
            verdict.put("reacquired", reacquired);
            verdict.put("other_acquired", otherAcquired);
            LineProto.emit(verdict);
            LineProto.emit(LineProto.event("done"));
        }
    }

    /**
     * The subject's client: Zk's settings with shorter bounds (2 s request
     * timeout, 1 s connection timeout, one retry), so that its release gives
     * up after seconds instead of after Zk's half minute of retries.
     */
    private static CuratorFramework quick(String connect, int sessionTimeoutMs) throws Exception {
        ZKClientConfig zk = new ZKClientConfig();
        zk.setProperty(ZKClientConfig.ZOOKEEPER_REQUEST_TIMEOUT, "2000");
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(connect.trim())
                .sessionTimeoutMs(sessionTimeoutMs)
                .connectionTimeoutMs(1_000)
                .waitForShutdownTimeoutMs(Zk.SHUTDOWN_WAIT_MS)
                .zkClientConfig(zk)
                .retryPolicy(new RetryNTimes(1, 100))
                .build();
        client.start();
        if (!client.blockUntilConnected(Zk.CONNECT_TIMEOUT_MS, TimeUnit.MILLISECONDS)) {
            client.close();
            throw new Failure("not connected to " + connect + " within " + Zk.CONNECT_TIMEOUT_MS + " ms");
        }
        return client;
    }

    private static void step(String name, String node) throws Exception {
        Map<String, Object> e = LineProto.event("step");
        e.put("step", name);
        e.put("node", node);
        LineProto.emit(e);
        LineProto.nextLine("end of step " + name);
    }
}
