#!/usr/bin/env python3
"""Run QMP commands against a QEMU, for qemu-configs/tests/pcistb-smoke.sh.

Usage: qmp.py SOCKET COMMAND_JSON...

Connects to QEMU's QMP socket (waiting up to 20 s for it), negotiates, runs each
command in turn and prints one line per command: "ok <command>" or
"error <command>: <desc>". Events are not printed. Exit status 0 once every command
got an answer (success or error), 1 if the connection failed or closed early.
A COMMAND_JSON {"wait-event": NAME, "timeout": SECONDS} is not sent: it waits for the
event NAME (one seen since the start counts; timeout 120 s by default) and prints
"event NAME" or "timeout NAME".
"""
import json
import select
import socket
import sys
import time


def main():
    path, commands = sys.argv[1], sys.argv[2:]
    deadline = time.monotonic() + 20
    while True:
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(path)
            break
        except OSError:
            sock.close()
            if time.monotonic() > deadline:
                print(f"qmp.py: no QMP socket at {path}", file=sys.stderr)
                return 1
            time.sleep(0.1)
    pending = b""
    events = []

    def message(deadline=None):
        """The next message from QEMU, or None at the deadline."""
        nonlocal pending
        while b"\n" not in pending:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([sock], [], [], wait)[0]:
                return None
            data = sock.recv(65536)
            if not data:
                raise EOFError("QMP connection closed")
            pending += data
        line, pending = pending.split(b"\n", 1)
        return json.loads(line)

    def answer():
        while True:
            msg = message()
            if "return" in msg or "error" in msg:
                return msg
            if "event" in msg:
                events.append(msg["event"])

    def send(cmd):
        sock.sendall(json.dumps(cmd).encode() + b"\n")

    message()                                         # greeting
    send({"execute": "qmp_capabilities"})
    answer()
    try:
        for text in commands:
            cmd = json.loads(text)
            if "wait-event" in cmd:
                name, deadline = cmd["wait-event"], time.monotonic() + cmd.get("timeout", 120)
                while name not in events:
                    msg = message(deadline)
                    if msg is None:
                        break
                    if "event" in msg:
                        events.append(msg["event"])
                seen = name in events
                if seen:
                    events.remove(name)
                print(f"{'event' if seen else 'timeout'} {name}", flush=True)
                continue
            send(cmd)
            msg = answer()
            name = cmd["execute"]
            if "error" in msg:
                print(f"error {name}: {msg['error'].get('desc', '')}", flush=True)
            else:
                print(f"ok {name}", flush=True)
    except (EOFError, OSError) as e:
        print(f"qmp.py: QMP connection lost: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
