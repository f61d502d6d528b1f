package io.cdcmirror.spark;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.iceberg.AppendFiles;
import org.apache.iceberg.BaseMetastoreTableOperations;
import org.apache.iceberg.BaseTable;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.FileFormat;
import org.apache.iceberg.MetricsConfig;
import org.apache.iceberg.MetricsModes;
import org.apache.iceberg.PartitionKey;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.SerializableTable;
import org.apache.iceberg.StructLike;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableOperations;
import org.apache.iceberg.TableProperties;
import org.apache.iceberg.encryption.EncryptedOutputFile;
import org.apache.iceberg.io.DataWriter;
import org.apache.iceberg.io.OutputFileFactory;
import org.apache.iceberg.parquet.Parquet;
import org.apache.iceberg.spark.SparkSchemaUtil;
import org.apache.iceberg.spark.data.SparkParquetWriters;
import org.apache.iceberg.types.Type;
import org.apache.iceberg.types.Types;
import org.apache.iceberg.util.JsonUtil;
import org.apache.iceberg.util.PropertyUtil;
import org.apache.iceberg.util.StructLikeMap;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The stream writer's micro-batch into many Iceberg tables: the data files of EVERY table in
 * ONE Spark job, which also counts the batch (rows, offsets, newest event per table, day and
 * Kafka partition; the source tables routed to each table), then one commit per table through
 * Iceberg's Java API.
 *
 * <p>Why: Spark's DataFrame write ({@code writeTo(t).append()}) is one Spark job, one query
 * analysis and one table load per table; for a batch over 200 tables those per-table costs, not
 * the rows, were most of the batch. Here each task writes its rows of every table into that
 * table's data folder with Iceberg's own Parquet writer for Spark rows ({@code
 * SparkParquetWriters}, what Iceberg's Spark sink uses), keeping one file open per table and
 * partition (a fanout write, rolled at the table's {@code write.target-file-size-bytes}), and
 * hands the {@link DataFile}s back to the driver with its counts: the batch is read once, not
 * once to count and once to write. {@link #commit} then appends a table's files as one snapshot
 * with the given summary properties: the exactly-once commit, one per table, and commits to
 * different tables may run at once (they are independent).
 *
 * <p>Input columns: 0 the table's name; 1 whether to write the row (false: counted only, e.g.
 * below a table's committed offsets); 2 the day; 3 the Kafka topic, 4 partition (int), 5 offset
 * (long); 6 the event time in ms counted for the newest event (null: not counted); 7 and 8 the
 * source schema and table counted as routed to the table (null: not counted); from 9 on, one
 * struct column per column layout: a table of {@code tables} has its row in the struct column
 * {@code layouts} gives it (exactly its columns in its schema's order and Spark types). Rows of
 * tables not in {@code tables} are counted and not written. Files of a failed job or commit are
 * left unreferenced (the table is unchanged); orphan-file removal deletes them.
 */
public final class IcebergBatchWrite implements Serializable {
  private static final long serialVersionUID = 1L;
  // Writers check their size every so many rows (as Iceberg's rolling writer does): the
  // Parquet writer's size estimate is not free.
  private static final int ROWS_BETWEEN_SIZE_CHECKS = 1000;
  // Parquet's dictionary encoding, off in the files written here unless the table sets it: a
  // batch's file holds the rows of one batch of the tables of its partition, whose
  // widest columns (the JSON texts, raw bytes, offsets and times) are all but unique, so the
  // dictionary saves nothing there, yet Parquet hashes every value into it (and RLE-codes its
  // ids) before it falls back to plain values: a JFR profile of a steady batch over 200 tables
  // found ~35 % of the task threads' samples there (Binary.hashCode/equals, the Long2Int
  // dictionary maps, the RLE encoder). The few-valued columns compress well plain (zstd);
  // compaction (Spark's writer) keeps Parquet's defaults in its large files.
  private static final String DICTIONARY_PROPERTY = "parquet.enable.dictionary";
  // Parquet's own column statistics (each page's and row group's min and max), off for the
  // columns whose Iceberg metrics mode is "none" unless the table sets them: Iceberg keeps no
  // bounds of those columns (the JSON texts, raw bytes, errors), nothing filters on them, yet
  // Parquet compares every value against the page's min and max (byte by byte, and JSON row
  // images share long prefixes): 8.8 % of the task threads' samples in a steady 1M-row batch
  // (bench/results/2026-11-27-writer-rows-s17).
  private static final String STATS_PROPERTY_PREFIX = "write.parquet.stats-enabled.column.";
  // A task's open files are closed this many at a time at its end. A file's close is where its
  // bytes leave: on S3 the PUT of the whole file, on HDFS the block's pipeline and the
  // NameNode's complete(); closed one after another, a task with ~100-200 files (one per
  // logical table and day it met) waits that many round trips. Bounded, so that a task with
  // hundreds of files does not start hundreds of threads and uploads at once.
  private static final int CONCURRENT_CLOSES = 8;
  // How long a killed task waits for its cancelled closes to end before abandoning its files.
  private static final long CLOSE_END_WAIT_MS = 30_000;
  private static final int TABLE = 0;
  private static final int WRITE = 1;
  private static final int DAY = 2;
  private static final int TOPIC = 3;
  private static final int PARTITION = 4;
  private static final int OFFSET = 5;
  private static final int EVENT_MS = 6;
  private static final int SOURCE_SCHEMA = 7;
  private static final int SOURCE_TABLE = 8;
  private static final int FIRST_LAYOUT = 9;

  private final Map<String, List<DataFile>> filesByTable;
  private final Map<Group, long[]> groups;
  private final Set<Source> sources;

  private IcebergBatchWrite(
      Map<String, List<DataFile>> filesByTable, Map<Group, long[]> groups, Set<Source> sources) {
    this.filesByTable = filesByTable;
    this.groups = groups;
    this.sources = sources;
  }

  /** Write and count {@code rows} (see the class) in one Spark job; nothing committed. */
  public static IcebergBatchWrite write(
      Dataset<Row> rows, Map<String, Table> tables, Map<String, Integer> layouts) {
    StructField[] fields = rows.schema().fields();
    Map<String, Table> shipped = new HashMap<>();
    Map<String, Integer> layoutOf = new HashMap<>();
    for (Map.Entry<String, Table> entry : tables.entrySet()) {
      Table table = entry.getValue();
      Integer layout = layouts.get(entry.getKey());
      if (layout == null || layout < FIRST_LAYOUT || layout >= fields.length) {
        throw new IllegalArgumentException("no struct column is given for " + table.name());
      }
      StructType rowType = (StructType) fields[layout].dataType();
      StructType expected = SparkSchemaUtil.convert(table.schema());
      if (!sameTypes(expected, rowType)) {
        throw new IllegalArgumentException(
            "the rows for " + table.name() + " have the columns " + rowType.simpleString()
                + " but the table has " + expected.simpleString());
      }
      shipped.put(entry.getKey(), SerializableTable.copyOf(table));
      layoutOf.put(entry.getKey(), layout);
    }
    StructType inputType = rows.schema();
    JavaSparkContext context = JavaSparkContext.fromSparkContext(rows.sparkSession().sparkContext());
    Broadcast<Map<String, Table>> broadcast = context.broadcast(shipped);
    String operationId = UUID.randomUUID().toString();
    List<TaskResult> perTask;
    try {
      perTask =
          rows.queryExecution()
              .toRdd()
              .toJavaRDD()
              .mapPartitionsWithIndex(
                  (index, iterator) ->
                      List.of(
                              writeTask(
                                  broadcast.value(), layoutOf, inputType, operationId, index,
                                  iterator))
                          .iterator(),
                  false)
              .collect();
    } finally {
      broadcast.destroy();
    }
    Map<String, List<DataFile>> files = new HashMap<>();
    Map<Group, long[]> groups = new HashMap<>();
    Set<Source> sources = new HashSet<>();
    for (TaskResult task : perTask) {
      for (Written written : task.files) {
        files.computeIfAbsent(written.table, name -> new ArrayList<>()).add(written.file);
      }
      task.groups.forEach((group, counts) -> groups.merge(group, counts, Counts::merge));
      sources.addAll(task.sources);
    }
    return new IcebergBatchWrite(files, groups, sources);
  }

  /** The tables that got files. */
  public List<String> tables() {
    return new ArrayList<>(filesByTable.keySet());
  }

  /** Rows written for {@code name}. */
  public long rows(String name) {
    return filesByTable.getOrDefault(name, List.of()).stream().mapToLong(DataFile::recordCount).sum();
  }

  /**
   * The batch's counts as JSON (one string: a py4j call per value would cost more than the
   * batch): {@code {"groups": [[table, day, topic, partition, rows, minOffset, maxOffset,
   * maxEventMs or null], ...], "sources": [[table, topic, schema, table], ...]}}.
   */
  public String countsJson() {
    return JsonUtil.generate(
        generator -> {
          generator.writeStartObject();
          generator.writeArrayFieldStart("groups");
          for (Map.Entry<Group, long[]> entry : groups.entrySet()) {
            Group group = entry.getKey();
            long[] counts = entry.getValue();
            generator.writeStartArray();
            generator.writeString(group.table());
            if (group.day() == null) {
              generator.writeNull();
            } else {
              generator.writeString(group.day());
            }
            generator.writeString(group.topic());
            generator.writeNumber(group.partition());
            generator.writeNumber(counts[Counts.ROWS]);
            generator.writeNumber(counts[Counts.MIN_OFFSET]);
            generator.writeNumber(counts[Counts.MAX_OFFSET]);
            if (counts[Counts.MAX_EVENT] == Counts.NO_EVENT) {
              generator.writeNull();
            } else {
              generator.writeNumber(counts[Counts.MAX_EVENT]);
            }
            generator.writeEndArray();
          }
          generator.writeEndArray();
          generator.writeArrayFieldStart("sources");
          for (Source source : sources) {
            generator.writeStartArray();
            generator.writeString(source.table());
            generator.writeString(source.topic());
            generator.writeString(source.schema());
            generator.writeString(source.sourceTable());
            generator.writeEndArray();
          }
          generator.writeEndArray();
          generator.writeEndObject();
        },
        false);
  }

  /**
   * Append the files written for {@code name} to {@code table} as ONE snapshot whose summary
   * holds {@code summary}; returns its id. Atomic: if it fails, the table keeps its snapshot.
   *
   * <p>The commit starts from the table's metadata as this process last saw it (its last
   * commit, or its load), not from a fresh read of the metastore: an Iceberg commit begins with
   * a metastore {@code get_table} (and a metadata read if the table changed) that the stream
   * writer, committing to the same tables batch after batch, almost never needs. Validation is
   * unchanged: the metastore swaps the table's metadata location only if it is still the one
   * the commit started from (Iceberg's check before {@code alter_table}, and the metastore's
   * expected-parameter check inside it); if another process committed meanwhile (maintenance,
   * another writer), the commit fails with Iceberg's CommitFailedException, which Iceberg
   * retries from a fresh read, as it retries any lost race. Manifests are merged on the commit
   * as before ({@code newAppend()}: measured, a fast append saved nothing per commit here, and
   * merging keeps the manifests readers open bounded between maintenance runs).
   */
  public long commit(String name, Table table, Map<String, String> summary) {
    AppendFiles append = startingFromLastSeen(table).newAppend();
    for (DataFile file : filesByTable.getOrDefault(name, List.of())) {
      append.appendFile(file);
    }
    summary.forEach(append::set);
    append.commit();
    return table.currentSnapshot().snapshotId();
  }

  /**
   * {@code table} whose next commit's first refresh is its current metadata (see {@link
   * #commit}); every later refresh (a retry, the one after the commit) reads the metastore.
   * Only a plain catalog table: any other (a transaction's table) is returned as it is.
   */
  public static Table startingFromLastSeen(Table table) {
    if (!(table instanceof BaseTable)
        || !(((BaseTable) table).operations() instanceof BaseMetastoreTableOperations)) {
      return table;
    }
    TableOperations operations = ((BaseTable) table).operations();
    return new BaseTable(new FirstRefreshFromCurrent(operations), table.name());
  }

  /** Table operations whose first {@code refresh()} is {@code current()}; all else delegated. */
  private static final class FirstRefreshFromCurrent extends ForwardingTableOperations {
    private boolean refreshed;

    FirstRefreshFromCurrent(TableOperations delegate) {
      super(delegate);
    }

    @Override
    public TableMetadata refresh() {
      if (!refreshed) {
        refreshed = true;
        // current() itself reads the metastore when a refresh was requested (after a commit
        // whose refresh failed): only metadata this process saw as current is started from.
        return current();
      }
      return super.refresh();
    }

    @Override
    public void commit(TableMetadata base, TableMetadata metadata) {
      CrashPoint.reach(CrashPoint.DURING_COMMIT); // tests only: killed inside the commit
      FaultPoint.reach(FaultPoint.RAW_COMMIT, metadata); // tests only: the commit fails
      super.commit(base, metadata);
    }
  }

  private static boolean sameTypes(StructType left, StructType right) {
    StructField[] a = left.fields();
    StructField[] b = right.fields();
    if (a.length != b.length) {
      return false;
    }
    for (int i = 0; i < a.length; i++) {
      // Names and types; nullability aside (Spark marks expressions' results nullable).
      if (!a[i].name().equals(b[i].name()) || !a[i].dataType().sameType(b[i].dataType())) {
        return false;
      }
    }
    return true;
  }

  private static TaskResult writeTask(
      Map<String, Table> tables,
      Map<String, Integer> layoutOf,
      StructType inputType,
      String operationId,
      int partitionId,
      Iterator<InternalRow> rows)
      throws IOException {
    TaskContext task = TaskContext.get();
    long taskId = task == null ? 0 : task.taskAttemptId();
    StructField[] fields = inputType.fields();
    Map<String, TableWriters> writers = new HashMap<>();
    // A row's table name, as Spark holds it, to its Java name and writers: looked up by the
    // name's bytes, so that a row costs no String (most rows name the same table).
    Map<UTF8String, Target> targets = new HashMap<>();
    Target last = null;
    TaskResult result = new TaskResult();
    try {
      while (rows.hasNext()) {
        InternalRow row = rows.next();
        UTF8String rowName = row.getUTF8String(TABLE);
        if (last == null || !last.bytes.equals(rowName)) {
          last = targets.get(rowName);
          if (last == null) {
            // A copy: the row's string points into the row, which the next row may reuse.
            last = new Target(rowName.clone(), rowName.toString());
            targets.put(last.bytes, last);
          }
        }
        Target target = last;
        result.count(target.name, row);
        if (!row.getBoolean(WRITE)) {
          continue;
        }
        if (target.writers == null) {
          if (target.unknown) {
            continue;
          }
          Table table = tables.get(target.name);
          if (table == null) {
            target.unknown = true;
            continue; // counted only: a table the driver creates before it writes it
          }
          int layout = layoutOf.get(target.name);
          StructType rowType = (StructType) fields[layout].dataType();
          target.writers =
              new TableWriters(
                  target.name, table, rowType, layout, operationId, partitionId, taskId);
          writers.put(target.name, target.writers);
        }
        target.writers.write(row, result.files);
      }
      result.endCounting();
      List<Callable<Written>> closes = new ArrayList<>();
      for (TableWriters tableWriters : writers.values()) {
        tableWriters.closesOfAll(closes);
      }
      result.files.addAll(closeConcurrently(closes));
    } catch (IOException | RuntimeException e) {
      for (TableWriters tableWriters : writers.values()) {
        tableWriters.abandon();
      }
      throw e;
    }
    return result;
  }

  /**
   * Runs {@code closes} {@link #CONCURRENT_CLOSES} at a time and returns their files, in
   * order. Every close has ended (done or failed) when this returns or throws, unless the task
   * is interrupted (killed: the closes still running are interrupted). If any failed, its
   * error is thrown (the earliest in {@code closes}' order), the task fails and none of its
   * files is committed (the driver commits only after every task succeeded); the caller
   * abandons whatever is still open.
   */
  private static List<Written> closeConcurrently(List<Callable<Written>> closes)
      throws IOException {
    List<Written> written = new ArrayList<>(closes.size());
    if (closes.size() <= 1) {
      for (Callable<Written> close : closes) {
        written.add(unchecked(close));
      }
      return written;
    }
    ExecutorService pool =
        Executors.newFixedThreadPool(
            Math.min(CONCURRENT_CLOSES, closes.size()),
            runnable -> {
              Thread thread = new Thread(runnable, "cdc-close-files");
              thread.setDaemon(true);
              return thread;
            });
    try {
      // invokeAll returns once every close has ended, failed or not.
      List<Future<Written>> results = pool.invokeAll(closes);
      for (Future<Written> result : results) {
        written.add(result.get());
      }
      return written;
    } catch (InterruptedException e) {
      // The task was killed: invokeAll cancelled the closes still running, without waiting for
      // them. Wait until they end before the caller abandons the same writers (a Parquet
      // writer is not thread-safe), bounded: the task is dying and commits nothing.
      pool.shutdownNow();
      awaitEnd(pool, CLOSE_END_WAIT_MS);
      Thread.currentThread().interrupt();
      InterruptedIOException interrupted = new InterruptedIOException("closing the task's files");
      interrupted.initCause(e);
      throw interrupted;
    } catch (ExecutionException e) {
      Throwable cause = e.getCause();
      if (cause instanceof IOException) {
        throw (IOException) cause;
      }
      if (cause instanceof RuntimeException) {
        throw (RuntimeException) cause;
      }
      if (cause instanceof Error) {
        throw (Error) cause;
      }
      throw new IOException(cause);
    } finally {
      pool.shutdownNow();
    }
  }

  /** Waits up to {@code waitMs} for {@code pool}'s threads to end, through interrupts. */
  private static void awaitEnd(ExecutorService pool, long waitMs) {
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(waitMs);
    while (true) {
      long left = deadline - System.nanoTime();
      if (left <= 0) {
        return;
      }
      try {
        if (pool.awaitTermination(left, TimeUnit.NANOSECONDS)) {
          return;
        }
      } catch (InterruptedException again) {
        // Still dying: keep waiting for the closes, the caller restores the interrupt.
      }
    }
  }

  private static Written unchecked(Callable<Written> close) throws IOException {
    try {
      return close.call();
    } catch (IOException | RuntimeException e) {
      throw e;
    } catch (Exception e) {
      throw new IOException(e);
    }
  }

  /** A table × day × Kafka partition of the batch. */
  private record Group(String table, String day, String topic, int partition)
      implements Serializable {}

  /** A source table (topic, schema, table) routed to a table. */
  private record Source(String table, String topic, String schema, String sourceTable)
      implements Serializable {}

  /** A group's counts: rows, smallest and largest offset, newest event time. */
  private static final class Counts {
    static final int ROWS = 0;
    static final int MIN_OFFSET = 1;
    static final int MAX_OFFSET = 2;
    static final int MAX_EVENT = 3;
    static final long NO_EVENT = Long.MIN_VALUE;

    private Counts() {}

    static long[] merge(long[] a, long[] b) {
      a[ROWS] += b[ROWS];
      a[MIN_OFFSET] = Math.min(a[MIN_OFFSET], b[MIN_OFFSET]);
      a[MAX_OFFSET] = Math.max(a[MAX_OFFSET], b[MAX_OFFSET]);
      a[MAX_EVENT] = Math.max(a[MAX_EVENT], b[MAX_EVENT]);
      return a;
    }
  }

  /** A table name of the task's rows: its Java string and its writers (null: none yet). */
  private static final class Target {
    final UTF8String bytes;
    final String name;
    TableWriters writers;
    boolean unknown; // not a table of this write: its rows are counted only

    Target(UTF8String bytes, String name) {
      this.bytes = bytes;
      this.name = name;
    }
  }

  /**
   * A group's key while a task counts: the day and topic as Spark holds them (no String per
   * row); the table's name is one String per table ({@link Target}), compared by identity.
   */
  private record RowGroup(String table, UTF8String day, UTF8String topic, int partition) {
    boolean holds(String rowTable, UTF8String rowDay, UTF8String rowTopic, int rowPartition) {
      return table == rowTable
          && partition == rowPartition
          && (day == null ? rowDay == null : day.equals(rowDay))
          && topic.equals(rowTopic);
    }

    RowGroup copy() {
      return new RowGroup(table, day == null ? null : day.clone(), topic.clone(), partition);
    }
  }

  /** A source table routed to a table while a task counts (see {@link RowGroup}). */
  private record RowSource(String table, UTF8String topic, UTF8String schema, UTF8String name) {
    boolean holds(String rowTable, UTF8String rowTopic, UTF8String rowSchema, UTF8String rowName) {
      return table == rowTable
          && topic.equals(rowTopic)
          && schema.equals(rowSchema)
          && name.equals(rowName);
    }

    RowSource copy() {
      return new RowSource(table, topic.clone(), schema.clone(), name.clone());
    }
  }

  /** A group's counts while a task counts, with its kept key. */
  private static final class Counted {
    final RowGroup group;
    final long[] counts = {0, Long.MAX_VALUE, Long.MIN_VALUE, Counts.NO_EVENT};

    Counted(RowGroup group) {
      this.group = group;
    }
  }

  /** What one task hands the driver: its files and its counts. */
  private static final class TaskResult implements Serializable {
    private static final long serialVersionUID = 1L;
    final List<Written> files = new ArrayList<>();
    final Map<Group, long[]> groups = new HashMap<>();
    final Set<Source> sources = new HashSet<>();
    // While the task counts: keyed by copies of Spark's strings (no Java String per row),
    // each key kept with its counts (a lookup's key holds the row's own strings, which the
    // next row may overwrite); the last row's group and source are remembered, since
    // consecutive rows mostly share them (the writer clusters a task's rows by table and
    // day). Turned into groups and sources by endCounting.
    private transient Map<RowGroup, Counted> counting = new HashMap<>();
    private transient Map<RowSource, RowSource> routed = new HashMap<>();
    private transient RowGroup lastGroup;
    private transient long[] lastCounts;
    private transient RowSource lastSource;

    void count(String table, InternalRow row) {
      UTF8String day = row.isNullAt(DAY) ? null : row.getUTF8String(DAY);
      UTF8String topic = row.getUTF8String(TOPIC);
      int partition = row.getInt(PARTITION);
      long offset = row.getLong(OFFSET);
      long event = row.isNullAt(EVENT_MS) ? Counts.NO_EVENT : row.getLong(EVENT_MS);
      if (lastGroup == null || !lastGroup.holds(table, day, topic, partition)) {
        RowGroup probe = new RowGroup(table, day, topic, partition);
        Counted counted = counting.get(probe);
        if (counted == null) {
          // The row's strings point into the row, which the next row may reuse: copied.
          counted = new Counted(probe.copy());
          counting.put(counted.group, counted);
        }
        lastGroup = counted.group;
        lastCounts = counted.counts;
      }
      long[] counts = lastCounts;
      counts[Counts.ROWS]++;
      counts[Counts.MIN_OFFSET] = Math.min(counts[Counts.MIN_OFFSET], offset);
      counts[Counts.MAX_OFFSET] = Math.max(counts[Counts.MAX_OFFSET], offset);
      counts[Counts.MAX_EVENT] = Math.max(counts[Counts.MAX_EVENT], event);
      if (!row.isNullAt(SOURCE_SCHEMA) && !row.isNullAt(SOURCE_TABLE)) {
        UTF8String schema = row.getUTF8String(SOURCE_SCHEMA);
        UTF8String name = row.getUTF8String(SOURCE_TABLE);
        if (lastSource == null || !lastSource.holds(table, topic, schema, name)) {
          RowSource probe = new RowSource(table, topic, schema, name);
          RowSource kept = routed.get(probe);
          if (kept == null) {
            kept = probe.copy();
            routed.put(kept, kept);
          }
          lastSource = kept;
        }
      }
    }

    /** The counts as the driver takes them (Java strings); after the task's last row. */
    void endCounting() {
      counting.forEach(
          (group, counted) ->
              groups.put(
                  new Group(
                      group.table(),
                      group.day() == null ? null : group.day().toString(),
                      group.topic().toString(),
                      group.partition()),
                  counted.counts));
      for (RowSource source : routed.keySet()) {
        sources.add(
            new Source(
                source.table(),
                source.topic().toString(),
                source.schema().toString(),
                source.name().toString()));
      }
      counting = new HashMap<>();
      routed = new HashMap<>();
      lastGroup = null;
      lastCounts = null;
      lastSource = null;
    }
  }

  /** One table's open files in one task: one per partition (fanout), rolled at target size. */
  private static final class TableWriters {
    private final String name;
    private final Table table;
    private final StructType sparkType;
    private final PartitionSpec spec;
    private final PartitionKey key;
    private final RowAsStruct wrapper;
    private final OutputFileFactory files;
    private final long targetBytes;
    private final StructLikeMap<Open> open;
    private final int layout;
    private final int width;
    private final Map<String, String> parquetSettings;
    // The last row's file and its partition's source values (see sameSources).
    private final int[] sourcePositions;
    private final DataType[] sourceTypes;
    private final Object[] lastSources;
    private Open last;

    TableWriters(
        String name,
        Table table,
        StructType sparkType,
        int layout,
        String operationId,
        int partitionId,
        long taskId) {
      this.name = name;
      this.table = table;
      this.sparkType = sparkType;
      this.spec = table.spec();
      this.key = new PartitionKey(spec, table.schema());
      this.wrapper = new RowAsStruct(table.schema().asStruct(), sparkType);
      this.files =
          OutputFileFactory.builderFor(table, partitionId, taskId)
              .format(FileFormat.PARQUET)
              .operationId(operationId)
              .build();
      this.targetBytes =
          PropertyUtil.propertyAsLong(
              table.properties(),
              TableProperties.WRITE_TARGET_FILE_SIZE_BYTES,
              TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT);
      this.open = StructLikeMap.create(spec.partitionType());
      this.layout = layout;
      this.width = sparkType.fields().length;
      this.parquetSettings = parquetSettings(table);
      this.sourcePositions = sourcePositions(table, spec);
      int sources = sourcePositions == null ? 0 : sourcePositions.length;
      this.sourceTypes = new DataType[sources];
      for (int i = 0; i < sources; i++) {
        sourceTypes[i] = sparkType.fields()[sourcePositions[i]].dataType();
      }
      this.lastSources = new Object[sources];
    }

    /** The Parquet settings of this writer's files that the table does not set itself. */
    private static Map<String, String> parquetSettings(Table table) {
      Map<String, String> settings = new HashMap<>();
      settings.put(DICTIONARY_PROPERTY, "false");
      MetricsConfig metrics = MetricsConfig.forTable(table);
      for (Types.NestedField column : table.schema().columns()) {
        if (metrics.columnMode(column.name()) instanceof MetricsModes.None) {
          settings.put(STATS_PROPERTY_PREFIX + column.name(), "false");
        }
      }
      settings.keySet().removeAll(table.properties().keySet());
      return settings;
    }

    void write(InternalRow input, List<Written> done) throws IOException {
      InternalRow row = input.getStruct(layout, width);
      Open current = last;
      if (current == null || !sameSources(row)) {
        key.partition(wrapper.wrap(row));
        current = open.get(key);
        if (current == null) {
          PartitionKey copy = key.copy();
          current = new Open(newWriter(copy), copy);
          open.put(copy, current);
        }
        keepSources(row);
        last = current;
      }
      current.writer.write(row);
      current.rows++;
      if (current.rows % ROWS_BETWEEN_SIZE_CHECKS == 0 && current.writer.length() >= targetBytes) {
        current.writer.close();
        done.add(new Written(name, current.writer.toDataFile()));
        open.remove(current.partition);
        last = null;
      }
    }

    /**
     * Whether {@code row}'s partition source values are the last partitioned row's: then its
     * partition is too (a partition is a function of them), without computing its key (Java
     * strings of the row's values) and looking it up. Values compare as Spark holds them.
     */
    private boolean sameSources(InternalRow row) {
      if (sourcePositions == null) {
        return false;
      }
      for (int i = 0; i < sourcePositions.length; i++) {
        int pos = sourcePositions[i];
        Object kept = lastSources[i];
        if (row.isNullAt(pos)) {
          if (kept != null) {
            return false;
          }
        } else if (kept == null || !kept.equals(row.get(pos, sourceTypes[i]))) {
          return false;
        }
      }
      return true;
    }

    private void keepSources(InternalRow row) {
      if (sourcePositions == null) {
        return;
      }
      for (int i = 0; i < sourcePositions.length; i++) {
        int pos = sourcePositions[i];
        Object value = row.isNullAt(pos) ? null : row.get(pos, sourceTypes[i]);
        // A copy: a row's string points into the row, which the next row may reuse.
        lastSources[i] = value instanceof UTF8String ? ((UTF8String) value).clone() : value;
      }
    }

    /**
     * The positions in a table's row of its partition's source columns; null when one is not
     * a top-level column (then every row's key is computed).
     */
    private static int[] sourcePositions(Table table, PartitionSpec spec) {
      List<Types.NestedField> columns = table.schema().columns();
      int[] positions = new int[spec.fields().size()];
      for (int i = 0; i < positions.length; i++) {
        int sourceId = spec.fields().get(i).sourceId();
        positions[i] = -1;
        for (int pos = 0; pos < columns.size(); pos++) {
          if (columns.get(pos).fieldId() == sourceId) {
            positions[i] = pos;
          }
        }
        if (positions[i] < 0) {
          return null;
        }
      }
      return positions;
    }

    private DataWriter<InternalRow> newWriter(StructLike partition) throws IOException {
      EncryptedOutputFile file =
          spec.isUnpartitioned() ? files.newOutputFile() : files.newOutputFile(spec, partition);
      Parquet.DataWriteBuilder builder = Parquet.writeData(file).forTable(table);
      parquetSettings.forEach(builder::set);
      return builder
          .withSpec(spec)
          .withPartition(spec.isUnpartitioned() ? null : partition)
          .createWriterFunc(type -> SparkParquetWriters.buildWriter(sparkType, type))
          .overwrite()
          .build();
    }

    /** Adds the close of each open file to {@code closes}; each gives the file it wrote. */
    void closesOfAll(List<Callable<Written>> closes) {
      for (Open current : open.values()) {
        closes.add(
            () -> {
              current.writer.close();
              return new Written(name, current.writer.toDataFile());
            });
      }
    }

    void abandon() {
      for (Open current : open.values()) {
        try {
          current.writer.close();
        } catch (IOException | RuntimeException ignored) {
          // The task fails anyway with the first error; its files are never committed.
        }
      }
      open.clear();
      last = null;
    }
  }

  private static final class Open {
    final DataWriter<InternalRow> writer;
    final PartitionKey partition;
    long rows;

    Open(DataWriter<InternalRow> writer, PartitionKey partition) {
      this.writer = writer;
      this.partition = partition;
    }
  }

  /** A file written for a table, as a task hands it to the driver. */
  private static final class Written implements Serializable {
    private static final long serialVersionUID = 1L;
    final String table;
    final DataFile file;

    Written(String table, DataFile file) {
      this.table = table;
      this.file = file;
    }
  }

  /**
   * A Spark row as Iceberg's StructLike, for the partition key only (Iceberg's own wrapper is
   * package-private): strings become Java strings, other values pass as Spark holds them, which
   * is Iceberg's representation of the partition source values of the raw tables (string, int,
   * long, date, timestamp, boolean) that its identity and bucket transforms take.
   */
  private static final class RowAsStruct implements StructLike {
    private final Type[] types;
    private final DataType[] sparkTypes;
    private InternalRow row;

    RowAsStruct(Types.StructType icebergType, StructType sparkType) {
      this.types = icebergType.fields().stream().map(Types.NestedField::type).toArray(Type[]::new);
      this.sparkTypes =
          java.util.Arrays.stream(sparkType.fields()).map(StructField::dataType).toArray(DataType[]::new);
    }

    RowAsStruct wrap(InternalRow value) {
      this.row = value;
      return this;
    }

    @Override
    public int size() {
      return types.length;
    }

    @Override
    public <T> T get(int pos, Class<T> javaClass) {
      if (row.isNullAt(pos)) {
        return null;
      }
      if (types[pos].typeId() == Type.TypeID.STRING) {
        return javaClass.cast(row.getUTF8String(pos).toString());
      }
      return javaClass.cast(row.get(pos, sparkTypes[pos]));
    }

    @Override
    public <T> void set(int pos, T value) {
      throw new UnsupportedOperationException("read-only");
    }
  }
}
