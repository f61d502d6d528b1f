"""Summarise a Spark event log between two epoch seconds: jobs, stages, tasks (durations)."""
import json, sys
path, a, b = sys.argv[1], float(sys.argv[2]) * 1000, float(sys.argv[3]) * 1000
stages, tasks, jobs, sql = {}, {}, [], []
for line in open(path):
    e = json.loads(line)
    ev = e["Event"]
    if ev == "SparkListenerStageCompleted":
        i = e["Stage Info"]
        stages[(i["Stage ID"], i["Stage Attempt ID"])] = i
    elif ev == "SparkListenerTaskEnd":
        t = e["Task Info"]
        tasks.setdefault(e["Stage ID"], []).append((t["Launch Time"], t["Finish Time"], e.get("Task Metrics") or {}))
    elif ev == "SparkListenerJobStart":
        jobs.append([e["Job ID"], e["Submission Time"], None, e["Stage IDs"]])
    elif ev == "SparkListenerJobEnd":
        for j in jobs:
            if j[0] == e["Job ID"]:
                j[2] = e["Completion Time"]
    elif ev.endswith("SparkListenerSQLExecutionStart"):
        sql.append((e["time"], "start", e["executionId"], e.get("description", "")[:90]))
    elif ev.endswith("SparkListenerSQLExecutionEnd"):
        sql.append((e["time"], "end", e["executionId"], ""))
events = []
for t, kind, i, d in sql:
    if a <= t <= b:
        events.append((t, f"SQL {kind} {i} {d}"))
for jid, s, c, st in jobs:
    if s and a <= s <= b:
        events.append((s, f"job {jid} start stages {st}"))
        events.append((c, f"job {jid} end ({(c - s) / 1000:.3f} s)"))
for (sid, att), i in stages.items():
    s, c = i.get("Submission Time"), i.get("Completion Time")
    if s and a <= s <= b:
        ts = tasks.get(sid, [])
        durs = sorted(round((f - l) / 1000, 3) for l, f, _ in ts)
        run = sum(m.get("Executor Run Time", 0) for *_, m in ts) / 1000
        cpu = sum(m.get("Executor CPU Time", 0) for *_, m in ts) / 1e9
        rd = sum((m.get("Input Metrics") or {}).get("Bytes Read", 0) for *_, m in ts)
        events.append((s, f"  stage {sid} '{i['Stage Name'][:40]}' {len(ts)} tasks {(c - s) / 1000:.3f} s; run {run:.2f} cpu {cpu:.2f} read {rd} durs {durs}"))
for t, text in sorted(events):
    print(f"{(t - a) / 1000:8.3f} {text}")
