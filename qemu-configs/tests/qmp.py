#!/usr/bin/env python3
"""Run QMP commands against a QEMU, for qemu-configs/tests/pcistb-smoke.sh.

Usage: qmp.py SOCKET COMMAND_JSON...

Connects to QEMU's QMP socket (waiting up to 20 s for it), negotiates, runs each
command in turn and prints one line per command: "ok <command>" or
"error <command>: <desc>". Events are not printed. Exit status 0 once every command
got an answer (success or error), 1 if the connection failed or closed early.
"""
import json
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
    stream = sock.makefile("rw", encoding="utf-8")

    def answer():
        for line in stream:
            msg = json.loads(line)
            if "return" in msg or "error" in msg:
                return msg
        raise EOFError("QMP connection closed")

    json.loads(stream.readline())                     # greeting
    stream.write(json.dumps({"execute": "qmp_capabilities"}) + "\n")
    stream.flush()
    answer()
    try:
        for text in commands:
            cmd = json.loads(text)
            stream.write(json.dumps(cmd) + "\n")
            stream.flush()
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
