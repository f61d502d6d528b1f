package io.cdcmirror.parquet;

import java.io.IOException;
import java.util.List;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.parquet.column.statistics.Statistics;
import org.apache.parquet.format.converter.ParquetMetadataConverter;
import org.apache.parquet.hadoop.ParquetFileReader;
import org.apache.parquet.hadoop.metadata.BlockMetaData;
import org.apache.parquet.hadoop.metadata.ColumnChunkMetaData;
import org.apache.parquet.io.api.Binary;

/**
 * Row counts and column ranges of Parquet files, from their footers only.
 *
 * <p>The stream writer names each staged file by the Kafka offsets it holds and advances its
 * watermarks by the newest event in it. Every Parquet row group records its row count and the
 * minimum and maximum of each column, so the footer answers that without reading any rows
 * (reading the columns back with Spark cost seconds a batch). One call for all the files of a
 * batch: a call from Python is a round trip.
 */
public final class FooterSummary {

  private FooterSummary() {}

  /**
   * One line per file, tab-separated: path, rows, then min and max of each named column over
   * all row groups ("" when a column has no non-null value, or no statistics, in any group).
   * Minimum and maximum are compared as the column's type orders them (numbers, UTF-8 text).
   */
  public static String summarise(Configuration conf, String[] paths, String[] columns)
      throws IOException {
    StringBuilder out = new StringBuilder();
    for (String path : paths) {
      summariseFile(conf, path, columns, out);
    }
    return out.toString();
  }

  private static void summariseFile(
      Configuration conf, String path, String[] columns, StringBuilder out) throws IOException {
    List<BlockMetaData> blocks =
        ParquetFileReader.readFooter(conf, new Path(path), ParquetMetadataConverter.NO_FILTER)
            .getBlocks();
    long rows = 0;
    @SuppressWarnings("unchecked")
    Comparable<Object>[] mins = new Comparable[columns.length];
    @SuppressWarnings("unchecked")
    Comparable<Object>[] maxs = new Comparable[columns.length];
    boolean[] unknown = new boolean[columns.length];
    for (BlockMetaData block : blocks) {
      rows += block.getRowCount();
      for (ColumnChunkMetaData chunk : block.getColumns()) {
        int index = indexOf(columns, chunk.getPath().toDotString());
        if (index < 0) {
          continue;
        }
        Statistics<?> stats = chunk.getStatistics();
        if (stats == null || stats.isEmpty()) {
          // No statistics for a group with rows: its range cannot be known from the footer.
          unknown[index] |= block.getRowCount() > 0;
          continue;
        }
        if (!stats.hasNonNullValue()) {
          continue; // only nulls in this group
        }
        Comparable<Object> min = value(stats.genericGetMin());
        Comparable<Object> max = value(stats.genericGetMax());
        if (mins[index] == null || min.compareTo(mins[index]) < 0) {
          mins[index] = min;
        }
        if (maxs[index] == null || max.compareTo(maxs[index]) > 0) {
          maxs[index] = max;
        }
      }
    }
    out.append(path).append('\t').append(rows);
    for (int i = 0; i < columns.length; i++) {
      if (unknown[i]) {
        throw new IOException(
            path + " has a row group without statistics for " + columns[i]);
      }
      out.append('\t').append(mins[i] == null ? "" : mins[i].toString());
      out.append('\t').append(maxs[i] == null ? "" : maxs[i].toString());
    }
    out.append('\n');
  }

  private static int indexOf(String[] columns, String name) {
    for (int i = 0; i < columns.length; i++) {
      if (columns[i].equals(name)) {
        return i;
      }
    }
    return -1;
  }

  @SuppressWarnings("unchecked")
  private static Comparable<Object> value(Object statistic) {
    // Binary compares bytes signed; UTF-8 text compares as its code points unsigned.
    if (statistic instanceof Binary binary) {
      return (Comparable<Object>) (Comparable<?>) binary.toStringUsingUTF8();
    }
    return (Comparable<Object>) statistic;
  }
}
