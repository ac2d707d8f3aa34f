// Command curator-mutex drives Apache Curator's InterProcessMutex so that Rust
// tests can contend with a real Java holder on the same ZooKeeper lock path
// (node = <path>/_c_<uuid>-lock-<seq>, EPHEMERAL_SEQUENTIAL, holder = lowest
// sequence). It is the ZooKeeper twin of integration/anchors/go/etcd-mutex.
//
// Every event is one JSON object on its own line on stdout, flushed at once
// (LineProto, which also reads the flags and stdin). Logging goes to stderr
// only, at WARN (src/main/resources/simplelogger.properties), so stdout stays
// pure JSON.
//
// Each subcommand is the class of its name: Contend, Bench, Waiters, Hold,
// Held and Campaign; Zk holds the ZooKeeper plumbing they share. Main only
// dispatches, and reports a failure as {"event":"error","id","error"} with
// exit code 1.
package fencing.curatormutex;

import java.util.Arrays;

import fencing.curatormutex.LineProto.Failure;

public final class Main {
    private Main() {}

    public static void main(String[] args) {
        // Backstop in case the properties file is missing from the jar; must run
        // before the first logger is created.
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        System.setProperty("org.slf4j.simpleLogger.logFile", "System.err");
        int code = 0;
        try {
            if (args.length < 1) {
                throw new Failure("usage: curator-mutex contend|bench|waiters|hold|held|campaign|repro [flags]");
            }
            String[] rest = Arrays.copyOfRange(args, 1, args.length);
            switch (args[0]) {
                case "contend" -> Contend.run(rest);
                case "bench" -> Bench.run(rest);
                case "waiters" -> Waiters.run(rest);
                case "hold" -> Hold.run(rest);
                case "held" -> Held.run(rest);
                case "campaign" -> Campaign.run(rest);
                case "repro" -> Repro.run(rest);
                default -> throw new Failure("unknown subcommand \"" + args[0] + "\" (want contend, bench, waiters, hold, held, campaign or repro)");
            }
        } catch (Throwable e) {
            LineProto.emitError(e);
            code = 1;
        }
        System.out.flush();
        // Curator's and ZooKeeper's threads are closed by now; exit explicitly so
        // that a stray non-daemon thread can never keep the process alive.
        System.exit(code);
    }
}
