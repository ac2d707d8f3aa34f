// The ZooKeeper plumbing every mode of curator-mutex shares: connecting a
// CuratorFramework client with bounded timeouts, bounded acquire and
// release, and the fencing token (czxid) of the lock node a thread holds.
package fencing.curatormutex;

import java.util.List;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.client.ZKClientConfig;
import org.apache.zookeeper.data.Stat;

import fencing.curatormutex.LineProto.Failure;

final class Zk {
    // Timeouts: LOCK_TIMEOUT_S bounds a (possibly contended) acquire; the
    // request timeout bounds every other single ZooKeeper request (including
    // the closeSession on shutdown) so a dead ensemble cannot hang the test.
    static final long LOCK_TIMEOUT_S = 30;
    static final int CONNECT_TIMEOUT_MS = 5_000;
    static final long REQUEST_TIMEOUT_MS = 5_000;
    static final int SHUTDOWN_WAIT_MS = 5_000;

    private Zk() {}

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
        acquire(m, path, LOCK_TIMEOUT_S, "acquire");
    }

    /** Acquires within timeoutS; a failure names what (the caller's kind of acquire) and path. */
    static void acquire(InterProcessMutex m, String path, long timeoutS, String what) throws Exception {
        boolean ok;
        try {
            ok = m.acquire(timeoutS, TimeUnit.SECONDS);
        } catch (Exception e) {
            throw new Failure(what + " " + path, e);
        }
        if (!ok) {
            throw new Failure(what + " " + path + ": not granted within " + timeoutS + " s");
        }
    }

    /** Threads named name that do not keep the JVM alive. */
    static ThreadFactory daemonThreads(String name) {
        return r -> {
            Thread t = new Thread(r, name);
            t.setDaemon(true);
            return t;
        };
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
}
