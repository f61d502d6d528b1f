"""Sample the CPU seconds of java processes descending from PID every 0.2 s: 't cpu' lines."""
import os, sys, time
root = int(sys.argv[1]); out = open(sys.argv[2], "w", buffering=1)
tick = os.sysconf("SC_CLK_TCK")
def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []
def cpu(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick
    except OSError:
        return None
while os.path.exists(f"/proc/{root}"):
    total = 0.0
    stack = [root]
    while stack:
        p = stack.pop()
        kids = children(p)
        stack += kids
        try:
            if p != root and "java" in open(f"/proc/{p}/comm").read():
                c = cpu(p)
                total += c or 0
        except OSError:
            pass
    out.write(f"{time.time():.2f} {total:.2f}\n")
    time.sleep(0.2)
