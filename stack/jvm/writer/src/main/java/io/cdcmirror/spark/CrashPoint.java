package io.cdcmirror.spark;

import java.io.IOException;

/**
 * The stream writer's crash points inside the JVM (tests only): {@code CDC_STREAM_WRITER_CRASH_AT}
 * ({@code stream_writer.writer.CRASH_POINTS}) naming one of them kills the writer there, as
 * {@code kill -9} would: the process (or process group, "-pid") the writer's Python process
 * named in the system property {@code cdc.stream-writer.crash-target}
 * ({@code stream_writer.writer.CRASH_TARGET_PROPERTY}), then this JVM. Without it, this JVM only:
 * never a process the writer did not name (under spark-submit the JVM's parent is the operator's
 * shell or supervisor).
 */
final class CrashPoint {
  static final String ENV = "CDC_STREAM_WRITER_CRASH_AT";
  static final String TARGET_PROPERTY = "cdc.stream-writer.crash-target";
  /** Inside the raw commit: its manifests and manifest list written, not yet the table's swap. */
  static final String DURING_COMMIT = "during-commit";

  private CrashPoint() {}

  static void reach(String point) {
    if (!point.equals(System.getenv(ENV))) {
      return;
    }
    System.err.println(ENV + "=" + point + ": the writer kills itself now");
    System.err.flush();
    String target = System.getProperty(TARGET_PROPERTY);
    if (target != null && target.matches("-?[1-9][0-9]*")) {
      try {
        new ProcessBuilder("kill", "-9", "--", target).inheritIO().start().waitFor();
      } catch (IOException | InterruptedException e) {
        System.err.println("could not kill the writer's process " + target + ": " + e);
      }
    }
    Runtime.getRuntime().halt(137); // this JVM, if the kill has not reached it yet
  }
}
