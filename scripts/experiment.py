#!/usr/bin/env python3
"""The host side of scripts/experiment.sh (docs/experiment.md).

  experiment.py report OUT_JSON [--plot PNG] [--wall S] [--bench BENCH_JSON] RUN_DIR...
      Reads each kernel's run (meta.json, the guests' consoles, the emulator's event
      stream), writes OUT_JSON, prints the seed-style table and the SMC-D/TCP table,
      and renders the latency distributions into PNG (matplotlib).
  experiment.py check OUT_JSON [--need-bench]
      Exit status 1 unless the results file has every field, every SMC connection in
      it was SMC-D on both sides and every kernel's trace was on.

Client console lines (guest-tests/progs/smcexp, smcconnlat):
  EXP: START|END <phase> [rc=N]   phases connlat-smc, connlat-tcp
  CONNLAT round=R conns=N smcd=K fallback=F p50_us=...
  CONNLAT_US round=R first=I us=V,V,...
  KTIME fn=F side=S round=R n=N fails=K first=I us=V,V,...
  SUMMARY test=connlat side=S conns=N smcd=K ok|FAIL ...
"""

import argparse
import datetime
import json
import os
import platform
import re
import sys

# The seed commit's own figures (x86, SMC-R hardware; its message): averages over 4
# kept rounds of 100 connections.
SEED = {
    "source": "net/smc 1c5526968e27 commit message (x86, SMC-R, bpftrace)",
    "smc_buf_create_ns": {"without": 19040.0, "with": 1932.6},
    "create_connect_us": {"without": 143.3, "with": 102.2},
}
SCHEMA = 1


def stats(values):
    """Nearest-rank percentiles and the mean; None for no values."""
    if not values:
        return None
    s = sorted(values)
    n = len(s)

    def q(p):
        rank = max(1, min(n, int(p * n + 0.999999)))
        return s[rank - 1]

    return {"n": n, "mean": sum(s) / n, "p50": q(0.5), "p90": q(0.9), "p99": q(0.99),
            "min": s[0], "max": s[-1]}


def kv(line):
    return dict(x.split("=", 1) for x in line.split()[1:] if "=" in x)


def parse_console(path):
    """The phases of one guest's console: summaries, rounds, samples, kernel times."""
    out = {"phases": {}, "ktime": {}, "trace": None, "trace_lost": None, "passed": False}
    phase = None
    try:
        lines = open(path, errors="replace").read().replace("\r", "").split("\n")
    except FileNotFoundError:
        return out
    for line in lines:
        line = line.strip()
        if line.startswith("ISMTEST: RESULT PASS"):
            out["passed"] = True
        m = re.match(r"^EXP: (START|END) (\S+)(?: rc=(\d+))?", line)
        if m:
            if m.group(1) == "START":
                phase = m.group(2)
                out["phases"][phase] = {"rounds": {}, "samples": {}, "summary": None, "rc": None}
            else:
                out["phases"].setdefault(m.group(2), {"rounds": {}, "samples": {}, "summary": None})
                out["phases"][m.group(2)]["rc"] = int(m.group(3) or 1)
                phase = None
            continue
        if line.startswith("EXP: TRACE on"):
            out["trace"] = "on"
        elif line.startswith("EXP: TRACE off"):
            out["trace"] = line.split("reason=", 1)[-1]
        elif line.startswith("EXP: TRACE lost="):
            out["trace_lost"] = int(line.split("=", 1)[1] or 0)
        elif line.startswith("KTIME "):
            d = kv(line)
            key = (d["fn"], int(d["round"]))
            e = out["ktime"].setdefault(key, {"fails": 0, "us": []})
            e["fails"] = int(d["fails"])
            e["us"] += [float(x) for x in d["us"].split(",") if x]
        elif phase is None:
            continue
        elif line.startswith("CONNLAT "):
            d = kv(line)
            out["phases"][phase]["rounds"][int(d["round"])] = {
                "conns": int(d["conns"]), "smcd": int(d["smcd"]), "fallback": int(d["fallback"])}
        elif line.startswith("CONNLAT_US "):
            d = kv(line)
            out["phases"][phase]["samples"].setdefault(int(d["round"]), []).extend(
                float(x) for x in d["us"].split(",") if x)
        elif line.startswith("SUMMARY test=connlat"):
            d = kv(line)
            out["phases"][phase]["summary"] = {
                "side": d.get("side"), "conns": int(d.get("conns", 0)), "smcd": int(d.get("smcd", 0)),
                "ok": line.rstrip().endswith(" ok"), "first_error": line.split("first_error=", 1)[1]
                if "first_error=" in line else None}
    return out


