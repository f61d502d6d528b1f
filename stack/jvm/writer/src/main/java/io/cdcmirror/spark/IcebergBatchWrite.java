package io.cdcmirror.spark;

import java.io.IOException;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.apache.iceberg.AppendFiles;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.FileFormat;
import org.apache.iceberg.PartitionKey;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.SerializableTable;
import org.apache.iceberg.StructLike;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableProperties;
import org.apache.iceberg.encryption.EncryptedOutputFile;
import org.apache.iceberg.io.DataWriter;
import org.apache.iceberg.io.OutputFileFactory;
import org.apache.iceberg.parquet.Parquet;
import org.apache.iceberg.spark.SparkSchemaUtil;
import org.apache.iceberg.spark.data.SparkParquetWriters;
import org.apache.iceberg.types.Type;
import org.apache.iceberg.types.Types;
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

/**
 * The stream writer's micro-batch into many Iceberg tables: the data files of EVERY table in
 * ONE Spark job, then one commit per table through Iceberg's Java API.
 *
 * <p>Why: Spark's DataFrame write ({@code writeTo(t).append()}) is one Spark job, one query
 * analysis and one table load per table; for a batch over 200 tables those per-table costs, not
 * the rows, were most of the batch. Here each task writes its rows of every table into that
 * table's data folder with Iceberg's own Parquet writer for Spark rows ({@code
 * SparkParquetWriters}, what Iceberg's Spark sink uses), keeping one file open per table and
 * partition (a fanout write, rolled at the table's {@code write.target-file-size-bytes}), and
 * hands the {@link DataFile}s back to the driver. {@link #commit} then appends a table's files
 * as one snapshot with the given summary properties: the exactly-once commit, as before, one per
 * table, and commits to different tables may run at once (they are independent).
 *
 * <p>Input: a Dataset whose column 0 is the table's name (a key of {@code tables}) and column 1
 * a struct of exactly that table's columns in its schema's order and Spark types; all tables of
 * one call share that struct type. Files of a failed job or commit are left unreferenced (the
 * table is unchanged); orphan-file removal deletes them.
 */
public final class IcebergBatchWrite implements Serializable {
  private static final long serialVersionUID = 1L;
  // Writers check their size every so many rows (as Iceberg's rolling writer does): the
  // Parquet writer's size estimate is not free.
  private static final int ROWS_BETWEEN_SIZE_CHECKS = 1000;

  private final Map<String, List<DataFile>> filesByTable;

  private IcebergBatchWrite(Map<String, List<DataFile>> filesByTable) {
    this.filesByTable = filesByTable;
  }

