package io.cdcmirror.spark;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.iceberg.BaseTable;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.FileFormat;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.PartitionKey;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.ReplacePartitions;
import org.apache.iceberg.Schema;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.data.GenericRecord;
import org.apache.iceberg.data.Record;
import org.apache.iceberg.data.parquet.GenericParquetWriter;
import org.apache.iceberg.encryption.EncryptedOutputFile;
import org.apache.iceberg.exceptions.CleanableFailure;
import org.apache.iceberg.exceptions.CommitStateUnknownException;
import org.apache.iceberg.io.DataWriter;
import org.apache.iceberg.io.OutputFileFactory;
import org.apache.iceberg.parquet.Parquet;
import org.apache.iceberg.types.Type;
import org.apache.iceberg.types.Types;

/**
 * One row that replaces its partition of an Iceberg table, written and committed on the driver
 * through Iceberg's Java API: the stream writer's progress row, after each batch.
 *
 * <p>Why: Spark's DataFrame write of that one row ({@code writeTo(t).overwritePartitions()}) is a
 * whole Spark job, a query analysis and a table load: 0.4-0.5 s of a steady 200k-row batch, 1.1-1.3
 * s in a first run (bench/results/2026-11-27-writer-quiet-s17). Here the row is one Parquet file
 * written by Iceberg's generic writer ({@link GenericParquetWriter}, the table's own write
 * properties and metrics) into the row's partition folder, then committed as ONE snapshot by
 * Iceberg's {@link ReplacePartitions}, the operation Spark's {@code overwritePartitions} commits:
 * the partition's earlier files are replaced, other partitions are untouched.
 *
 * <p>Concurrency is what Spark's dynamic overwrite has without an isolation level (none is set):
 * no conflict validation; the commit starts from a fresh read of the table's metadata and, if
 * another process committed before its metastore swap (Iceberg's compare-and-swap of the
 * metadata location), Iceberg retries it from a fresh read, up to the table's {@code
 * commit.retry.*} settings. A retry replaces this row's partition only, so another writer's
 * commit to its own partition is kept.
 */
public final class ProgressCommit {
  /** What precedes each item of a list given as one text ({@link #fromListText}). */
  public static final char LIST_SEPARATOR = '\u001f';

  private ProgressCommit() {}

  /**
   * Replace the partition of {@code table} that {@code row} falls in with that one row, as ONE
   * snapshot whose summary holds {@code summary}. {@code row}: a value per column name (every
   * key a top-level column; a column left out is null): a String for a string column, a Number
   * for an int or long one, a List of Strings, or one text of them ({@link #fromListText}), for
   * a list of strings.
   * Atomic: if it fails, the table keeps its snapshot and the written file is deleted when
   * nothing can reference it: the failure came before any metastore swap was tried, or Iceberg
   * says the commit did not happen ({@link CleanableFailure}, Iceberg's own rule for its
   * manifests). Otherwise (e.g. {@link CommitStateUnknownException}, or an error Hive's commit
   * rethrew after a status check that may have missed the swap) the file may be the
   * partition's row, so it stays; maintenance's orphan removal deletes it if it is not.
   */
  public static void replacePartition(
      Table table, Map<String, Object> row, Map<String, String> summary) throws IOException {
    Schema schema = table.schema();
    PartitionSpec spec = table.spec();
    Record record = record(schema, row);
    PartitionKey partition = new PartitionKey(spec, schema);
    partition.partition(record);
    OutputFileFactory files =
        OutputFileFactory.builderFor(table, 0, 0)
            .format(FileFormat.PARQUET)
            .operationId(UUID.randomUUID().toString())
            .build();
    EncryptedOutputFile file =
        spec.isUnpartitioned() ? files.newOutputFile() : files.newOutputFile(spec, partition);
    AtomicBoolean swapTried = new AtomicBoolean();
    try {
      DataWriter<Record> writer =
          Parquet.writeData(file)
              .forTable(table)
              .withSpec(spec)
              .withPartition(spec.isUnpartitioned() ? null : partition)
              .createWriterFunc(GenericParquetWriter::create)
              .overwrite()
              .build();
      try {
        writer.write(record);
      } finally {
        writer.close();
      }
      ReplacePartitions replace =
          swapsRecorded(table, swapTried).newReplacePartitions().addFile(writer.toDataFile());
      summary.forEach(replace::set);
      replace.commit();
    } catch (IOException | RuntimeException failed) {
      if (swapTried.get() && !(failed instanceof CleanableFailure)) {
        throw failed; // the commit may have succeeded: the file may be the partition's row
      }
      // Nothing references the file: without this, every failed commit (a retry budget spent
      // in a long race, a table dropped meanwhile) would leave a Parquet file in the
      // table's folder until maintenance's orphan removal, days later.
      try {
        table.io().deleteFile(file.encryptingOutputFile());
      } catch (RuntimeException cleanup) {
        failed.addSuppressed(cleanup);
      }
      throw failed;
    }
  }