def parse_events(path):
    """The host's view of the run: per DMB, registration, connections, zeroing, reuse."""
    dmbs, zero, not_zero, reg_to_first, lens = {}, [], 0, [], []
    closed = opened = reused = clean = stale = unchecked = 0
    try:
        f = open(path)
    except FileNotFoundError:
        return None
    for line in f:
        try:
            e = json.loads(line)
        except ValueError:
            continue
        key = (e.get("function"), e.get("token"))
        k = e.get("kind")
        if k == "dmb_registered":
            dmbs[key] = {"registered_us": e["time_us"], "first": None}
            lens.append(e["len"])
        elif k == "conn_opened":
            opened += 1
            d = dmbs.get(key)
            # A fresh DMB's hand-out is its REG_DMB; a pooled DMB is handed out again
            # without a command, so the device cannot see that moment.
            if d is not None and d["first"] is None and e.get("conn") == 1:
                d["first"] = e["time_us"]
                reg_to_first.append((e["time_us"] - d["registered_us"]) / 1000.0)
        elif k == "conn_closed":
            closed += 1
        elif k == "dmb_zeroed":
            zero.append(float(e["delay_ms"]))
        elif k == "dmb_not_zeroed":
            not_zero += 1
        elif k == "dmb_reused":
            reused += 1
            if e.get("clean") is True:
                clean += 1
            elif e.get("clean") is False:
                stale += 1
            else:
                unchecked += 1
    return {
        "dmbs_registered": len(lens), "dmb_len": sorted(set(lens)), "conns_opened": opened,
        "conns_closed": closed, "zeroed": len(zero), "not_zeroed": not_zero,
        "zero_delay_ms": stats(zero), "reused": reused, "reused_clean": clean,
        "reused_stale": stale, "reused_unchecked": unchecked,
        "registered_to_first_move_ms": stats(reg_to_first),
    }


def zeroing_point(kernel, variant):
    """Where the kernel zeroes a pooled buffer: at release since v5.17 (the seed commit),
    at hand-out (smc_buf_create) before it, and in the prezero variant."""
    if variant == "prezero":
        return "hand-out"
    if variant == "nozero":
        return "never"
    major, minor = (int(x) for x in kernel.split(".")[:2])
    return "hand-out" if (major, minor) < (5, 17) else "release"


def kernel_result(run_dir):
    meta = json.load(open(os.path.join(run_dir, "meta.json")))
    name = meta["kernel"] + ("" if meta["variant"] == "stock" else "-" + meta["variant"])
    client = parse_console(os.path.join(run_dir, "b.console.log"))
    server = parse_console(os.path.join(run_dir, "a.console.log"))
    smc, tcp = client["phases"].get("connlat-smc", {}), client["phases"].get("connlat-tcp", {})
    ssmc = server["phases"].get("connlat-smc", {})
    rounds = sorted(smc.get("samples", {}))
    kept = [v for r in rounds if r > 1 for v in smc["samples"][r]]
    k = {
        "name": name, "kernel": meta["kernel"], "variant": meta["variant"],
        "zeroing": zeroing_point(meta["kernel"], meta["variant"]),
        "passed": client["passed"] and server["passed"],
        "connlat_us": {
            "rounds": [dict(round=r, **stats(smc["samples"][r]), **smc["rounds"].get(r, {}))
                       for r in rounds],
            "kept": stats(kept), "samples": kept,
        },
        "connlat_tcp_us": stats([v for s in tcp.get("samples", {}).values() for v in s]),
        "conns": {
            "client": smc.get("summary"), "server": ssmc.get("summary"),
            "tcp_client": tcp.get("summary"),
        },
        "trace": {"client": client["trace"], "server": server["trace"],
                  "lost": (client["trace_lost"] or 0) + (server["trace_lost"] or 0)},
        "host": parse_events(os.path.join(run_dir, "events.jsonl")),
    }
    for fn in ("smc_buf_create", "smc_conn_free"):
        e = {}
        for side, c in (("client", client), ("server", server)):
            vals = [v for (f, r), x in c["ktime"].items() if f == fn and r > 1 for v in x["us"]]
            fails = sum(x["fails"] for (f, r), x in c["ktime"].items() if f == fn)
            e[side] = dict(stats(vals) or {"n": 0}, fails=fails)
            if side == "client":
                e["samples"] = vals
        k[fn + "_us"] = e
    return k


