#!/usr/bin/env python3
"""Stall probe (seed 002 §4.4): closed-loop SETs over RESP to one server,
completions counted per 100 ms; at t=1 s one replica process is SIGSTOPped
(or SIGKILLed) for `hold` seconds. Usage:
stall.py PORT PID MODE(stop|kill) HOLD_S CLIENTS OUT.csv"""
import os, signal, socket, sys, threading, time

port, pid, mode, hold, nclients, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
DURATION = 1.0 + hold + 3.0
done = []
lock = threading.Lock()
t0 = time.monotonic()

BG_PORT = int(os.environ.get("BG_PORT") or 0)  # uncounted load elsewhere

def client(i, port=port, counted=True):
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(10)
    f = s.makefile("rb")
    n = 0
    while time.monotonic() - t0 < DURATION:
        key = b"k%d" % (n % 10)
        cmd = b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$2\r\nvv\r\n" % (len(key), key)
        try:
            s.sendall(cmd)
            line = f.readline()
        except Exception:
            break
        if counted:
            with lock:
                done.append((time.monotonic() - t0, line.startswith(b"+")))
        n += 1

ts = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(nclients)]
if BG_PORT:
    for i in range(nclients):
        threading.Thread(target=client, args=(i, BG_PORT, False), daemon=True).start()
for t in ts: t.start()
time.sleep(1.0)
os.kill(pid, signal.SIGSTOP if mode == "stop" else signal.SIGKILL)
fault_at = time.monotonic() - t0
if mode == "stop":
    time.sleep(hold)
    os.kill(pid, signal.SIGCONT)
for t in ts: t.join(timeout=DURATION + 12)
buckets = {}
for at, ok in done:
    b = int(at * 10)
    o, f = buckets.get(b, (0, 0))
    buckets[b] = (o + ok, f + (not ok))
with open(out, "w") as w:
    w.write("t_ms,ok,failed\n")
    for b in range(int(DURATION * 10) + 1):
        o, f = buckets.get(b, (0, 0))
        w.write(f"{b*100},{o},{f}\n")
# longest run of 100 ms buckets without a success after the fault
zero, longest, cur = 0, 0, 0
for b in range(int(fault_at * 10), int(DURATION * 10)):
    if buckets.get(b, (0, 0))[0] == 0:
        cur += 1; longest = max(longest, cur)
    else:
        cur = 0
print(f"fault at {fault_at:.2f}s; longest gap without a success after it: {longest*100} ms; ops {len(done)}")
