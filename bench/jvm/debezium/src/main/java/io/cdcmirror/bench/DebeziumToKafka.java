package io.cdcmirror.bench;

import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.format.Json;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Debezium's embedded engine publishing every change event to Kafka, as Kafka Connect would:
 * a batch's records are sent, the producer flushed (acks=all), and only then are they marked
 * processed, so the engine's offsets never run ahead of what Kafka holds (at least once).
 *
 * <p>Arguments: a properties file holding the engine's settings and {@code bench.bootstrap}
 * (the brokers) and {@code bench.table.topic} (the topic whose records are counted). Reports on
 * stdout, one JSON object per line, for bench/debezium_bench.py: {@code {"streaming":true}} at the
 * first heartbeat (the engine reads the binlog from then on) and, after each batch holding rows
 * of the table, {@code {"records":n,"first_ns":..,"last_ns":..}} (System.nanoTime of the first
 * and the latest row acknowledged by Kafka). Runs until stdin closes, then stops the engine, which
 * stores its offsets.
 */
public final class DebeziumToKafka {
  private DebeziumToKafka() {}

  public static void main(String[] args) throws Exception {
    Properties settings = new Properties();
    try (InputStream in = new FileInputStream(args[0])) {
      settings.load(in);
    }
    String tableTopic = settings.getProperty("bench.table.topic");
    Properties producerSettings = new Properties();
    producerSettings.put("bootstrap.servers", settings.getProperty("bench.bootstrap"));
    producerSettings.put("acks", "all");
    producerSettings.put("enable.idempotence", "true");
    producerSettings.put("linger.ms", "5");
    producerSettings.put("compression.type", "lz4");
    KafkaProducer<String, String> producer =
        new KafkaProducer<>(producerSettings, new StringSerializer(), new StringSerializer());

    AtomicLong records = new AtomicLong();
    AtomicLong firstNs = new AtomicLong();
    AtomicBoolean streaming = new AtomicBoolean();
    DebeziumEngine<ChangeEvent<String, String>> engine =
        DebeziumEngine.create(Json.class)
            .using(settings)
            .notifying(
                (List<ChangeEvent<String, String>> batch,
                    DebeziumEngine.RecordCommitter<ChangeEvent<String, String>> committer) -> {
                  long rows = 0;
                  for (ChangeEvent<String, String> event : batch) {
                    String topic = event.destination();
                    if (topic.startsWith("__debezium-heartbeat")) {
                      if (streaming.compareAndSet(false, true)) {
                        report("{\"streaming\":true}");
                      }
                    } else if (event.value() != null) {
                      producer.send(new ProducerRecord<>(topic, event.key(), event.value()));
                      if (topic.equals(tableTopic)) {
                        rows++;
                      }
                    }
                  }
                  producer.flush();
                  for (ChangeEvent<String, String> event : batch) {
                    committer.markProcessed(event);
                  }
                  committer.markBatchFinished();
                  if (rows > 0) {
                    long now = System.nanoTime();
                    firstNs.compareAndSet(0, now);
                    long total = records.addAndGet(rows);
                    report(
                        "{\"records\":" + total + ",\"first_ns\":" + firstNs.get()
                            + ",\"last_ns\":" + now + "}");
                  }
                })
            .using(
                (boolean success, String message, Throwable error) -> {
                  if (!success) {
                    if (error != null) {
                      error.printStackTrace();
                    }
                    String text = message + (error == null ? "" : ": " + error);
                    report("{\"error\":\"" + text.replace("\\", "\\\\").replace("\"", "'")
                        .replace("\n", " ") + "\"}");
                  }
                })
            .build();
    ExecutorService executor = Executors.newSingleThreadExecutor();
    executor.execute(engine);
    try {
      while (System.in.read() >= 0) {
        // Runs until the benchmark closes stdin.
      }
    } catch (IOException closed) {
      // stdin gone: stop as if closed.
    }
    try {
      engine.close();
    } catch (IllegalStateException alreadyStopped) {
      // The engine stopped on its own (its error was reported).
    }
    executor.shutdown();
    executor.awaitTermination(60, TimeUnit.SECONDS);
    producer.close();
    report("{\"stopped\":true}");
  }

  private static synchronized void report(String line) {
    System.out.println(line);
    System.out.flush();
  }
}
