// `hold`: one holder of the Rust failover-bench, the twin of `etcd-mutex
// hold` (see run).
package fencing.curatormutex;

import java.util.List;
import java.util.Map;

import org.apache.curator.framework.CuratorFramework;

import fencing.curatormutex.LineProto.Failure;

final class Hold {
    private Hold() {}

    /**
     * Takes the mutex at --path once (the OwnNodeMutex of contend, so the
     * token is the czxid of the own lock node), emits
     * {"event":"locked","id":..,"token":..,"at_ns":..} with at_ns the
     * wall-clock time (ns since the Unix epoch) taken as soon as acquire
     * returned, holds --hold-ms, releases and emits {"event":"done"}.
     */
    static void run(String[] args) throws Exception {
        Map<String, String> f = LineProto.parseFlags("hold", args,
                List.of("connect", "path", "session-timeout-ms", "hold-ms", "id"));
        if (f.containsKey("id")) {
            LineProto.id = f.get("id");
        }
        String path = f.get("path");
        int sessionTimeoutMs = LineProto.intFlag(f, "session-timeout-ms", -1);
        int holdMs = LineProto.intFlag(f, "hold-ms", -1);
        if (path == null || sessionTimeoutMs <= 0 || holdMs < 0) {
            throw new Failure("hold needs --connect, --path, --session-timeout-ms > 0 and --hold-ms >= 0");
        }
        try (CuratorFramework client = Zk.connect(f.get("connect"), sessionTimeoutMs)) {
            Zk.OwnNodeMutex m = new Zk.OwnNodeMutex(client, path);
            Zk.acquire(m, path);
            long atNs = LineProto.wallClockNanos();
            long token;
            try {
                token = Zk.ownToken(client, m, path);
            } catch (Exception e) {
                try {
                    m.release();
                } catch (Exception ignored) {
                    // the session close below removes the node anyway
                }
                throw e;
            }
            Map<String, Object> locked = LineProto.event("locked");
            locked.put("id", LineProto.id);
            locked.put("token", token);
            locked.put("at_ns", atNs);
            LineProto.emit(locked);
            Thread.sleep(holdMs);
            Zk.release(m, path);
            LineProto.emit(LineProto.event("done"));
        }
    }
}
