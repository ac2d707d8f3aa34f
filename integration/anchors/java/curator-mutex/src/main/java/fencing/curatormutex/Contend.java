// `contend`: the twin of `etcd-mutex contend`. Takes the mutex at --path
// --rounds times on one client (one session) and, holding it, increments
// the --counter node by a deliberately non-atomic read-modify-write: one
// {"event":"held","id","token","read"} per round (the token is the czxid of
// the own lock node), then {"event":"done","id","rounds"}.
package fencing.curatormutex;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;

import org.apache.curator.framework.CuratorFramework;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;

import fencing.curatormutex.LineProto.Failure;

final class Contend {
    private Contend() {}

    static void run(String[] args) throws Exception {
        Map<String, String> f = LineProto.parseFlags("contend", args,
                List.of("connect", "path", "counter", "rounds", "session-timeout-ms", "hold-ms", "id"));
        if (f.containsKey("id")) {
            LineProto.id = f.get("id");
        }
        String path = f.get("path");
        String counter = f.get("counter");
        int rounds = LineProto.intFlag(f, "rounds", 0);
        int sessionTimeoutMs = LineProto.intFlag(f, "session-timeout-ms", 4000);
        int holdMs = LineProto.intFlag(f, "hold-ms", 5);
        if (path == null || counter == null || rounds <= 0) {
            throw new Failure("contend needs --connect, --path, --counter and --rounds > 0");
        }
        try (CuratorFramework client = Zk.connect(f.get("connect"), sessionTimeoutMs)) {
            Zk.OwnNodeMutex m = new Zk.OwnNodeMutex(client, path);
            for (int i = 0; i < rounds; i++) {
                Zk.acquire(m, path);
                long token;
                long value;
                try {
                    token = Zk.ownToken(client, m, path);
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
                Map<String, Object> held = LineProto.event("held");
                held.put("id", LineProto.id);
                held.put("token", token);
                held.put("read", value);
                LineProto.emit(held);
                Zk.release(m, path);
            }
        }
        Map<String, Object> done = LineProto.event("done");
        done.put("id", LineProto.id);
        done.put("rounds", rounds);
        LineProto.emit(done);
    }
}
