"""Per batch: wall s, JVM CPU s in its window, and the data-files phase for the writer."""
import re, sys, bisect
for tag in sys.argv[1:]:
    samples = [tuple(map(float, l.split())) for l in open(f"/tmp/wc/{tag}.cpu") if l.strip()]
    ts = [s[0] for s in samples]
    def cpu_at(t):
        i = bisect.bisect_left(ts, t)
        i = min(max(i, 0), len(samples) - 1)
        return samples[i][1]
    print(f"--- {tag}")
    phase = ""
    for line in open(f"/tmp/wc/{tag}.txt"):
        t, _, text = line.partition(" ")
        t = float(t)
        if text.startswith(("baseline (plain", "baseline after", "stream writer, first", "stream writer, steady", "stream writer warm-up", "baseline warm-up")):
            print("   ", text.strip()[:110])
        m = re.search(r"(baseline|stream writer) batch (\d+): ([\d,]+) rows in ([\d.]+) s", text)
        if m:
            d = float(m.group(4)); rows = int(m.group(3).replace(",", ""))
            c = cpu_at(t) - cpu_at(t - d)
            print(f"  {m.group(1):13} batch {m.group(2)} rows {rows:>9,} wall {d:6.1f} s  JVM CPU {c:6.1f} s  CPU/100k {c/rows*1e5 if rows else 0:5.2f}")
        m = re.search(r"batch \d+: (\d+) rows.*data files ([\d.]+) s", text)
        if m:
            print(f"      data files {m.group(2)} s")
        if "peak RSS" in text or "files:" in text or "above 2" in text:
            print("   ", text.strip())