def bench_summary(path):
    if not path or not os.path.exists(path):
        return None
    b = json.load(open(path))
    run = next((r for r in b["runs"] if r["mode"] == "waited"), b["runs"][-1])
    p = run["phases"]

    def get(phase, key):
        return p.get(phase, {}).get(key)

    def ratio(a, c):
        return None if a is None or c in (None, 0) else a / c

    out = {"mode": run["mode"], "bytes": run["bytes"], "repeat": run["repeat"],
           "rounds": run["rounds"], "smp": run["smp"],
           "stream_mb_per_s": {"smcd": get("stream-smc", "mb_per_s"), "tcp": get("stream-tcp", "mb_per_s")},
           "stream_modes": get("stream-smc", "modes"),
           "echo1_us": {}, "echo1k_us": {}}
    out["stream_mb_per_s"]["ratio"] = ratio(out["stream_mb_per_s"]["smcd"], out["stream_mb_per_s"]["tcp"])
    for t in ("echo1", "echo1k"):
        for q in ("p50_us", "p99_us"):
            s, c = get(t + "-smc", q), get(t + "-tcp", q)
            out[t + "_us"][q] = {"smcd": s, "tcp": c, "ratio": ratio(s, c)}
        out[t + "_us"]["modes"] = get(t + "-smc", "modes")
    dev = p.get("stream-smc", {}).get("device", {})
    out["device"] = {k: dev.get(k) for k in ("moves", "bytes", "signals", "held", "service_p50_us",
                                              "service_p99_us", "service_mean_us", "busy_share",
                                              "wall_us_per_move", "wall_secs")}
    return out


def machine():
    model = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "host_kernel": platform.release(),
            "accel": "TCG (QEMU s390x on x86-64)"}


def f(v, spec=".0f"):
    return "-" if v is None else format(v, spec)


