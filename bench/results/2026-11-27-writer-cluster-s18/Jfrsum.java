import java.nio.file.*;
import java.time.*;
import java.util.*;
import jdk.jfr.consumer.*;

/** jfr file, from HH:MM:SS, to HH:MM:SS (UTC), stack filter substring ("-" none): self/inclusive/categories of task threads. */
public class Jfrsum {
  // category: frame substring (checked from the leaf frame upward; the first match names it)
  static final String[][] CATS = {
    {"gzip/zstd compression", "ZstdCompressor"}, {"gzip/zstd compression", "zstd"}, {"gzip/zstd compression", "Zstd"},
    {"parquet: close/flush file", "ParquetWriter.close"}, {"parquet: close/flush file", "ParquetFileWriter"},
    {"parquet: close/flush file", "InternalParquetRecordWriter.flushRowGroupToStore"},
    {"parquet: new file", "IcebergBatchWrite$TableWriters.newWriter"}, {"parquet: new file", "OutputFileFactory"},
    {"iceberg metrics", "ParquetMetrics"}, {"iceberg metrics", "MetricsConfig"},
    {"parquet: write values", "org.apache.iceberg.parquet.ParquetWriter.add"},
    {"parquet: write values", "SparkParquetWriters"},
    {"partition key + lookup", "PartitionKey"}, {"partition key + lookup", "StructLikeMap"}, {"partition key + lookup", "RowAsStruct"},
    {"counting (TaskResult.count)", "IcebergBatchWrite$TaskResult.count"}, {"partition key + lookup", "IcebergBatchWrite$TableWriters.sameSources"}, {"partition key + lookup", "IcebergBatchWrite$TableWriters.keepSources"},
    {"writeTask other", "IcebergBatchWrite.writeTask"}, {"writeTask other", "IcebergBatchWrite$TableWriters.write"},
    {"parse: jar", "SimpleBinlogParse"}, {"parse: from_json", "JacksonParser"}, {"parse: from_json", "JsonToStructs"},
    {"parse: UDF row convert", "CatalystTypeConverters"}, {"parse: UDF row convert", "ToScalaUDF"},
    {"regex (routing)", "java.util.regex"},
    {"date/time format", "DateTimeFormatter"}, {"date/time format", "TimestampFormatter"}, {"date/time format", "DateTimeUtils"},
    {"broadcast join", "HashedRelation"}, {"broadcast join", "BroadcastHashJoin"},
    {"kafka read", "org.apache.kafka"}, {"kafka read", "KafkaDataConsumer"}, {"kafka read", "KafkaBatchPartitionReader"}, {"kafka read", "KafkaRecordToRowConverter"},
    {"spark iceberg sink write", "SparkWrite"},
    {"codegen projection", "GeneratedClass"}, {"codegen projection", "UnsafeProjection"},
    {"sort (clustering)", "UnsafeExternalSorter"}, {"sort (clustering)", "UnsafeInMemorySorter"}, {"sort (clustering)", "RadixSort"}, {"sort (clustering)", "UnsafeExternalRowSorter"}, {"sort (clustering)", "UnsafeSorterSpillWriter"},
    {"spark other", "org.apache.spark"},
  };
  public static void main(String[] a) throws Exception {
    LocalTime from = LocalTime.parse(a[1]), to = LocalTime.parse(a[2]);
    String filter = a.length > 3 ? a[3] : "-";
    Map<String,Integer> callers = new HashMap<>(), self = new HashMap<>(), incl = new HashMap<>(), cats = new HashMap<>(), threads = new HashMap<>();
    int n = 0;
    try (RecordingFile f = new RecordingFile(Path.of(a[0]))) {
      while (f.hasMoreEvents()) {
        RecordedEvent e = f.readEvent();
        if (!e.getEventType().getName().equals("jdk.ExecutionSample")) continue;
        LocalTime t = LocalTime.ofInstant(e.getStartTime(), ZoneOffset.UTC);
        if (t.isBefore(from) || t.isAfter(to)) continue;
        RecordedThread th = e.getThread("sampledThread");
        String tn = th == null ? "?" : String.valueOf(th.getJavaName());
        RecordedStackTrace st = e.getStackTrace();
        if (st == null) continue;
        List<String> frames = new ArrayList<>();
        for (RecordedFrame fr : st.getFrames()) frames.add(fr.getMethod().getType().getName() + "." + fr.getMethod().getName());
        String joined = String.join("|", frames);
        if (!filter.equals("-") && !joined.contains(filter)) continue;
        threads.merge(tn.replaceAll("[0-9]+$", "N"), 1, Integer::sum);
        if (!tn.startsWith("Executor task launch")) continue;
        n++;
        self.merge(frames.get(0) + " [" + st.getFrames().get(0).getType() + " line " + st.getFrames().get(0).getLineNumber() + "]", 1, Integer::sum);
        for (String fr : new HashSet<>(frames)) incl.merge(fr, 1, Integer::sum);
        String cat = "other";
        outer:
        for (String fr : frames) for (String[] c : CATS) if (fr.contains(c[1])) { cat = c[0]; break outer; }
        cats.merge(cat, 1, Integer::sum);
        String focus = System.getProperty("focus");
        if (focus != null) for (int i = 0; i < frames.size(); i++) if (frames.get(i).contains(focus)) {
          StringBuilder b = new StringBuilder();
          for (int j = i; j < Math.min(frames.size(), i + Integer.parseInt(System.getProperty("depth", "4"))); j++) b.append(frames.get(j).replaceAll("^.*\\.([^.]+\\.[^.]+)$", "$1")).append(" < ");
          callers.merge(b.toString(), 1, Integer::sum); break; }
      }
    }
    System.out.println("task-thread samples: " + n + "; all threads: " + threads);
    print("focus callers", callers, n, 15);
    print("categories (nearest categorised frame from the leaf)", cats, n, 40);
    print("self", self, n, Integer.parseInt(System.getProperty("top", "30")));
    print("inclusive", incl, n, Integer.parseInt(System.getProperty("itop", "60")));
  }
  static void print(String title, Map<String,Integer> m, int n, int top) {
    System.out.println("--- " + title);
    m.entrySet().stream().sorted((x, y) -> y.getValue() - x.getValue()).limit(top)
      .forEach(x -> System.out.printf("%6.1f%%  %s%n", 100.0 * x.getValue() / n, x.getKey()));
  }
}