  /** Write the data files of {@code rows} (see the class) in one Spark job; nothing committed. */
  public static IcebergBatchWrite write(Dataset<Row> rows, Map<String, Table> tables) {
    StructType rowType = (StructType) rows.schema().fields()[1].dataType();
    Map<String, Table> shipped = new HashMap<>();
    for (Map.Entry<String, Table> entry : tables.entrySet()) {
      Table table = entry.getValue();
      StructType expected = SparkSchemaUtil.convert(table.schema());
      if (!sameTypes(expected, rowType)) {
        throw new IllegalArgumentException(
            "the rows for " + table.name() + " have the columns " + rowType.simpleString()
                + " but the table has " + expected.simpleString());
      }
      shipped.put(entry.getKey(), SerializableTable.copyOf(table));
    }
    JavaSparkContext context = JavaSparkContext.fromSparkContext(rows.sparkSession().sparkContext());
    Broadcast<Map<String, Table>> broadcast = context.broadcast(shipped);
    String operationId = UUID.randomUUID().toString();
    List<List<Written>> perTask;
    try {
      perTask =
          rows.queryExecution()
              .toRdd()
              .toJavaRDD()
              .mapPartitionsWithIndex(
                  (index, iterator) ->
                      List.of(writeTask(broadcast.value(), rowType, operationId, index, iterator))
                          .iterator(),
                  false)
              .collect();
    } finally {
      broadcast.destroy();
    }
    Map<String, List<DataFile>> files = new HashMap<>();
    for (List<Written> task : perTask) {
      for (Written written : task) {
        files.computeIfAbsent(written.table, name -> new ArrayList<>()).add(written.file);
      }
    }
    return new IcebergBatchWrite(files);
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
   * Append the files written for {@code name} to {@code table} as ONE snapshot whose summary
   * holds {@code summary}; returns its id. Atomic: if it fails, the table keeps its snapshot.
   */
  public long commit(String name, Table table, Map<String, String> summary) {
    AppendFiles append = table.newAppend();
    for (DataFile file : filesByTable.getOrDefault(name, List.of())) {
      append.appendFile(file);
    }
    summary.forEach(append::set);
    append.commit();
    return table.currentSnapshot().snapshotId();
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

  private static List<Written> writeTask(
      Map<String, Table> tables,
      StructType rowType,
      String operationId,
      int partitionId,
      Iterator<InternalRow> rows)
      throws IOException {
    TaskContext task = TaskContext.get();
    long taskId = task == null ? 0 : task.taskAttemptId();
    int width = rowType.fields().length;
    Map<String, TableWriters> writers = new HashMap<>();
    List<Written> done = new ArrayList<>();
    try {
      while (rows.hasNext()) {
        InternalRow row = rows.next();
        String name = row.getUTF8String(0).toString();
        TableWriters tableWriters = writers.get(name);
        if (tableWriters == null) {
          Table table = tables.get(name);
          if (table == null) {
            throw new IllegalArgumentException("a row for " + name + ", which is not written");
          }
          tableWriters = new TableWriters(name, table, rowType, operationId, partitionId, taskId);
          writers.put(name, tableWriters);
        }
        tableWriters.write(row.getStruct(1, width), done);
      }
      for (TableWriters tableWriters : writers.values()) {
        tableWriters.closeAll(done);
      }
    } catch (IOException | RuntimeException e) {
      for (TableWriters tableWriters : writers.values()) {
        tableWriters.abandon();
      }
      throw e;
    }
    return done;
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

    TableWriters(
        String name,
        Table table,
        StructType sparkType,
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
    }

    void write(InternalRow row, List<Written> done) throws IOException {
      key.partition(wrapper.wrap(row));
      Open current = open.get(key);
      if (current == null) {
        PartitionKey copy = key.copy();
        current = new Open(newWriter(copy));
        open.put(copy, current);
      }
      current.writer.write(row);
      current.rows++;
      if (current.rows % ROWS_BETWEEN_SIZE_CHECKS == 0 && current.writer.length() >= targetBytes) {
        current.writer.close();
        done.add(new Written(name, current.writer.toDataFile()));
        open.remove(key);
      }
    }

    private DataWriter<InternalRow> newWriter(StructLike partition) throws IOException {
      EncryptedOutputFile file =
          spec.isUnpartitioned() ? files.newOutputFile() : files.newOutputFile(spec, partition);
      return Parquet.writeData(file)
          .forTable(table)
          .withSpec(spec)
          .withPartition(spec.isUnpartitioned() ? null : partition)
          .createWriterFunc(type -> SparkParquetWriters.buildWriter(sparkType, type))
          .overwrite()
          .build();
    }

    void closeAll(List<Written> done) throws IOException {
      for (Open current : open.values()) {
        current.writer.close();
        done.add(new Written(name, current.writer.toDataFile()));
      }
      open.clear();
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
    }
  }

  private static final class Open {
    final DataWriter<InternalRow> writer;
    long rows;

    Open(DataWriter<InternalRow> writer) {
      this.writer = writer;
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
   * is Iceberg's representation for the identity partitions of the raw tables (string, int,
   * long, date, timestamp, boolean).
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
