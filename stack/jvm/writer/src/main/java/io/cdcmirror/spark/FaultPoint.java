package io.cdcmirror.spark;

import java.io.IOException;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.exceptions.RuntimeIOException;

/**
 * The stream writer's failing commits inside the JVM (tests only): {@code
 * CDC_STREAM_WRITER_FAIL_AT} ({@code stream_writer.writer.FAULT_POINTS}) naming one makes the
 * first commit of this JVM that reaches it fail inside Iceberg's commit, in the table
 * operations' commit: its manifests and manifest list written, where the operations write the
 * new metadata file before the metastore swap. It fails as a storage failure there fails: the
 * {@link RuntimeIOException} Iceberg throws when the metadata file cannot be written. Iceberg
 * does not retry it (only a lost race, CommitFailedException, is) and, the Hive operations
 * requiring strict cleanup, deletes nothing: the data files, the manifests and the manifest list
 * stay, referenced by no snapshot, for maintenance's orphan removal. Once per point and JVM: the
 * restarted writer's commits succeed.
 */
final class FaultPoint {
  static final String ENV = "CDC_STREAM_WRITER_FAIL_AT";
  /** The raw table's append ({@link IcebergBatchWrite#commit}). */
  static final String RAW_COMMIT = "raw-commit";
  /** The progress row's partition replace ({@link ProgressCommit#replacePartition}). */
  static final String PROGRESS_COMMIT = "progress-commit";

  private static final Set<String> REACHED = ConcurrentHashMap.newKeySet();

  private FaultPoint() {}

  /** Called by the operations' commit of {@code metadata} before it delegates. */
  static void reach(String point, TableMetadata metadata) {
    if (!point.equals(System.getenv(ENV)) || !REACHED.add(point)) {
      return;
    }
    System.err.println(
        ENV + "=" + point + ": the writer jar fails the commit of the table at "
            + metadata.location() + " inside Iceberg's commit");
    System.err.flush();
    throw new RuntimeIOException(
        new IOException("the storage refused the write (" + ENV + "=" + point + ")"),
        "Failed to write the new metadata file of the table at %s",
        metadata.location());
  }
}
