#!/usr/bin/env python3
"""The host side of scripts/bench-guests.sh.

  bench_guests.py watch EMU_BIN CONTROL CONSOLE OUT_JSON
      Follows the client guest's console; at every "BENCH: START/END <phase>" line takes
      a snapshot of the emulator's counters (moves, bytes, signals, the service-time
      histogram of every function) and, when the guest is done (its QEMU gone, i.e. the
      console stops growing and the file CONSOLE.done exists), writes the phases with
      their counter deltas to OUT_JSON.
  bench_guests.py report RESULTS_JSON RUN_DIR...
      Reads each run's phases.json and client console, prints the table and writes
      RESULTS_JSON.

The device's figures are its own: "service" is the time from the move reaching the
device model to its completion (lookup, copy, SBA bits, interrupt), per move; "busy" is
the sum of those over the phase's wall time.
"""

import json
import os
import re
import subprocess
import sys
import time


def snapshot(emu, control):
    for _ in range(5):
        try:
            out = subprocess.run([emu, "observe", "--control", control, "json"],
                                 capture_output=True, timeout=10, check=True).stdout
            return json.loads(out)
        except (subprocess.SubprocessError, ValueError):
            time.sleep(0.1)
    return None


def totals(snap):
    """Sum of the counters over the functions; the histogram as {lower_ns: count}."""
    t = {"moves": 0, "bytes": 0, "signals": 0, "held": 0, "service_ns": 0, "hist": {}}
    for f in snap["functions"]:
        c = f["counters"]
        t["moves"] += c["moves_out"] + c["moves_rejected"]
        t["bytes"] += c["bytes_out"]
        t["signals"] += c["signals_in"]
        t["held"] += c.get("moves_held", 0)
        ms = c.get("move_service", {"sum_ns": 0, "buckets": []})
        t["service_ns"] += ms["sum_ns"]
        for lower, n in ms["buckets"]:
            t["hist"][lower] = t["hist"].get(lower, 0) + n
    return t


def delta(a, b):
    d = {k: b[k] - a[k] for k in ("moves", "bytes", "signals", "held", "service_ns")}
    d["hist"] = {k: n - a["hist"].get(k, 0) for k, n in b["hist"].items() if n - a["hist"].get(k, 0)}
    return d


def quantile_us(hist, q):
    """Nearest-rank quantile from {lower_ns: count}: the bucket's lower bound (the
    histogram has 8 buckets per power of two, so within 12.5 %)."""
    n = sum(hist.values())
    if not n:
        return None
    rank = max(1, int(q * n + 0.999999))
    seen = 0
    for lower in sorted(hist, key=int):
        seen += hist[lower]
        if seen >= rank:
            return int(lower) / 1000.0
    return None


def watch(emu, control, console, out):
    phases, open_ = [], {}
    pos, buf = 0, ""
    mark = re.compile(r"^BENCH: (START|END) (\S+)")
    while True:
        done = os.path.exists(console + ".done")
        try:
            with open(console, "rb") as f:
                f.seek(pos)
                chunk = f.read()
                pos += len(chunk)
        except FileNotFoundError:
            chunk = b""
        buf += chunk.decode("utf-8", "replace")
        *lines, buf = buf.split("\n")
        for line in lines:
            m = mark.match(line.strip())
            if not m:
                continue
            snap = snapshot(emu, control)
            if snap is None:
                continue
            now = time.monotonic()
            kind, phase = m.groups()
            if kind == "START":
                open_[phase] = (now, totals(snap))
            elif phase in open_:
                t0, before = open_.pop(phase)
                d = delta(before, totals(snap))
                d["phase"] = phase
                d["host_secs"] = now - t0
                phases.append(d)
        if done and not chunk:
            break
        time.sleep(0.05)
    with open(out, "w") as f:
        json.dump(phases, f, indent=1)


def console_results(console):
    """Per phase: the client's CONN (bytes, secs, mode) and LAT lines."""
    res, phase = {}, None
    with open(console, errors="replace") as f:
        for line in f:
            line = line.strip()
            m = re.match(r"^BENCH: START (\S+)", line)
            if m:
                phase = m.group(1)
                res[phase] = {}
                continue
            if phase is None:
                continue
            if line.startswith("BENCH: END"):
                res[phase]["rc"] = int(re.search(r"rc=(\d+)", line).group(1))
                phase = None
            elif line.startswith("CONN ") and "side=client" in line:
                kv = dict(x.split("=", 1) for x in line.split()[1:] if "=" in x)
                res[phase].update(mode=kv.get("mode"), bytes=int(kv["bytes"]),
                                  secs=float(kv["secs"]), verify=kv.get("verify"))
            elif line.startswith("LAT "):
                kv = dict(x.split("=", 1) for x in line.split()[1:] if "=" in x)
                res[phase].update({k: float(v) for k, v in kv.items() if k.endswith("_us")})
    return res


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def merge_device(phases):
    """The device's figures over one or more phases (repeats of one run)."""
    moves = sum(p["moves"] for p in phases)
    wall = sum(p["host_secs"] for p in phases)
    service = sum(p["service_ns"] for p in phases)
    hist = {}
    for p in phases:
        for k, n in p["hist"].items():
            hist[k] = hist.get(k, 0) + n
    return {
        "moves": moves, "bytes": sum(p["bytes"] for p in phases),
        "signals": sum(p["signals"] for p in phases), "held": sum(p["held"] for p in phases),
        "service_p50_us": quantile_us(hist, 0.5), "service_p99_us": quantile_us(hist, 0.99),
        "service_mean_us": service / moves / 1000 if moves else None,
        "busy_share": service / 1e9 / wall if wall else None,
        "wall_us_per_move": wall * 1e6 / moves if moves else None,
        "wall_secs": wall,
    }


