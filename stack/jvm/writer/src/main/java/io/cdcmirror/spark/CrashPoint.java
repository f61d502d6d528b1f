package io.cdcmirror.spark;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * The stream writer's crash points inside the JVM (tests only): {@code CDC_STREAM_WRITER_CRASH_AT}
 * ({@code stream_writer.writer.CRASH_POINTS}) naming one of them kills the writer there, as
 * {@code kill -9} would: its Python process and this JVM, the whole process group when the
 * Python process leads one (as the writer's own crash points in Python do).
 */
final class CrashPoint {
  static final String ENV = "CDC_STREAM_WRITER_CRASH_AT";
  /** Inside the raw commit: its manifests and manifest list written, not yet the table's swap. */
  static final String DURING_COMMIT = "during-commit";

  private CrashPoint() {}

  static void reach(String point) {
    if (!point.equals(System.getenv(ENV))) {
      return;
    }
    System.err.println(ENV + "=" + point + ": the writer kills itself now");
    System.err.flush();
    try {
      long python = ProcessHandle.current().parent().map(ProcessHandle::pid).orElse(-1L);
      if (python > 0) {
        String target = leadsItsGroup(python) ? "-" + python : Long.toString(python);
        new ProcessBuilder("kill", "-9", "--", target).inheritIO().start().waitFor();
      }
    } catch (IOException | InterruptedException | RuntimeException e) {
      System.err.println("could not kill the writer's Python process: " + e);
    }
    Runtime.getRuntime().halt(137); // this JVM, if the group's kill has not reached it yet
  }

  /** Whether process {@code pid} leads its process group (Linux: /proc/<pid>/stat's pgrp). */
  private static boolean leadsItsGroup(long pid) throws IOException {
    String stat = Files.readString(Path.of("/proc/" + pid + "/stat"), StandardCharsets.US_ASCII);
    // "pid (comm) state ppid pgrp ...": comm may hold spaces, so count after its ')'.
    String[] fields = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
    return Long.parseLong(fields[2]) == pid;
  }
}
