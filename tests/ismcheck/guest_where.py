#!/usr/bin/env python3
"""Where a guest's CPUs are: samples each vCPU's PSW through the guest's QEMU monitor
socket and names the kernel function from the guest kernel's System.map. For a guest
that stopped answering (a hang, a spin, a deadlock): the same function in every sample
is where it is stuck.

Usage: guest_where.py MONITOR_SOCKET SYSTEM_MAP [--console LOG] [--samples N] [--interval S]
                      [--after S --while-pid PID] [--stack WORDS]

--after S --while-pid PID: first waits S seconds, and samples only if process PID (the
guest's QEMU or its runner) is still there then: a watch over a guest that should have
ended by then, which prints nothing when it did.

Module code is named from the guest's console log when the guest booted with
ismtest.modsyms=1 (its init prints the modules' symbols as `ISMTEST: MODSYM` lines).
"""

import argparse
import bisect
import os
import re
import socket
import sys
import time

PSW_RE = re.compile(r"PSW=mask ([0-9a-fA-F]+) addr ([0-9a-fA-F]+)")
# r14 is the return register of the s390 calling convention: in a function that has not
# called another yet, it names the caller. (TCG updates the PSW only when the vCPU leaves
# its translated code, so a CPU spinning in a chain of it shows one stale address; the
# caller says more.)
R14_RE = re.compile(r"R14=([0-9a-fA-F]{16})")
R15_RE = re.compile(r"R15=([0-9a-fA-F]{16})")
CPU_RE = re.compile(r"^CPU#(\d+)", re.M)


