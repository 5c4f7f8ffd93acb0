#!/usr/bin/env python3
"""Where a guest's CPUs are: samples each vCPU's PSW through the guest's QEMU monitor
socket and names the kernel function from the guest kernel's System.map. For a guest
that stopped answering (a hang, a spin, a deadlock): the same function in every sample
is where it is stuck.

Usage: guest_where.py MONITOR_SOCKET SYSTEM_MAP [--console LOG] [--samples N] [--interval S]

Module code is named from the guest's console log when the guest booted with
ismtest.modsyms=1 (its init prints the modules' symbols as `ISMTEST: MODSYM` lines).
"""

import argparse
import bisect
import re
import socket
import sys
import time

PSW_RE = re.compile(r"PSW=mask ([0-9a-fA-F]+) addr ([0-9a-fA-F]+)")
CPU_RE = re.compile(r"^CPU#(\d+)", re.M)


def monitor(path, command, timeout=5.0):
    """Runs one human-monitor command, returns its output."""
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
    s.sendall(command.encode() + b"\n")
    out = read_until_prompt()
    s.close()
    return out.decode(errors="replace").replace("\r", "")


def load_symbols(path, console=None):
    kernel, modules, stext = [], [], None
    for line in open(path):
        parts = line.split()
        if len(parts) >= 3 and parts[1].lower() in ("t", "w"):
            kernel.append((int(parts[0], 16), parts[2]))
            if parts[2] == "_stext":
                stext = int(parts[0], 16)
    shift = 0
    if console:
        for line in open(console, errors="replace"):
            parts = line.replace("\r", "").split()
            # ISMTEST: MODSYM <addr> <type> <name> [[<module>]]
            if len(parts) >= 5 and parts[1] == "MODSYM" and parts[3].lower() in ("t", "w"):
                if len(parts) == 5 and parts[4] == "_stext" and stext is not None:
                    shift = int(parts[2], 16) - stext   # KASLR: where the kernel really is
                elif len(parts) >= 6:
                    modules.append((int(parts[2], 16), f"{parts[4]}{parts[5]}"))
    syms = sorted([(a + shift, n) for a, n in kernel] + modules)
    return [a for a, _ in syms], [n for _, n in syms]


def symbolize(addrs, names, addr):
    i = bisect.bisect_right(addrs, addr) - 1
    if i < 0:
        return f"{addr:#x}"
    return f"{names[i]}+{addr - addrs[i]:#x}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("monitor")
    ap.add_argument("system_map")
    ap.add_argument("--console", help="the guest's console log, for its MODSYM lines")
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--interval", type=float, default=0.3)
    args = ap.parse_args()
    addrs, names = load_symbols(args.system_map, args.console)
    seen = {}
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
            where = symbolize(addrs, names, addr)
            # PSW mask: 0x02.. I/O and 0x01.. external interrupts enabled; 0x0002.. wait state.
            state = "wait" if mask & 0x0002000000000000 else "run"
            irq = "irqs-on" if mask & 0x0300000000000000 else "irqs-off"
            print(f"sample {n} cpu {c}: {where} ({state}, {irq}, psw mask {mask:#018x})")
            seen.setdefault(c, []).append(where.split("+")[0])
        time.sleep(args.interval)
    for c, fns in sorted(seen.items()):
        common = max(set(fns), key=fns.count)
        print(f"cpu {c}: {fns.count(common)}/{len(fns)} samples in {common}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
