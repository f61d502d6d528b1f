"""Profiling harness (not product): merge_bench with Spark's event log, NameNode/DataNode JMX
and Hadoop FileSystem statistics around every Merger.merge call."""
import json, sys, time, urllib.request
import bench.merge_bench as mb
from merge.job import Merger

EV = sys.argv[1]
extra = json.loads(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].startswith("{") else {}
rest = [a for a in sys.argv[2:] if not a.startswith("{")]
orig_session = mb.lake_session
def session(settings, app, extra_conf=None):
    conf = {**(extra_conf or {}), "spark.eventLog.enabled": "true", "spark.eventLog.dir": "file://" + EV, **extra}
    return orig_session(settings, app, conf)
mb.lake_session = session

def bean(port, q):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/jmx?qry={q}", timeout=2) as r:
            b = json.load(r)["beans"]
        return b[0] if b else {}
    except Exception:
        return {}

def counters():
    out = {}
    nn = bean(29870, "Hadoop:service=NameNode,name=RpcDetailedActivityForPort28020")
    for k, v in nn.items():
        if k.endswith("NumOps") and not k.startswith(("Overall", "Deferred")):
            out["nn." + k[:-6]] = v
    nn2 = bean(29870, "Hadoop:service=NameNode,name=RpcActivityForPort28020")
    for k in ("RpcProcessingTimeNumOps", "RpcQueueTimeNumOps"):
        out["nnrpc." + k] = nn2.get(k, 0)
    dn = bean(29864, "Hadoop:service=DataNode,name=DataNodeActivity*")
    for k, v in dn.items():
        if (k.endswith("NumOps") or k.startswith("Bytes")) and isinstance(v, (int, float)):
            out["dn." + k] = v
    return out

def fsstats(spark):
    jvm = spark.sparkContext._jvm
    out = {}
    for s in jvm.org.apache.hadoop.fs.FileSystem.getAllStatistics():
        sch = s.getScheme()
        out[f"fs.{sch}.bytesRead"] = out.get(f"fs.{sch}.bytesRead", 0) + s.getBytesRead()
        out[f"fs.{sch}.bytesWritten"] = out.get(f"fs.{sch}.bytesWritten", 0) + s.getBytesWritten()
        out[f"fs.{sch}.readOps"] = out.get(f"fs.{sch}.readOps", 0) + s.getReadOps()
        out[f"fs.{sch}.largeReadOps"] = out.get(f"fs.{sch}.largeReadOps", 0) + s.getLargeReadOps()
        out[f"fs.{sch}.writeOps"] = out.get(f"fs.{sch}.writeOps", 0) + s.getWriteOps()
    return out

orig_merge = Merger.merge
def merge(self, request):
    before = {**counters(), **fsstats(self.spark)}
    t0 = time.time()
    try:
        return orig_merge(self, request)
    finally:
        t1 = time.time()
        after = {**counters(), **fsstats(self.spark)}
        diff = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
        print(f"PROFILE merge {request.dt} hour={request.hour} window {t0:.3f} {t1:.3f} ({t1-t0:.2f} s) {json.dumps(diff, sort_keys=True)}", flush=True)
Merger.merge = merge
raise SystemExit(mb.main(rest))
