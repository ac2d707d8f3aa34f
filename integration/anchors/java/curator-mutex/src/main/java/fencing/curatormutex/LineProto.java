// The line protocol between curator-mutex and its Rust driver, in one place
// for every mode: flags in (--name value or --name=value), one JSON object
// per line out on stdout, flushed at once, and lines in on stdin (release
// lines, commands, the campaign's answers). Logging goes to stderr only, so
// stdout carries nothing else.
package fencing.curatormutex;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

final class LineProto {
    /** The name reported in error events (and by contend and hold, set by --id). */
    static String id = "java-" + ProcessHandle.current().pid();

    private static BufferedReader stdin;

    private LineProto() {}

    // ---- output -------------------------------------------------------------

    /** One event: a JSON object of numbers, long[] lists and strings, in insertion order. */
    static void emit(Map<String, Object> fields) {
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
        writeLine(b);
    }

    /**
     * Writes one whole line (ending in a newline) to stdout and flushes it;
     * false once stdout is gone.
     */
    static synchronized boolean writeLine(CharSequence line) {
        System.out.print(line);
        System.out.flush();
        return !System.out.checkError();
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

    /** Wall-clock time in ns since the Unix epoch (Instant: µs or finer on Linux). */
    static long wallClockNanos() {
        Instant now = Instant.now();
        return Math.addExact(Math.multiplyExact(now.getEpochSecond(), 1_000_000_000L), now.getNano());
    }

    // ---- input --------------------------------------------------------------

    /** Stdin as UTF-8 lines, one reader for the whole program. */
    static synchronized BufferedReader stdin() {
        if (stdin == null) {
            stdin = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        }
        return stdin;
    }

    /** The next stdin line; a Failure "stdin closed before the <what>" at EOF. */
    static String nextLine(String what) throws Exception {
        String line = stdin().readLine();
        if (line == null) {
            throw new Failure("stdin closed before the " + what);
        }
        return line;
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
}
