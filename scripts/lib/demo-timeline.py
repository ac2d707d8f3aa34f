#!/usr/bin/env python3
"""Draws the paused-client timeline of one `fence demo` run as an SVG.

    fence demo | python3 scripts/lib/demo-timeline.py > docs/images/demo-timeline.svg

It reads the demo's own timeline lines (`t=1.23s  ...`) of its gated run
and places each event at its measured time: the two clients' leases, the
time C1 spent frozen, and every write the storage saw with its verdict.
"""
import html
import re
import sys

LINE = re.compile(r"^t=(\d+\.\d+)s\s+(.*)$")


def gated_events(text):
    section = text.split("--- gate ON", 1)
    if len(section) != 2:
        raise SystemExit("no '--- gate ON' section: is this `fence demo` output?")
    return [(float(m[1]), m[2]) for m in map(LINE.match, section[1].splitlines()) if m]


def first(events, pattern):
    for t, what in events:
        if re.search(pattern, what):
            return t, what
    raise SystemExit(f"no event matching {pattern!r} in the demo's output")


def main():
    events = gated_events(sys.stdin.read())
    c1_acquired, c1_line = first(events, r"^C1 \(pid \d+\) acquires")
    frozen, _ = first(events, r"^SIGSTOP")
    expired, _ = first(events, r"lease has run out|still shows")
    c2_acquired, c2_line = first(events, r"^C2 \(pid \d+\) acquires")
    c2_released, _ = first(events, r"^C2 releases")
    resumed, _ = first(events, r"^SIGCONT")
    writes = [(t, w) for t, w in events if re.match(r"^C[12] writes", w)]
    t1 = re.search(r"token (\d+)", c1_line)[1]
    t2 = re.search(r"token (\d+)", c2_line)[1]
    end = max(t for t, _ in events) * 1.05

    width, left, lane_h = 880, 110, 70
    x = lambda t: left + (width - left - 20) * t / end
    lanes = {"C1": 40, "C2": 40 + lane_h, "storage": 40 + 2 * lane_h}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{40 + 3 * lane_h + 15 * len(writes) + 40}" '
           'font-family="sans-serif" font-size="12">',
           '<rect width="100%" height="100%" fill="white"/>']

    def text(at, y, label, colour="black"):
        # Right of the point, or left of it near the right edge.
        anchor = "start" if at < 0.6 * width else "end"
        at = at if anchor == "start" else at - 12
        return (f'<text x="{at:.1f}" y="{y}" fill="{colour}" text-anchor="{anchor}">'
                f'{html.escape(label)}</text>')

    def bar(lane, a, b, colour, label, below=0):
        y = lanes[lane] - 9 + below
        out.append(f'<rect x="{x(a):.1f}" y="{y}" width="{max(x(b) - x(a), 2):.1f}" height="18" '
                   f'fill="{colour}" opacity="0.75"/>')
        out.append(text(x(a) + 4, y + 13, label))

    for name, y in lanes.items():
        out.append(f'<text x="10" y="{y + 4}" font-weight="bold">{name}</text>')
        out.append(f'<line x1="{left}" y1="{y}" x2="{width - 20}" y2="{y}" stroke="#bbb"/>')
    bar("C1", c1_acquired, expired, "#9c9", f"lease, token {t1}")
    bar("C1", frozen, resumed, "#ccc", "frozen (SIGSTOP): believes it holds the lease", below=22)
    bar("C2", c2_acquired, c2_released, "#9bd", f"lease, token {t2}")
    for i, (t, what) in enumerate(writes):
        m = re.match(r"^(C[12]) writes value=(\S+) with token (\d+) -> (\w+)", what)
        writer, value, token, verdict = m.groups()
        colour = "#2a2" if verdict == "accepted" else "#c22"
        x0, y0, y1 = x(t), lanes[writer], lanes["storage"]
        out.append(f'<line x1="{x0:.1f}" y1="{y0}" x2="{x0:.1f}" y2="{y1 - 6}" stroke="{colour}" '
                   'stroke-width="2"/>')
        out.append(f'<circle cx="{x0:.1f}" cy="{y1}" r="5" fill="{colour}"/>')
        # Labels on rows of their own: writes can be milliseconds apart.
        out.append(text(x0 + 6, y1 + 20 + 15 * i, f"{writer} value={value} token {token}: {verdict}", colour))
    axis = 40 + 3 * lane_h + 15 * len(writes)
    out.append(f'<line x1="{left}" y1="{axis}" x2="{width - 20}" y2="{axis}" stroke="black"/>')
    step = 0.5 if end < 6 else 1.0
    t = 0.0
    while t <= end:
        out.append(f'<line x1="{x(t):.1f}" y1="{axis}" x2="{x(t):.1f}" y2="{axis + 5}" stroke="black"/>')
        out.append(f'<text x="{x(t):.1f}" y="{axis + 18}" text-anchor="middle">{t:g} s</text>')
        t += step
    out.append("</svg>")
    print("\n".join(out))


if __name__ == "__main__":
    main()
