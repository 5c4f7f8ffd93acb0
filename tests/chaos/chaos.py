#!/usr/bin/env python3
"""make chaos: a seeded fault campaign against two guests (docs/chaos.md).

Usage: tests/chaos/chaos.py [--rounds N] [--seed S] [--round-seed R] [--plan FILE]
                        [--out DIR] [--shrink-max N] [--draw] [--once]

Each round draws, from its own seed, a fault schedule in the emulator's grammar
(docs/faults.md: rules at start-up, rules or a GID-disabled action once the traffic
flows) and a workload (stream, echo, seq: many short connections, halfclose, kill: guest
b killed mid-stream, reset: b resets its own ISM function mid-stream), runs it
(tests/chaos/chaos-round.sh) and judges four invariants:

  data     no byte a receiver accepted differs from what was sent (a mismatch, a wrong
           checksum or byte count): an error the connection reported is fine, silent
           corruption never
  kernel   no kernel report on either console (tests/ismcheck/kernel_reports.py)
  blocked  no read or write blocked past its socket timeout plus a margin: each guest's
           workload ends within its deadline, smctest's watchdog never fires
  reuse    the host's reuse verdict is CLEAN or explained (tests/ismcheck/reuse_verdict.py)

and that the emulator served the round and shut down cleanly (emulator). A failed round
is replayed once with the same plan, shrunk (rules dropped one at a time, the workload
made smaller) while it still fails, and written to OUT/findings/<id>/, with one line in
OUT/findings/SUMMARY. One line per round on stdout. Exit status: 0 if every round held,
1 if any failed, 2 on a usage error.

--seed S (default: from the clock, printed) names the campaign; round i's seed derives
from S and i. --round-seed R runs that one round; --plan FILE runs a plan.json a finding
holds (its shrunk schedule); --draw prints the plans without running anything; --once
runs each round once, with no replay and no shrinking (tests/chaos/: a known finding).
Environment: KERNEL, VARIANT (as the make targets), CHAOS_DIR (OUT, default build/chaos).
"""

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# The suite's checkers (tests/ismcheck), a package beside the tests.
sys.path.insert(0, os.path.dirname(HERE))
from ismcheck import kernel_reports  # noqa: E402
from ismcheck import reuse_verdict  # noqa: E402

FUNCTIONS = ("ism0", "ism1")
WORKLOADS = ("stream", "echo", "seq", "halfclose", "kill", "reset")
# The commands a fault may fail: every opcode the grammar names (docs/faults.md).
OPCODES = ("reg_dmb", "unreg_dmb", "query_rgid", "signal_ieq", "reg_sba", "reg_ieq",
           "read_gid", "query_info", "add_vlan_id", "del_vlan_id", "set_vlan",
           "reset_vlan", "unreg_sba", "unreg_ieq")
# The guests' socket timeout (SO_RCVTIMEO/SO_SNDTIMEO) and what a blocked operation may
# take beyond it before it counts as blocked.
IO_TIMEOUT = 10
MARGIN = 15
# What a workload needs at most when nothing stalls, under TCG on a loaded machine.
BASE_SECS = 90
# SCALE per workload: the range drawn, and what shrinking goes down to.
SCALES = {"stream": (4, 32), "echo": (2, 8), "seq": (2, 8), "halfclose": (1, 3),
          "kill": (1, 1), "reset": (2, 6)}


