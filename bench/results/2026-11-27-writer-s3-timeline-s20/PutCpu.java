import java.lang.management.ManagementFactory;
import java.nio.file.*;
import java.util.*;
import java.util.concurrent.*;
import org.apache.iceberg.aws.s3.S3FileIO;
import org.apache.iceberg.io.PositionOutputStream;

/** args: label files sizeBytes threads rounds weedPid [k=v ...]: PUTs through S3FileIO; wall, JVM CPU and weed CPU per PUT (first round = warm-up, not counted). */
public class PutCpu {
  static long weedCpuMs(String pid) throws Exception {
    String[] f = Files.readString(Path.of("/proc/" + pid + "/stat")).split("\\) ", 2)[1].split(" ");
    return (Long.parseLong(f[11]) + Long.parseLong(f[12])) * 10; // clock ticks of 10 ms
  }
  public static void main(String[] a) throws Exception {
    String label = a[0];
    int files = Integer.parseInt(a[1]), size = Integer.parseInt(a[2]), threads = Integer.parseInt(a[3]), rounds = Integer.parseInt(a[4]);
    String weed = a[5];
    Map<String, String> p = new HashMap<>();
    p.put("s3.endpoint", System.getenv("PB_ENDPOINT"));
    p.put("s3.access-key-id", System.getenv("PB_KEY"));
    p.put("s3.secret-access-key", System.getenv("PB_SECRET"));
    p.put("s3.path-style-access", "true");
    p.put("client.region", "us-east-1");
    for (int i = 6; i < a.length; i++) { String[] kv = a[i].split("=", 2); p.put(kv[0], kv[1]); }
    S3FileIO io = new S3FileIO();
    io.initialize(p);
    byte[] data = new byte[size];
    new Random(1).nextBytes(data);
    for (int i = 0; i < size; i += 4) data[i] = 0; // some redundancy, like a parquet page
    ExecutorService pool = Executors.newFixedThreadPool(threads);
    com.sun.management.OperatingSystemMXBean os = (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
    List<String> paths = new ArrayList<>();
    long[] ms = new long[rounds];
    long cpu0 = 0, weed0 = 0;
    for (int r = 0; r < rounds; r++) {
      if (r == 1) { cpu0 = os.getProcessCpuTime(); weed0 = weedCpuMs(weed); }
      List<Callable<Void>> jobs = new ArrayList<>();
      for (int i = 0; i < files; i++) {
        String path = "s3://cdc-lake/putbench-ws3-s20/" + UUID.randomUUID() + "/f.parquet";
        paths.add(path);
        jobs.add(() -> { try (PositionOutputStream o = io.newOutputFile(path).createOrOverwrite()) { o.write(data); } return null; });
      }
      long t0 = System.nanoTime();
      for (Future<Void> f : pool.invokeAll(jobs)) f.get();
      ms[r] = (System.nanoTime() - t0) / 1_000_000;
    }
    long puts = (long) files * (rounds - 1);
    double jvmCpuPerPut = (os.getProcessCpuTime() - cpu0) / 1e6 / puts;
    double weedCpuPerPut = (double) (weedCpuMs(weed) - weed0) / puts;
    pool.shutdown();
    io.deleteFiles(paths);
    long[] s = Arrays.copyOfRange(ms, 1, rounds); Arrays.sort(s);
    System.out.printf("%s files=%d size=%d threads=%d median_round_ms=%d min=%d jvm_cpu_ms_per_put=%.2f weed_cpu_ms_per_put=%.2f all=%s%n",
        label, files, size, threads, s[s.length / 2], s[0], jvmCpuPerPut, weedCpuPerPut, Arrays.toString(ms));
  }
}