  /**
   * {@code table} whose metastore swaps (its operations' commit) set {@code tried}, and where a
   * commit reaches {@link FaultPoint#PROGRESS_COMMIT} (tests only).
   */
  private static Table swapsRecorded(Table table, AtomicBoolean tried) {
    if (!(table instanceof HasTableOperations)) {
      tried.set(true); // cannot tell: as if tried, the file is kept on failure
      return table;
    }
    return new BaseTable(
        new ForwardingTableOperations(((HasTableOperations) table).operations()) {
          @Override
          public void commit(TableMetadata base, TableMetadata metadata) {
            tried.set(true);
            FaultPoint.reach(FaultPoint.PROGRESS_COMMIT, metadata); // tests only: fails
            super.commit(base, metadata);
          }
        },
        table.name());
  }

  /**
   * The strings of a list given as one text, each preceded by {@link #LIST_SEPARATOR} ("" is
   * the empty list): the caller (Python, through py4j) passes a list of any length in one call,
   * where building a Java list costs a call per item (730 ready days: ~23 ms a commit).
   */
  static List<String> fromListText(String text) {
    if (text.isEmpty()) {
      return new ArrayList<>();
    }
    if (text.charAt(0) != LIST_SEPARATOR) {
      throw new IllegalArgumentException("a list's text starts with U+001F, not " + text);
    }
    return new ArrayList<>(
        Arrays.asList(text.substring(1).split(String.valueOf(LIST_SEPARATOR), -1)));
  }

  /** {@code row} as a record of {@code schema}; IllegalArgumentException if a value fits none. */
  private static Record record(Schema schema, Map<String, Object> row) {
    Set<String> unknown = new HashSet<>(row.keySet());
    GenericRecord record = GenericRecord.create(schema);
    for (Types.NestedField column : schema.columns()) {
      unknown.remove(column.name());
      record.setField(column.name(), value(column, row.get(column.name())));
    }
    if (!unknown.isEmpty()) {
      throw new IllegalArgumentException(
          "the table " + schema.asStruct() + " has no columns " + unknown);
    }
    return record;
  }

  private static Object value(Types.NestedField column, Object given) {
    if (given == null) {
      return null;
    }
    Type type = column.type();
    switch (type.typeId()) {
      case STRING:
        if (given instanceof String) {
          return given;
        }
        break;
      case LONG:
        if (given instanceof Number) {
          return ((Number) given).longValue();
        }
        break;
      case INTEGER:
        if (given instanceof Number) {
          return Math.toIntExact(((Number) given).longValue());
        }
        break;
      case LIST:
        if (given instanceof String
            && type.asListType().elementType().typeId() == Type.TypeID.STRING) {
          return fromListText((String) given);
        }
        if (given instanceof List
            && type.asListType().elementType().typeId() == Type.TypeID.STRING
            && ((List<?>) given).stream().allMatch(e -> e == null || e instanceof String)) {
          return new ArrayList<>((List<?>) given);
        }
        break;
      default:
        break;
    }
    throw new IllegalArgumentException(
        "the column " + column.name() + " (" + type + ") cannot hold a "
            + given.getClass().getName());
  }
}
