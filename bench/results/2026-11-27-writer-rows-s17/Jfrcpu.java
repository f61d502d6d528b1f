import java.nio.file.*;
import java.time.*;
import java.util.*;
import jdk.jfr.consumer.*;

/** jfr file, then windows "label=HH:MM:SS-HH:MM:SS": the JVM's CPU seconds (jdk.CPULoad jvmUser+jvmSystem x cores x period) and GC pause seconds in each. */
public class Jfrcpu {
  public static void main(String[] a) throws Exception {
    int cores = Runtime.getRuntime().availableProcessors();
    List<Object[]> load = new ArrayList<>(); List<Object[]> gcs = new ArrayList<>();
    try (RecordingFile f = new RecordingFile(Path.of(a[0]))) {
      while (f.hasMoreEvents()) {
        RecordedEvent e = f.readEvent();
        String n = e.getEventType().getName();
        if (n.equals("jdk.CPULoad")) load.add(new Object[]{e.getStartTime(), e.getFloat("jvmUser") + e.getFloat("jvmSystem"), e.getFloat("machineTotal")});
        if (n.equals("jdk.GarbageCollection")) gcs.add(new Object[]{e.getStartTime(), e.getDuration("sumOfPauses").toNanos() / 1e9});
      }
    }
    load.sort(Comparator.comparing(x -> (Instant) x[0]));
    for (int i = 1; i < a.length; i++) {
      String[] p = a[i].split("=", 2); String[] w = p[1].split("-");
      LocalTime from = LocalTime.parse(w[0]), to = LocalTime.parse(w[1]);
      double cpu = 0, machine = 0, gc = 0; int k = 0;
      Instant prev = null;
      for (Object[] x : load) {
        Instant t = (Instant) x[0]; LocalTime lt = LocalTime.ofInstant(t, ZoneOffset.UTC);
        if (prev != null && !lt.isBefore(from) && !lt.isAfter(to)) {
          double dt = Duration.between(prev, t).toNanos() / 1e9;
          cpu += (Float) x[1] * cores * dt; machine += (Float) x[2] * cores * dt; k++;
        }
        prev = t;
      }
      for (Object[] x : gcs) { LocalTime lt = LocalTime.ofInstant((Instant) x[0], ZoneOffset.UTC); if (!lt.isBefore(from) && !lt.isAfter(to)) gc += (Double) x[1]; }
      System.out.printf("%-28s %5.1f s wall  JVM CPU %6.1f s  machine CPU %6.1f s  GC pauses %5.2f s  (%d CPULoad events)%n", p[0], Duration.between(from, to).toSeconds() * 1.0, cpu, machine, gc, k);
    }
  }
}