def median(values):
    v = sorted(values)
    n = len(v)
    return None if not n else v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def report(out, run_dirs):
    runs = []
    for d in run_dirs:
        meta = json.load(open(os.path.join(d, "meta.json")))
        phases = {p["phase"]: p for p in json.load(open(os.path.join(d, "phases.json")))}
        guest = console_results(os.path.join(d, "b.console.log"))
        # Repeats (stream-smc.1, .2, ...) become one row: the median throughput, the
        # device's figures over all of them.
        groups = {}
        for name in guest:
            groups.setdefault(name.split(".")[0], []).append(name)
        rows = {}
        for base, names in groups.items():
            runs_ = [guest[n] for n in names]
            row = {"rc": max(g.get("rc", 1) for g in runs_),
                   "modes": sorted({g.get("mode") or "?" for g in runs_}),
                   "repeats": len(names)}
            rates = [g["bytes"] / g["secs"] / 1e6 for g in runs_ if g.get("bytes") and g.get("secs")]
            if rates:
                row["mb_per_s"] = median(rates)
                row["mb_per_s_all"] = rates
            for k in ("p50_us", "p90_us", "p99_us", "mean_us", "max_us"):
                vals = [g[k] for g in runs_ if k in g]
                if vals:
                    row[k] = median(vals)
            mine = [phases[n] for n in names if n in phases]
            if mine:
                row["device"] = merge_device(mine)
            rows[base] = row
        runs.append({**meta, "phases": rows})

    print()
    print("SMC-D (AF_SMC over the emulated ISM) vs TCP (virtio-net), the same two TCG guests")
    print(f"{'mode':<8} {'phase':<11} {'MB/s':>7} {'(range)':>13} {'p50 us':>8} {'p99 us':>8}"
          f" {'moves':>7} {'svc p50':>8} {'svc p99':>8} {'busy':>6} {'us/move':>8}")
    for r in runs:
        for name, row in r["phases"].items():
            dev = row.get("device", {}) if name.endswith("-smc") else {}
            rates = row.get("mb_per_s_all")
            span = f"{min(rates):.1f}-{max(rates):.1f}" if rates and len(rates) > 1 else "-"
            print(f"{r['mode']:<8} {name:<11} {fmt(row.get('mb_per_s'), '7.2f')} {span:>13}"
                  f" {fmt(row.get('p50_us'), '8.1f')} {fmt(row.get('p99_us'), '8.1f')}"
                  f" {fmt(dev.get('moves'), '7d')} {fmt(dev.get('service_p50_us'), '8.2f')}"
                  f" {fmt(dev.get('service_p99_us'), '8.2f')}"
                  f" {fmt(dev.get('busy_share') and dev['busy_share'] * 100, '5.1f')}%"
                  f" {fmt(dev.get('wall_us_per_move'), '8.1f')}")
    print()
    print(f"{'mode':<8} {'stream SMC-D/TCP':>17} {'echo1 p50 SMC-D/TCP':>20} {'echo1k p50 SMC-D/TCP':>21}")
    for r in runs:
        p = r["phases"]

        def ratio(a, b, key):
            x, y = p.get(a, {}).get(key), p.get(b, {}).get(key)
            return x / y if x and y else None
        r["ratios"] = {
            "stream_smc_over_tcp": ratio("stream-smc", "stream-tcp", "mb_per_s"),
            "echo1_p50_smc_over_tcp": ratio("echo1-smc", "echo1-tcp", "p50_us"),
            "echo1k_p50_smc_over_tcp": ratio("echo1k-smc", "echo1k-tcp", "p50_us"),
        }
        q = r["ratios"]

        def rx(v, width):
            return f"{v:.2f}x".rjust(width) if v is not None else "-".rjust(width)
        print(f"{r['mode']:<8} {rx(q['stream_smc_over_tcp'], 17)}"
              f" {rx(q['echo1_p50_smc_over_tcp'], 20)} {rx(q['echo1k_p50_smc_over_tcp'], 21)}")
    print()
    print("MB/s: the median of the stream repeats (range: all of them), one way, every byte"
          " checked, checksummed; p50/p99: request/response round trip at the client;"
          " moves: the device's moves in the phase; svc p50/p99: the device's service time"
          " per move (us); busy: service time / phase wall time; us/move: wall time / moves.")
    print("Both transports run under TCG: the ratios are the result, not the absolute numbers.")
    with open(out, "w") as f:
        json.dump({"runs": runs}, f, indent=1)
    # A failed TCP reference run (seen once: a 1 KiB echo over virtio-net stalled until
    # the I/O timeout) leaves its ratio empty; it is not the emulator's path.
    tcp_bad = [f"{r['mode']}/{n}" for r in runs for n, row in r["phases"].items()
               if n.endswith("-tcp") and row.get("rc") != 0]
    if tcp_bad:
        print(f"warning: TCP reference run(s) failed, their ratios are missing: {' '.join(tcp_bad)}"
              " (see the guests' consoles)", file=sys.stderr)
    bad = [f"{r['mode']}/{n}" for r in runs for n, row in r["phases"].items()
           if n.endswith("-smc") and (row.get("rc") != 0 or row.get("modes") != ["SMCD"])]
    bad += [f"{r['mode']}/{n} (missing)" for r in runs
            for n in ("stream-smc", "echo1-smc", "echo1k-smc") if n not in r["phases"]]
    if bad:
        print(f"FAILED or not SMC-D: {' '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "watch":
        watch(*sys.argv[2:])
    elif len(sys.argv) >= 4 and sys.argv[1] == "report":
        sys.exit(report(sys.argv[2], sys.argv[3:]))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
