package io.cdcmirror.spark;

import java.io.IOException;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.iceberg.BaseTable;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableOperations;
import org.apache.iceberg.exceptions.CommitStateUnknownException;

/**
 * Test support: a {@link ProgressCommit} that loses its first race, or whose outcome is unknown,
 * deterministically.
 *
 * <p>Why: two writers committing at once rarely collide (a commit takes milliseconds), so a test
 * of them at once passes whether or not a lost race is handled. Here the other writer's commit is
 * made after this commit has read the table and built its snapshot, right before its metastore
 * swap: the swap fails on the moved metadata location (the metastore's compare-and-swap), exactly
 * as in a real race, and Iceberg's retry runs from there. Not used by the product.
 */
public final class ProgressCommitRace {
  private ProgressCommitRace() {}

  /**
   * {@link ProgressCommit#replacePartition} of {@code row} to {@code table}, with {@code rival}'s
   * commit of {@code rivalRow} (another table object of the same table, as another writer
   * process holds) made between the first attempt's read and its swap. Returns how many times
   * the commit was attempted (2: lost once, then retried from a fresh read).
   */
  public static int replacePartitionLosingTo(
      Table table,
      Map<String, Object> row,
      Map<String, String> summary,
      Table rival,
      Map<String, Object> rivalRow,
      Map<String, String> rivalSummary)
      throws IOException {
    TableOperations ops = ((HasTableOperations) table).operations();
    AtomicInteger attempts = new AtomicInteger();
    TableOperations losing =
        new ForwardingTableOperations(ops) {
          @Override
          public void commit(TableMetadata base, TableMetadata metadata) {
            if (attempts.incrementAndGet() == 1) {
              try {
                ProgressCommit.replacePartition(rival, rivalRow, rivalSummary);
              } catch (IOException e) {
                throw new IllegalStateException("the rival's commit failed", e);
              }
            }
            super.commit(base, metadata);
          }
        };
    ProgressCommit.replacePartition(new BaseTable(losing, table.name()), row, summary);
    return attempts.get();
  }

  /**
   * {@link ProgressCommit#replacePartition} of {@code row} to {@code table} whose metastore swap
   * succeeds but reports {@link CommitStateUnknownException}, as when the metastore's answer is
   * lost after it applied the swap.
   */
  public static void replacePartitionWithUnknownOutcome(
      Table table, Map<String, Object> row, Map<String, String> summary) throws IOException {
    replacePartitionThenFailing(
        table,
        row,
        summary,
        new CommitStateUnknownException(
            new IllegalStateException("the metastore's answer was lost (test)")));
  }

  /**
   * {@link ProgressCommit#replacePartition} of {@code row} to {@code table} whose metastore swap
   * succeeds but then fails with a plain error, as Hive's commit rethrows the swap's error when
   * its status check missed the new metadata (not a {@code CleanableFailure}).
   */
  public static void replacePartitionFailingAfterSwap(
      Table table, Map<String, Object> row, Map<String, String> summary) throws IOException {
    replacePartitionThenFailing(
        table, row, summary, new IllegalStateException("the swap's answer was an error (test)"));
  }

  private static void replacePartitionThenFailing(
      Table table, Map<String, Object> row, Map<String, String> summary, RuntimeException error)
      throws IOException {
    TableOperations ops = ((HasTableOperations) table).operations();
    TableOperations failing =
        new ForwardingTableOperations(ops) {
          @Override
          public void commit(TableMetadata base, TableMetadata metadata) {
            super.commit(base, metadata);
            throw error;
          }
        };
    ProgressCommit.replacePartition(new BaseTable(failing, table.name()), row, summary);
  }
}
