#!/usr/bin/env python3
"""A still picture of a timeline that `ism-emu observe timeline` exported (trace-event
JSON), for the docs and CI artefacts: one row per DMB with its registered lifetime and a
bar per connection, markers for zeroing, reuse verdicts and faults, and below it the
derived data rate into each function's DMBs (docs/observer.md, "Timeline").

Usage: timeline.py TRACE.json --out FILE.png [--out FILE.svg] [--title TEXT]
Runs under Debian's python3 with python3-matplotlib (need_packages timeline)."""

import argparse
import json
import sys
from collections import defaultdict

# What each instant looks like: marker, colour, legend label, and its place in the row
# (reuse verdicts above the bars, zeroing below: a reuse and the zeroing before it are
# often milliseconds apart). Names are the exporter's.
MARKERS = {
    "zeroed": ("v", "tab:green", "zeroed after close", 0.3),
    "not zeroed": ("^", "tab:orange", "not zeroed (watch gave up)", 0.3),
    "reuse clean": ("o", "tab:blue", "reuse: clean", -0.3),
    "reuse STALE": ("X", "tab:red", "reuse: STALE", -0.3),
    "reuse unchecked": ("s", "tab:gray", "reuse: unchecked", -0.3),
    "fault injected": ("*", "black", "fault injected", 0.0),
    "late write": ("d", "tab:olive", "late write (closed connection's peer)", 0.3),
    "late write after zeroing": ("d", "tab:red", "late write after zeroing", 0.3),
    "FOREIGN CDC": ("P", "tab:red", "FOREIGN CDC (another connection's)", -0.3),
}
CONN_COLOURS = {"close": "tab:cyan", "abort": "tab:purple"}


def load(path):
    with open(path) as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ValueError(f"{path}: not a trace-event document (no traceEvents list)")
    return doc


def layout(doc):
    """Rows (one per DMB track, in process and track order), their slices and instants,
    and the counter samples per process."""
    names = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "M" and e["name"] in ("process_name", "thread_name"):
            names[(e["name"], e["pid"], e["tid"] if e["name"] == "thread_name" else 0)] = e["args"]["name"]
    slices, instants, counters = defaultdict(list), defaultdict(list), defaultdict(list)
    for e in doc["traceEvents"]:
        key = (e["pid"], e["tid"])
        if e["ph"] == "X" and e["tid"] != 0:
            slices[key].append(e)
        elif e["ph"] == "i" and e["name"] in MARKERS:
            instants[key].append(e)
        elif e["ph"] == "C" and e["name"] == "data into DMBs":
            counters[e["pid"]].append((e["ts"], e["args"]["MB/s"]))
    rows = sorted(k for k in set(slices) | set(instants) if k[1] != 0)
    labels = []
    for pid, tid in rows:
        process = names.get(("process_name", pid, 0), f"pid {pid}").split(" ")[0]
        labels.append(f"{process} {names.get(('thread_name', pid, tid), f'track {tid}')}")
    process_names = {pid: names.get(("process_name", pid, 0), f"pid {pid}") for pid in counters}
    return rows, labels, slices, instants, counters, process_names


def render(doc, outs, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    rows, labels, slices, instants, counters, process_names = layout(doc)
    s = 1e-6  # trace-event times are microseconds; the axes show seconds
    height = min(2.5 + 0.32 * max(len(rows), 1), 30)
    fig, (ax, rate) = plt.subplots(2, 1, sharex=True, figsize=(11, height + 2),
                                   gridspec_kw={"height_ratios": [height, 2]})
    seen = set()
    for y, key in enumerate(rows):
        for e in slices.get(key, []):
            if e["name"] == "registered":
                ax.barh(y, e["dur"] * s, left=e["ts"] * s, height=0.8, color="0.88", edgecolor="0.6", lw=0.5)
            else:
                colour = CONN_COLOURS.get(e.get("args", {}).get("how"), "tab:olive")
                ax.barh(y, max(e["dur"] * s, 0.002), left=e["ts"] * s, height=0.45, color=colour)
        for e in instants.get(key, []):
            marker, colour, _, dy = MARKERS[e["name"]]
            ax.plot(e["ts"] * s, y + dy, marker=marker, color=colour, ms=6, ls="none")
            seen.add(e["name"])
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.set_ylim(len(rows) - 0.4, -0.6)
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    legend = [Patch(color="0.88", label="DMB registered"),
              Patch(color=CONN_COLOURS["close"], label="connection (closed)"),
              Patch(color=CONN_COLOURS["abort"], label="connection (aborted)")]
    legend += [Line2D([], [], marker=MARKERS[n][0], color=MARKERS[n][1], ls="none", label=MARKERS[n][2])
               for n in MARKERS if n in seen]
    ax.legend(handles=legend, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    for pid, samples in sorted(counters.items()):
        ts, values = zip(*sorted(samples))
        rate.step([t * s for t in ts], values, where="post", label=process_names[pid])
    rate.set_ylabel("MB/s into DMBs\n(connection means)", fontsize=8)
    rate.set_xlabel("seconds since the first event")
    rate.grid(alpha=0.3)
    if counters:
        rate.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    for out in outs:
        fig.savefig(out, dpi=110)
    plt.close(fig)
    return len(rows)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", help="trace-event JSON from `ism-emu observe timeline`")
    p.add_argument("--out", action="append", required=True, help="PNG or SVG to write (repeatable)")
    p.add_argument("--title", default="DMB lifecycles seen by ism-emu")
    args = p.parse_args(argv)
    try:
        doc = load(args.trace)
    except (OSError, ValueError) as e:
        print(f"timeline.py: {e}", file=sys.stderr)
        return 1
    rows = render(doc, args.out, args.title)
    print(f"timeline: {rows} DMB rows -> {', '.join(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
