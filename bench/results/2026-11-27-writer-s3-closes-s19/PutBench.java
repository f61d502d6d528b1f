import java.util.*;
import java.util.concurrent.*;
import org.apache.iceberg.aws.s3.S3FileIO;
import org.apache.iceberg.io.PositionOutputStream;

/** args: files sizeBytes threads rounds [k=v ...]: PUTs through Iceberg's S3FileIO, ms per round. */
public class PutBench {
  public static void main(String[] a) throws Exception {
    int files = Integer.parseInt(a[0]), size = Integer.parseInt(a[1]), threads = Integer.parseInt(a[2]), rounds = Integer.parseInt(a[3]);
    Map<String, String> p = new HashMap<>();
    p.put("s3.endpoint", System.getenv("PB_ENDPOINT"));
    p.put("s3.access-key-id", System.getenv("PB_KEY"));
    p.put("s3.secret-access-key", System.getenv("PB_SECRET"));
    p.put("s3.path-style-access", "true");
    p.put("client.region", "us-east-1");
    for (int i = 4; i < a.length; i++) { String[] kv = a[i].split("=", 2); p.put(kv[0], kv[1]); }
    S3FileIO io = new S3FileIO();
    io.initialize(p);
    byte[] data = new byte[size];
    new Random(1).nextBytes(data);
    ExecutorService pool = Executors.newFixedThreadPool(threads);
    List<String> paths = new ArrayList<>();
    long[] ms = new long[rounds];
    for (int r = 0; r < rounds; r++) {
      List<Callable<Void>> jobs = new ArrayList<>();
      for (int i = 0; i < files; i++) {
        String path = "s3://cdc-lake/putbench/" + UUID.randomUUID() + "/f.parquet";
        paths.add(path);
        jobs.add(() -> { try (PositionOutputStream o = io.newOutputFile(path).createOrOverwrite()) { o.write(data); } return null; });
      }
      long t0 = System.nanoTime();
      for (Future<Void> f : pool.invokeAll(jobs)) f.get();
      ms[r] = (System.nanoTime() - t0) / 1_000_000;
    }
    pool.shutdown();
    io.deleteFiles(paths);
    long[] s = ms.clone(); Arrays.sort(s);
    System.out.println(String.join(" ", Arrays.copyOfRange(a, 4, a.length)) + " " + System.getProperty("aws.requestChecksumCalculation", "") +
        " files=" + files + " size=" + size + " threads=" + threads + " median_ms=" + s[s.length / 2] + " min_ms=" + s[0] + " all=" + Arrays.toString(ms));
  }
}