def round_seed(campaign, index):
    """Round INDEX's seed: the same for the same campaign seed on every machine."""
    digest = hashlib.sha256(f"{campaign}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


# ---- drawing ---------------------------------------------------------------------------

# The triggers (docs/faults.md): which occasions a rule fires on.
TRIGGERS = {
    "always": lambda r: "",
    "next": lambda r: f",next={r.randint(1, 4)}",
    "every": lambda r: f",every={r.randint(5, 50)}",
    "prob": lambda r: f",prob={r.choice(('0.001', '0.005', '0.01', '0.05'))},seed={r.randint(1, 999)}",
}
# Each rule kind of the grammar: its own keys, drawn, and whether it may fire on every
# occasion (only what slows the device: a rule that breaks something on every occasion
# would leave nothing to recover to).
RULES = {
    "cmd": (lambda r: "", False),
    "rgid-unknown": (lambda r: "", False),
    "dmb-limit": (lambda r: f",max={r.randint(1, 4)}", True),
    "move": (lambda r: r.choice(("", ",signal=yes", ",signal=no")), False),
    "move-delay": (lambda r: f",us={r.choice((10, 100, 300, 1000, 2000))}", True),
    "irq-drop": (lambda r: "", False),
    "irq-delay": (lambda r: f",us={r.choice((100, 1000, 5000, 20000))}", True),
}


def draw_rule(rng):
    """One rule of the grammar, at one function."""
    kind = rng.choice(list(RULES))
    keys, always_ok = RULES[kind]
    head = f"cmd={rng.choice(OPCODES)}" if kind == "cmd" else kind
    trigger = rng.choice([t for t in TRIGGERS if always_ok or t != "always"])
    return f"{head}@{rng.choice(FUNCTIONS)}{keys(rng)}{TRIGGERS[trigger](rng)}"


def draw_action(rng):
    """The one action: a GID-disabled event for a peer that is still there."""
    at, peer = rng.sample(FUNCTIONS, 2)
    return f"gid-disabled@{at},peer={peer}"


def draw_round(seed):
    """Round SEED's plan: workload, scale, rules at start-up and once traffic flows."""
    rng = random.Random(seed)
    workload = rng.choice(WORKLOADS)
    scale = rng.randint(*SCALES[workload])
    start = [draw_rule(rng) for _ in range(rng.randint(0, 3))]
    mid = [draw_rule(rng) for _ in range(rng.randint(0, 1))]
    if rng.random() < 0.2:
        mid.append(draw_action(rng))
    return {"seed": seed, "workload": workload, "scale": scale, "start": start, "mid": mid}


def deadline(plan):
    """Seconds a guest's workload may take: each connection may stall once per side."""
    conns = {"seq": plan["scale"], "reset": 3, "halfclose": 3 * plan["scale"]}.get(plan["workload"], 1)
    return BASE_SECS + conns * (IO_TIMEOUT + MARGIN)


def fault_args(plan):
    """The exact command-line arguments of the start-up rules, and the mid-run adds."""
    args = [f"--fault '{s}'" for s in plan["start"]]
    args += [f"then: fault add '{s}'" for s in plan["mid"]]
    return " ".join(args) or "(no faults)"


def describe(plan):
    return f"seed={plan['seed']} workload={plan['workload']} scale={plan['scale']} {fault_args(plan)}"


# ---- shrinking -------------------------------------------------------------------------

def smaller(plan):
    """Plans one step smaller than PLAN: each rule dropped, then the workload halved."""
    for key in ("start", "mid"):
        for i in range(len(plan[key])):
            yield dict(plan, **{key: plan[key][:i] + plan[key][i + 1:]})
    low = SCALES[plan["workload"]][0]
    if plan["scale"] > low:
        yield dict(plan, scale=max(low, plan["scale"] // 2))


def shrink(plan, fails, budget):
    """The smallest plan reachable from PLAN by smaller() steps for which FAILS(plan)
    holds, trying at most BUDGET candidates. Returns (plan, tries)."""
    tries = 0
    progress = True
    while progress and tries < budget:
        progress = False
        for candidate in smaller(plan):
            if tries >= budget:
                break
            tries += 1
            if fails(candidate):
                plan, progress = candidate, True
                break
    return plan, tries


# ---- judging ---------------------------------------------------------------------------

# What a receiver or sender says when bytes differ from what was sent (smctest, smcapi).
CORRUPTION = re.compile(r"data mismatch|request mismatch|response mismatch|checksum mismatch"
                        r"|server received \d+ bytes, sent|bad result record|bad hello"
                        r"|unexpected data after result"
                        r"|byte \d+ is 0x[0-9a-f]+, expected")
WATCHDOG = re.compile(r"first_error=watchdog")
SECS = re.compile(r"CHAOS: SECS (\d+)")


def _read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def judge(run_dir, plan, variant="stock"):
    """{invariant: [what broke]} for one round's RUN_DIR; empty when every one held."""
    broke = {}

    def bad(name, text):
        broke.setdefault(name, []).append(text)

    guests = ("a",) if plan["workload"] == "kill" else ("a", "b")
    for g in ("a", "b"):
        console = _read(os.path.join(run_dir, f"{g}.console.log"))
        if console is None:
            bad("round", f"{g}: no console")
            continue
        for line in console.splitlines():
            if CORRUPTION.search(line):
                bad("data", f"{g}: {line.strip()[:200]}")
        for kind, text in kernel_reports.find_reports(console.splitlines(True)):
            bad("kernel", f"{g}: {kind}: {' '.join(t.strip() for t in text[:2])[:200]}"
                          f" [{report_signature(text)}]")
        if g not in guests:
            continue
        if WATCHDOG.search(console):
            bad("blocked", f"{g}: smctest's watchdog fired (a call outlived its {IO_TIMEOUT} s "
                           f"timeout, or an accept its {3 * IO_TIMEOUT} s)")
        m = SECS.search(console)
        took = _read(os.path.join(run_dir, f"{g}.took"))
        limit = deadline(plan)
        if not m:
            bad("blocked", f"{g}: its workload never ended (deadline {limit} s)")
        elif int(m.group(1)) > limit:
            bad("blocked", f"{g}: its workload took {m.group(1)} s (deadline {limit} s)")
        if plan["workload"] == "kill" and took and int(took) > IO_TIMEOUT + MARGIN:
            bad("blocked", f"a: its read ended {took.strip()} s after b was killed "
                           f"(limit {IO_TIMEOUT + MARGIN} s)")
    events = _read(os.path.join(run_dir, "events.jsonl"))
    if events is None:
        bad("round", "no event stream")
    else:
        lines = [json.loads(l) for l in events.splitlines() if l.strip()]
        # Any aborted connection (a failed move, a timeout, a reset) can reach the known
        # late-CDC bug on kernels without its fix; any connection that closes with data
        # unsent, the late-data bug (no variant fixes it yet). reuse_verdict.py explains
        # by either only on that bug's evidence.
        allowed = {"late-data"} | (set() if variant == "lateabort-fix" else {"late-cdc"})
        verdict, reuses, _explained, unexplained = reuse_verdict.judge(lines, allowed)
        for u in unexplained:
            bad("reuse", f"host {verdict}: {u}")
    status = _read(os.path.join(run_dir, "emulator.status"))
    if status is None:
        bad("round", f"tests/chaos/chaos-round.sh did not finish (its output: {run_dir}.log)")
    elif "alive=0 stop=0" not in status:
        bad("emulator", f"emulator: {status.strip()}")
    refused = [l for l in (_read(os.path.join(run_dir, "fault-add.out")) or "").splitlines()
               if l.startswith("refused") and "gid-disabled" not in l]
    for r in refused:
        bad("plan", r)
    return broke


def round_line(index, plan, broke, secs):
    result = "held" if not broke else "BROKE " + ", ".join(sorted(broke))
    return f"round {index}: {describe(plan)}: {result} ({secs:.0f} s)"


# ---- running ---------------------------------------------------------------------------

def run_round(plan, run_dir):
    """Runs PLAN in RUN_DIR; returns (broke, seconds)."""
    env = dict(os.environ, CHAOS_WORKLOAD=plan["workload"], CHAOS_SCALE=str(plan["scale"]),
               CHAOS_IOT=str(IO_TIMEOUT), CHAOS_DEADLINE=str(deadline(plan)),
               CHAOS_START="\n".join(plan["start"]), CHAOS_MID="\n".join(plan["mid"]))
    start = time.monotonic()
    os.makedirs(os.path.dirname(run_dir), exist_ok=True)
    with open(run_dir + ".log", "w") as log:
        subprocess.run([os.path.join(HERE, "chaos-round.sh"), run_dir], env=env,
                       stdout=log, stderr=subprocess.STDOUT, check=False)
    with open(os.path.join(run_dir, "plan.json"), "w") as f:
        json.dump(plan, f, indent=1)
    broke = judge(run_dir, plan, os.environ.get("VARIANT", "stock"))
    with open(os.path.join(run_dir, "verdict.json"), "w") as f:
        json.dump(broke, f, indent=1)
    return broke, time.monotonic() - start


# A lockdep lock class in a report, "(sk_lock-AF_SMC){+.+.}", and a stack frame, "name+0x".
LOCK_CLASS = re.compile(r"\(([^()\s]+)\)\{[^}]*\}")
FRAME = re.compile(r"\b([A-Za-z_][\w.]*)\+0x[0-9a-f]+")


def report_signature(text):
    """What tells one kernel report from another of its kind: the first two lock classes
    it names (lockdep: the lock taken and the one held when it was seen; the chain behind
    them may differ from run to run) and its first stack frames, without addresses."""
    locks, frames = [], []
    for line in text:
        for m in LOCK_CLASS.finditer(line):
            if m.group(1) not in locks:
                locks.append(m.group(1))
        for m in FRAME.finditer(line):
            if len(frames) < 4 and m.group(1) not in frames:
                frames.append(m.group(1))
    return " ".join(locks[:2] + frames)


def failure_key(broke):
    """The same failure seen again: each broken invariant with its messages, the guest's
    name and the numbers taken out."""
    return tuple(sorted((inv, tuple(sorted({re.sub(r"^[ab]: ", "", re.sub(r"\d+", "N", m))
                                              for m in msgs})))
                        for inv, msgs in broke.items()))


def replay_command(plan):
    return f"make chaos CHAOS_ROUND={plan['seed']}"


def finding(out, index, plan, run_dir, broke, confirmed, shrunk, shrunk_dir, tries):
    """Writes OUT/findings/<id>/ and its line in OUT/findings/SUMMARY; returns the line."""
    fid = f"{plan['seed']:08x}-{plan['workload']}"
    fdir = os.path.join(out, "findings", fid)
    shutil.rmtree(fdir, ignore_errors=True)
    shutil.copytree(run_dir, os.path.join(fdir, "run"))
    if shrunk_dir:
        shutil.copytree(shrunk_dir, os.path.join(fdir, "shrunk-run"))
    with open(os.path.join(fdir, "plan.json"), "w") as f:
        json.dump(shrunk, f, indent=1)
    first = next(iter(sorted(broke)))
    line = (f"{fid}: {first}: {broke[first][0]} | round {index}, "
            f"{'confirmed on replay' if confirmed else 'NOT seen on replay (flaky)'}; "
            f"smallest ({tries} tries): {describe(shrunk)} | replay: {replay_command(plan)}"
            f" or tests/chaos/chaos.py --plan {os.path.join(fdir, 'plan.json')}")
    with open(os.path.join(fdir, "finding.txt"), "w") as f:
        f.write(line + "\n" + json.dumps(broke, indent=1) + "\n")
    with open(os.path.join(out, "findings", "SUMMARY"), "a") as f:
        f.write(line + "\n")
    return line


def known_findings(out):
    """The failures kept as findings in OUT by earlier runs (a campaign run in parts
    shares its OUT): failure key -> finding id. A finding's finding.txt is its SUMMARY
    line, then the broken invariants as JSON."""
    known = {}
    root = os.path.join(out, "findings")
    for fid in sorted(os.listdir(root)) if os.path.isdir(root) else ():
        try:
            with open(os.path.join(root, fid, "finding.txt")) as f:
                f.readline()
                broke = json.loads(f.read())
        except (OSError, ValueError):
            continue
        if isinstance(broke, dict) and broke:
            known.setdefault(failure_key(broke), fid)
    return known


def round_dir(out, index, plan):
    return os.path.join(out, "rounds", f"{index:03d}-{plan['seed']:08x}")


def campaign(plans, out, shrink_max, known=None):
    failed = 0
    # A failure already kept as a finding (in this run, or in OUT by an earlier part of
    # the campaign: KNOWN) is not replayed and shrunk again (a report that comes in many
    # rounds would spend the campaign on itself): its round is listed under the finding.
    known = dict(known or {})
    for index, plan in plans:
        run_dir = round_dir(out, index, plan)
        broke, secs = run_round(plan, run_dir)
        print(round_line(index, plan, broke, secs), flush=True)
        if not broke:
            continue
        failed += 1
        key = failure_key(broke)
        if key in known:
            line = f"{known[key]}: again in round {index} ({describe(plan)}), not replayed"
            with open(os.path.join(out, "findings", "SUMMARY"), "a") as f:
                f.write(line + "\n")
            print("  again: " + line, flush=True)
            continue
        again, _ = run_round(plan, run_dir + "-replay")
        confirmed = bool(set(again) & set(broke))
        print(f"  replay: {'confirmed' if confirmed else 'not seen again'}: {', '.join(sorted(again)) or 'held'}",
              flush=True)
        shrunk, tries, last = plan, 0, {}
        if confirmed:
            def fails(candidate):
                d = f"{run_dir}-shrink{len(last) + 1}"
                got, _ = run_round(candidate, d)
                print(f"  shrink {len(last) + 1}: {describe(candidate)}: {', '.join(sorted(got)) or 'held'}",
                      flush=True)
                last[d] = bool(set(got) & set(broke))
                return last[d]
            shrunk, tries = shrink(plan, fails, shrink_max)
        line = finding(out, index, plan, run_dir, broke, confirmed, shrunk,
                       next((d for d in reversed(last) if last[d]), None), tries)
        known[key] = line.split(":", 1)[0]
        print("  finding: " + line, flush=True)
    return failed


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--first", type=int, default=0,
                    help="the campaign's first round number (a campaign split over several runs)")
    ap.add_argument("--round-seed", type=int)
    ap.add_argument("--plan")
    ap.add_argument("--out", default=os.environ.get("CHAOS_DIR") or os.path.join(
        os.environ.get("BUILD_DIR", os.path.join(HERE, "..", "..", "build")), "chaos"))
    ap.add_argument("--shrink-max", type=int, default=6)
    ap.add_argument("--draw", action="store_true")
    ap.add_argument("--once", action="store_true",
                    help="run each round once: no replay, no shrinking (a known finding's "
                         "test, tests/chaos/)")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if args.first < 0:
        ap.error("--first must not be negative")
    if args.plan:
        with open(args.plan) as f:
            plans = [(0, json.load(f))]
        what = f"the plan in {args.plan}"
    elif args.round_seed is not None:
        plans = [(0, draw_round(args.round_seed))]
        what = f"round seed {args.round_seed}"
    else:
        seed = args.seed if args.seed is not None else int(time.time()) % 1000000
        rounds = range(args.first, args.first + args.rounds)
        plans = [(i, draw_round(round_seed(seed, i))) for i in rounds]
        what = f"CHAOS_SEED={seed}, {args.rounds} rounds" + (
            f" ({rounds.start} to {rounds.stop - 1})" if args.first else "")
    kernel = f"{os.environ.get('KERNEL', '6.12')} ({os.environ.get('VARIANT', 'stock')})"
    print(f"chaos: {what}, kernel {kernel}, results in {os.path.abspath(args.out)}", flush=True)
    if args.draw:
        for index, plan in plans:
            print(f"round {index}: {describe(plan)}")
        return 0
    # A replay (--plan, --round-seed) runs its round whatever is known; a campaign skips
    # the replay and shrinking of failures its earlier parts kept.
    out = os.path.abspath(args.out)
    known = known_findings(out) if not (args.plan or args.round_seed is not None) else {}
    if known:
        print(f"chaos: {len(known)} failure(s) already kept in {os.path.join(out, 'findings')}"
              " are listed, not replayed, when they come again", flush=True)
    if args.once:
        failed = 0
        for index, plan in plans:
            run_dir = round_dir(out, index, plan)
            broke, secs = run_round(plan, run_dir)
            print(round_line(index, plan, broke, secs), flush=True)
            for inv in sorted(broke):
                for msg in broke[inv]:
                    print(f"  {inv}: {msg}", flush=True)
            failed += bool(broke)
        print(f"chaos: {len(plans) - failed} of {len(plans)} rounds held (run once, results in {out})")
        return 1 if failed else 0
    failed = campaign(plans, out, args.shrink_max, known)
    print(f"chaos: {len(plans) - failed} of {len(plans)} rounds held"
          + (f"; findings: {os.path.join(out, 'findings', 'SUMMARY')}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