def table(res):
    ks = res["kernels"]
    with_k = next((k for k in ks if k["zeroing"] == "release"), ks[0])
    wo = [k for k in ks if k is not with_k]
    first_wo = next((k for k in wo if k["zeroing"] == "hand-out"), wo[0] if wo else None)
    rows = []

    def row(label, get, seed=None, spec=".0f"):
        a = get(first_wo) if first_wo else None
        b = get(with_k)
        extra = [f(get(k), spec) for k in wo if k is not first_wo]
        ratio = None if a in (None, 0) or b is None else b / a
        sw, sh = (seed or (None, None))
        rows.append([label, f(a, spec)] + extra + [f(b, spec), f(ratio * 100 if ratio is not None else None, ".1f") + ("%" if ratio is not None else ""),
                     f(sw, spec), f(sh, spec),
                     (f(sh / sw * 100, ".1f") + "%") if sw else "-"])

    def kt(fn, side, q):
        return lambda k: (k[fn + "_us"].get(side) or {}).get(q)

    def cl(q):
        return lambda k: (k["connlat_us"]["kept"] or {}).get(q)

    seed_b = (SEED["smc_buf_create_ns"]["without"] / 1000, SEED["smc_buf_create_ns"]["with"] / 1000)
    seed_c = (SEED["create_connect_us"]["without"], SEED["create_connect_us"]["with"])
    row("smc_buf_create() mean, client (us)", kt("smc_buf_create", "client", "mean"), seed_b, ".1f")
    row("smc_buf_create() p50 / p99, client", kt("smc_buf_create", "client", "p50"))
    row("  ... p99", kt("smc_buf_create", "client", "p99"))
    row("smc_buf_create() mean, server (us)", kt("smc_buf_create", "server", "mean"), spec=".1f")
    row("socket create + connect mean (us)", cl("mean"), seed_c, ".1f")
    row("socket create + connect p50", cl("p50"))
    row("  ... p90", cl("p90"))
    row("  ... p99", cl("p99"))
    row("smc_conn_free() mean, client (us)", kt("smc_conn_free", "client", "mean"), spec=".1f")
    row("smc_conn_free() mean, server (us)", kt("smc_conn_free", "server", "mean"), spec=".1f")
    row("close -> DMB zeroed, host, p50 (ms)", lambda k: ((k["host"] or {}).get("zero_delay_ms") or {}).get("p50"), spec=".1f")
    row("DMB registered -> first move, p50 (ms)", lambda k: ((k["host"] or {}).get("registered_to_first_move_ms") or {}).get("p50"), spec=".1f")
    head = ["metric", "w/o: " + (first_wo["name"] if first_wo else "-")] + \
        ["w/o: " + k["name"] for k in wo if k is not first_wo] + \
        ["w/: " + with_k["name"], "ratio", "seed w/o", "seed w/", "seed ratio"]
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    lines = ["  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in [head] + rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def bench_table(b):
    if not b:
        return "(SMC-D vs TCP: not run, EXP_BENCH=0)"
    s = b["stream_mb_per_s"]
    lines = [f"SMC-D vs TCP, same two guests, {b.get('mode', 'waited')} moves (TCG: the ratio is the result):",
             f"  stream {b['bytes']}, checked, median of {b['repeat']}: SMC-D {f(s['smcd'], '.1f')} MB/s, "
             f"TCP {f(s['tcp'], '.1f')} MB/s, ratio {f(s['ratio'], '.2f')}x"]
    for t, label in (("echo1", "1 B"), ("echo1k", "1 KiB")):
        for q in ("p50_us", "p99_us"):
            e = b[t + "_us"][q]
            lines.append(f"  {label} request/response {q[:3]}: SMC-D {f(e['smcd'], '.0f')} us, "
                         f"TCP {f(e['tcp'], '.0f')} us, ratio {f(e['ratio'], '.2f')}x")
    d = b["device"]
    lines.append(f"  device, stream: {d['moves']} moves, service p50 {f(d['service_p50_us'], '.2f')} us, "
                 f"p99 {f(d['service_p99_us'], '.1f')} us, mean {f(d['service_mean_us'], '.2f')} us; "
                 f"busy {f((d['busy_share'] or 0) * 100, '.1f')} % of the stream's wall time, "
                 f"{f(d['wall_us_per_move'], '.1f')} us wall per move")
    return "\n".join(lines)


def plot(res, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = res["kernels"]
    # Where the zeroing went: out of smc_buf_create() (hand-out) into smc_conn_free()
    # (release); the connection's set-up time is what an application sees.
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    for ax, key, title in ((axes[0], "connlat", "socket create + connect (client)"),
                           (axes[1], "smc_buf_create", "smc_buf_create() (client, kprobe)"),
                           (axes[2], "smc_conn_free", "smc_conn_free() (client, kprobe)")):
        for k in ks:
            vals = k["connlat_us"]["samples"] if key == "connlat" else k[key + "_us"]["samples"]
            if not vals:
                continue
            s = sorted(vals)
            ys = [(i + 1) / len(s) for i in range(len(s))]
            ax.step(s, ys, where="post", label=f"{k['name']} (zeroes at {k['zeroing']}, n={len(s)})")
        ax.set_xscale("log")
        ax.set_xlabel("microseconds (log scale)")
        ax.set_ylabel("fraction of connections")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"ism-emu experiment, {res['date']}, {res['machine']['cores']}-core {res['machine']['cpu']}, "
                 f"QEMU TCG; rounds 2-{res['method']['rounds']} of {res['method']['conns']} connections "
                 f"(the first left out, as the seed did)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(args):
    res = {
        "schema": SCHEMA,
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "wall_s": args.wall,
        "seed": SEED,
        "method": {},
        "kernels": [],
    }
    for d in args.runs:
        res["kernels"].append(kernel_result(d))
        meta = json.load(open(os.path.join(d, "meta.json")))
        res["method"] = {"conns": meta["conns"], "rounds": meta["rounds"], "discarded_rounds": 1,
                         "sndbuf": 16384, "rcvbuf": 131072, "smp": meta["smp"]}
    res["smcd_vs_tcp"] = bench_summary(args.bench)
    with open(args.out, "w") as fh:
        json.dump(res, fh, indent=1)
    print(table(res))
    print()
    print(bench_table(res["smcd_vs_tcp"]))
    if args.plot:
        try:
            plot(res, args.plot)
            print(f"plot: {args.plot}")
        except ImportError as e:
            print(f"no plot: {e} (python3-matplotlib)", file=sys.stderr)
            return 1
    return 0


def check(args):
    """Every field, and every SMC connection SMC-D on both sides; the messages say what."""
    res = json.load(open(args.results))
    bad = []

    def need(obj, path):
        cur = obj
        for p in path.split("."):
            if not isinstance(cur, dict) or p not in cur or cur[p] is None:
                bad.append(f"missing {path}")
                return None
            cur = cur[p]
        return cur

    for p in ("schema", "date", "machine.cpu", "machine.cores", "method.conns", "method.rounds",
              "seed.smc_buf_create_ns", "seed.create_connect_us", "kernels"):
        need(res, p)
    if not res.get("kernels"):
        bad.append("no kernels")
    zeroings = set()
    for k in res.get("kernels", []):
        n = k.get("name", "?")
        zeroings.add(k.get("zeroing"))
        if not k.get("passed"):
            bad.append(f"{n}: a guest did not pass")
        for p in ("connlat_us.kept.p50", "connlat_us.kept.p99", "connlat_us.kept.mean",
                  "connlat_tcp_us.p50", "smc_buf_create_us.client.mean", "smc_buf_create_us.server.mean",
                  "smc_buf_create_us.client.p99", "smc_conn_free_us.client.mean",
                  "smc_conn_free_us.server.mean", "host.zero_delay_ms", "host.dmbs_registered",
                  "host.registered_to_first_move_ms.p50"):
            need(k, p)
        want = res["method"]["conns"] * res["method"]["rounds"]
        for side in ("client", "server"):
            s = (k.get("conns") or {}).get(side) or {}
            if not s.get("ok") or s.get("conns") != want or s.get("smcd") != want:
                bad.append(f"{n}: {side}: {s.get('smcd')}/{want} connections SMC-D "
                           f"(conns {s.get('conns')}, ok {s.get('ok')}, {s.get('first_error')})")
        for side in ("client", "server"):
            if (k.get("trace") or {}).get(side) != "on":
                bad.append(f"{n}: kernel trace on the {side}: {(k.get('trace') or {}).get(side)}")
        if (k.get("trace") or {}).get("lost"):
            bad.append(f"{n}: {k['trace']['lost']} trace events lost")
        kept = (k.get("connlat_us") or {}).get("kept") or {}
        if kept.get("n") != res["method"]["conns"] * (res["method"]["rounds"] - 1):
            bad.append(f"{n}: {kept.get('n')} kept samples")
        for side in ("client", "server"):
            fails = ((k.get("smc_buf_create_us") or {}).get(side) or {}).get("fails")
            if fails:
                bad.append(f"{n}: smc_buf_create failed {fails} times on the {side}")
    if len(zeroings & {"release", "hand-out"}) < 2 and len(res.get("kernels", [])) > 1:
        bad.append(f"kernels compared do not differ in where they zero: {sorted(zeroings)}")
    if args.need_bench:
        b = res.get("smcd_vs_tcp")
        if not b:
            bad.append("missing smcd_vs_tcp")
        else:
            for p in ("stream_mb_per_s.smcd", "stream_mb_per_s.tcp", "stream_mb_per_s.ratio",
                      "echo1_us.p50_us.smcd", "echo1_us.p99_us.tcp", "echo1k_us.p50_us.ratio",
                      "device.moves", "device.service_p50_us", "device.service_p99_us", "device.busy_share"):
                need(b, p)
            for t in ("stream_modes",):
                if b.get(t) != ["SMCD"] * len(b.get(t) or [1]) or not b.get(t):
                    bad.append(f"smcd_vs_tcp: {t} {b.get(t)}, not all SMCD")
            for t in ("echo1_us", "echo1k_us"):
                m = (b.get(t) or {}).get("modes")
                if not m or any(x != "SMCD" for x in m):
                    bad.append(f"smcd_vs_tcp: {t} modes {m}, not all SMCD")
    for b in bad:
        print(f"experiment results: {b}", file=sys.stderr)
    if not bad:
        print(f"experiment results: {args.results}: every field present, "
              f"{len(res['kernels'])} kernel(s), every SMC connection SMC-D on both sides")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("report")
    r.add_argument("out")
    r.add_argument("runs", nargs="+")
    r.add_argument("--plot")
    r.add_argument("--wall", type=int)
    r.add_argument("--bench")
    c = sub.add_parser("check")
    c.add_argument("results")
    c.add_argument("--need-bench", action="store_true")
    args = ap.parse_args()
    return report(args) if args.cmd == "report" else check(args)


if __name__ == "__main__":
    sys.exit(main())
