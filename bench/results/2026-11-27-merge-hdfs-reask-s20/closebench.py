"""Serial create/write/close of N small files on the stack's HDFS, with a given first re-ask
delay: per-file seconds (median, mean) and the NameNode's Complete calls per file."""
import sys, time, json, urllib.request, statistics, uuid
from pyspark.sql import SparkSession
delay, retries, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.hadoop.dfs.client.block.write.locateFollowingBlock.initial.delay.ms", delay)
         .config("spark.hadoop.dfs.client.block.write.locateFollowingBlock.retries", retries).getOrCreate())
jvm = spark.sparkContext._jvm
conf = spark._jsc.hadoopConfiguration()
base = jvm.org.apache.hadoop.fs.Path(f"hdfs://127.0.0.1:28020/tmp/closebench-{uuid.uuid4().hex[:6]}")
fs = base.getFileSystem(conf)
fs.mkdirs(base)
payload = bytearray(b"x" * 200_000)
def completes():
    with urllib.request.urlopen("http://127.0.0.1:29870/jmx?qry=Hadoop:service=NameNode,name=RpcDetailedActivityForPort28020") as r:
        return json.load(r)["beans"][0].get("CompleteNumOps", 0)
for rnd in range(2):
    times = []
    c0 = completes()
    for i in range(n):
        t = time.monotonic()
        out = fs.create(jvm.org.apache.hadoop.fs.Path(base, f"r{rnd}-f{i}"), False)
        out.write(payload)
        t = time.monotonic()
        out.close()
        times.append(time.monotonic() - t)
    c1 = completes()
    q=statistics.quantiles(times,n=10); print(f"close p10 {q[0]*1000:.1f} p90 {q[-1]*1000:.1f}; delay {delay} ms: per file median {statistics.median(times)*1000:.1f} ms mean {statistics.mean(times)*1000:.1f} ms; NameNode Complete calls {c1-c0} for {n} files (others' included)", flush=True)
fs.delete(base, True)
spark.stop()