def monitor(path, *commands, timeout=5.0):
    """Runs human-monitor commands in one session, returns the last one's output."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    out = b""

    def read_until_prompt():
        nonlocal out
        buf = b""
        while not buf.endswith(b"(qemu) "):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        return buf

    read_until_prompt()
    for command in commands:
        s.sendall(command.encode() + b"\n")
        out = read_until_prompt()
    s.close()
    return out.decode(errors="replace").replace("\r", "")


def load_symbols(path, console=None):
    """The symbol table (addresses, names) and where code is: the kernel's text, moved by
    the guest's KASLR offset when its console says where _stext is, and each module's
    (named by its MODSYM lines when the guest printed them, by its MODULE line else)."""
    kernel, modules, bases, stext = [], [], [], None
    for line in open(path):
        parts = line.split()
        if len(parts) >= 3 and parts[1].lower() in ("t", "w"):
            kernel.append((int(parts[0], 16), parts[2]))
            if parts[2] == "_stext":
                stext = int(parts[0], 16)
    shift = None
    if console:
        for line in open(console, errors="replace"):
            parts = line.replace("\r", "").split()
            if len(parts) < 5 or parts[0] != "ISMTEST:":
                continue
            # ISMTEST: MODSYM <addr> <type> <name> [[<module>]]
            if parts[1] == "MODSYM" and parts[3].lower() in ("t", "w"):
                if len(parts) == 5 and parts[4] == "_stext" and stext is not None:
                    shift = int(parts[2], 16) - stext   # KASLR: where the kernel really is
                elif len(parts) >= 6:
                    modules.append((int(parts[2], 16), f"{parts[4]}{parts[5]}"))
            # ISMTEST: MODULE <name> <text address> <size>
            elif parts[1] == "MODULE":
                try:
                    bases.append((int(parts[3], 16), int(parts[4]), parts[2]))
                except ValueError:
                    pass
    ranges = []
    if shift is not None:
        ktext = [a + shift for a, n in kernel if n in ("_stext", "_etext")]
        if len(ktext) == 2:
            ranges.append((min(ktext), max(ktext)))
    else:
        # Without the offset, a System.map name would be a guess that looks like a fact
        # (every address beyond the map's last text symbol would take its name).
        kernel = []
    named = {n.split("[")[-1].rstrip("]") for _, n in modules}
    for base, size, name in bases:
        ranges.append((base, base + size))
        if name not in named:
            modules.append((base, f"[{name}]"))
    if modules and not bases:
        ranges.append((min(a for a, _ in modules), max(a for a, _ in modules) + 0x1000))
    syms = sorted([(a + (shift or 0), n) for a, n in kernel] + modules)
    return [a for a, _ in syms], [n for _, n in syms], ranges, shift is not None


def symbolize(addrs, names, addr, ranges=None):
    """FUNCTION+OFFSET, or the bare address when it is in no code the guest named (the
    lowcore, a wait PSW's address, a kernel whose offset is not known)."""
    i = bisect.bisect_right(addrs, addr) - 1
    if i < 0 or (ranges is not None and not any(lo <= addr < hi for lo, hi in ranges)):
        return f"{addr:#x}"
    return f"{names[i]}+{addr - addrs[i]:#x}"


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("monitor")
    ap.add_argument("system_map")
    ap.add_argument("--console", help="the guest's console log, for its MODSYM lines")
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--interval", type=float, default=0.3)
    ap.add_argument("--after", type=float, default=0.0)
    ap.add_argument("--while-pid", type=int)
    ap.add_argument("--stack", type=int, default=0, metavar="WORDS",
                    help="after the samples, the code addresses among WORDS words of each running CPU's stack")
    args = ap.parse_args()
    deadline = time.monotonic() + args.after
    while time.monotonic() < deadline:
        if args.while_pid and not pid_alive(args.while_pid):
            return 0
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    if args.while_pid and not pid_alive(args.while_pid):
        return 0
    if args.after:
        print(f"guest_where: still running {args.after:.0f} s after the start")
    addrs, names, ranges, placed = load_symbols(args.system_map, args.console)
    if not placed:
        print("guest_where: the console names no _stext (ISMTEST: MODSYM): kernel addresses stay numbers")
    seen, sps = {}, {}
    for n in range(args.samples):
        try:
            text = monitor(args.monitor, "info registers -a")
        except OSError as e:
            print(f"guest_where: monitor {args.monitor}: {e}")
            return 1
        # One block per CPU; the PSW line names where it executes.
        blocks = re.split(r"(?=^CPU#\d+)", text, flags=re.M)
        for block in blocks:
            cpu = CPU_RE.search(block)
            psw = PSW_RE.search(block)
            if not psw:
                continue
            c = int(cpu.group(1)) if cpu else 0
            mask, addr = int(psw.group(1), 16), int(psw.group(2), 16)
            where = symbolize(addrs, names, addr, ranges)
            # PSW mask: 0x02.. I/O and 0x01.. external interrupts enabled; 0x0002.. wait state.
            state = "wait" if mask & 0x0002000000000000 else "run"
            irq = "irqs-on" if mask & 0x0300000000000000 else "irqs-off"
            r14 = R14_RE.search(block)
            caller = f" from {symbolize(addrs, names, int(r14.group(1), 16), ranges)}" if r14 else ""
            print(f"sample {n} cpu {c}: {where} ({state}, {irq}, psw mask {mask:#018x}){caller}")
            r15 = R15_RE.search(block)
            if r15 and state == "run":
                sps[c] = int(r15.group(1), 16)
            seen.setdefault(c, []).append(where.split("+")[0])
        time.sleep(args.interval)
    for c, fns in sorted(seen.items()):
        common = max(set(fns), key=fns.count)
        print(f"cpu {c}: {fns.count(common)}/{len(fns)} samples in {common}")
    for c, sp in sorted(sps.items()) if args.stack else ():
        print(f"stack cpu {c}: {' < '.join(stack_code(args.monitor, c, sp, args.stack, addrs, names, ranges)) or 'no code address'}")
    return 0


def stack_code(path, cpu, sp, words, addrs, names, ranges):
    """The functions named by the code addresses among WORDS 8-byte words of CPU's stack
    from SP up (return addresses of the frames, and of an interrupted context's saved
    registers), in order, each once. Kernel stacks have no frame pointers to follow; a
    word that happens to look like a code address shows up too, which is why callers
    look for a function, not for a chain."""
    try:
        text = monitor(path, f"cpu {cpu}", f"x /{words}gx {sp:#x}")
    except OSError as e:
        return [f"(monitor: {e})"]
    out = []
    for line in text.splitlines():
        if ":" not in line:
            continue
        for word in line.split(":", 1)[1].split():
            try:
                v = int(word, 16)
            except ValueError:
                continue
            if any(lo <= v < hi for lo, hi in ranges):
                fn = symbolize(addrs, names, v, ranges).split("+")[0]
                if fn not in out:
                    out.append(fn)
    return out


if __name__ == "__main__":
    sys.exit(main())
