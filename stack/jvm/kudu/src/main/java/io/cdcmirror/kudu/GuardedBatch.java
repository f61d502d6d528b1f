package io.cdcmirror.kudu;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import java.io.IOException;
import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.kudu.ColumnSchema;
import org.apache.kudu.Schema;
import org.apache.kudu.Type;
import org.apache.kudu.client.KuduClient;
import org.apache.kudu.client.KuduException;
import org.apache.kudu.client.KuduPredicate;
import org.apache.kudu.client.KuduScanner;
import org.apache.kudu.client.KuduSession;
import org.apache.kudu.client.KuduTable;
import org.apache.kudu.client.OperationResponse;
import org.apache.kudu.client.PartialRow;
import org.apache.kudu.client.RowError;
import org.apache.kudu.client.RowResult;
import org.apache.kudu.client.RowResultIterator;
import org.apache.kudu.client.SessionConfiguration;
import org.apache.kudu.client.Upsert;

/**
 * A batch of row changes of one Kudu table, applied with the mirror's version guard in one call.
 *
 * <p>The mirror (mirror/kudu.py) hands a batch over as one buffer: the JSON array {@code
 * [[offset, deleted, shard, {column: wire value, …}], …]}, the SimpleBinlog wire values as the
 * messages carry them, plus, once per batch, each column's name, carrying form and fixed
 * length (mirror.kudu_batch). Building the client's rows call by call from Python through JPype
 * cost about 130 µs a row; here Python makes a few calls per batch.
 *
 * <p>The wire value becomes the Kudu value by the column's form, as {@code
 * simple_binlog.values.decode} and then {@code mirror.kudu_types.KuduType.to_java} do in
 * Python (the reference the tests compare this with): int (a JSON integer, range-checked for
 * INT8..INT64), whole (digits, as text or a JSON integer, into DECIMAL(20,0)), decimal (text),
 * decimal_text (text kept in a STRING), float (a JSON number), date ({@code YYYY-MM-DD}),
 * micros (a DATETIME/TIMESTAMP text as microseconds since the epoch, the wall time read as
 * UTC), time_micros ({@code [-]HH:MM:SS[.ffffff]} as signed microseconds), text, binary
 * (base64; padded to the fixed length of BINARY(n)). A column the row lacks is left unset (an
 * upsert keeps it); JSON null sets NULL.
 *
 * <p>{@link #apply} holds the guard the Python module documents: the stored {@code
 * _binlog_offset} of the batch's keys is read (one scan with an IN-list predicate per key
 * column), a change whose offset is not greater than the stored one is stale, and the others
 * are upserted in one flush. Without the guard ({@code guarded = false}) every change is
 * upserted: the benchmark's baseline, the same client and rows without the read.
 *
 * <p>Errors: a value the column cannot take, a missing key or a row Kudu refuses as invalid is
 * returned as {@link Outcome#refused} (the mirror stops the table, and nothing of the batch is
 * written); any other row error as {@link Outcome#failed} (the mirror retries the batch); the
 * client's exceptions (an unreachable server) are thrown.
 */
public final class GuardedBatch {
  private static final String OFFSET = "_binlog_offset";
  private static final String SHARD = "_shard";
  private static final String DELETED = "_deleted";
  private static final JsonFactory JSON = new JsonFactory();
  private static final Object NULL = new Object();

  /** What {@link #apply} did: counts, or why the table stops or the batch must be retried. */
  public static final class Outcome {
    public final int applied;
    public final int stale;
    public final String refused;
    public final String failed;
    /** Where the call's time went (nanoseconds): decoding the buffer, the guard's read of the
     * stored offsets, building the upserts and their flush. */
    public long parseNanos;
    public long readNanos;
    public long writeNanos;

    Outcome(int applied, int stale, String refused, String failed) {
      this.applied = applied;
      this.stale = stale;
      this.refused = refused;
      this.failed = failed;
    }

    Outcome timed(long parse, long read, long write) {
      parseNanos = parse;
      readNanos = read;
      writeNanos = write;
      return this;
    }
  }

  /** A value the column cannot take; the message is the sentence the table stops with. */
  static final class Refused extends Exception {
    Refused(String message) {
      super(message, null, false, false);
    }
  }

  private final KuduTable table;
  private final Schema schema;
  private final Map<String, Integer> columns = new HashMap<>();
  private final int[] indexes;
  private final String[] forms;
  private final int[] fixedLengths;
  private final int[] keyColumns;

  /**
   * The table and, per column the batch may carry: its name, form and fixed length (BINARY(n)'s
   * n, else 0).
   */
  public GuardedBatch(KuduTable table, String[] names, String[] forms, int[] fixedLengths) {
    this.table = table;
    this.schema = table.getSchema();
    this.indexes = new int[names.length];
    for (int column = 0; column < names.length; column++) {
      indexes[column] = schema.getColumnIndex(names[column]);
      columns.put(names[column], column);
    }
    this.forms = forms.clone();
    this.fixedLengths = fixedLengths.clone();
    List<ColumnSchema> keys = schema.getPrimaryKeyColumns();
    this.keyColumns = new int[keys.size()];
    for (int position = 0; position < keys.size(); position++) {
      keyColumns[position] = schema.getColumnIndex(keys.get(position).getName());
    }
  }

  /** One change: its bookkeeping, and the Kudu value of each carried column by schema index. */
  private static final class Change {
    long offset;
    boolean deleted;
    String shard;
    final Map<Integer, Object> values = new LinkedHashMap<>();
  }

  /** Reads the stored versions (when guarded), then upserts the fresh changes in one flush. */
  public Outcome apply(KuduClient client, byte[] changes, boolean guarded) throws KuduException {
    long started = System.nanoTime();
    List<Change> parsed;
    try {
      parsed = parse(changes);
      for (Change change : parsed) {
        checkKey(change);
      }
    } catch (Refused e) {
      return new Outcome(0, 0, e.getMessage(), null);
    } catch (IOException e) {
      return new Outcome(0, 0, "the batch is not the JSON the mirror writes (" + e.getMessage() + ")", null);
    }
    long parsedAt = System.nanoTime();
    List<Change> fresh = parsed;
    if (guarded && !parsed.isEmpty()) {
      Map<List<Object>, Long> stored = storedVersions(client, parsed);
      fresh = new ArrayList<>(parsed.size());
      for (Change change : parsed) {
        Long version = stored.get(key(change));
        if (version == null || version < change.offset) {
          fresh.add(change);
        }
      }
    }
    long readAt = System.nanoTime();
    int stale = parsed.size() - fresh.size();
    List<Upsert> upserts = new ArrayList<>(fresh.size());
    try {
      for (Change change : fresh) {
        upserts.add(upsert(change));
      }
    } catch (RuntimeException e) {
      return new Outcome(0, stale, "Kudu refused a row (" + e.getMessage() + ")", null);
    }
    if (!upserts.isEmpty()) {
      String[] error = write(client, upserts);
      if (error != null) {
        return new Outcome(0, stale, error[0], error[1]);
      }
    }
    return new Outcome(upserts.size(), stale, null, null)
        .timed(parsedAt - started, readAt - parsedAt, System.nanoTime() - readAt);
  }

  // -- the buffer ---------------------------------------------------------------------------
  private List<Change> parse(byte[] buffer) throws IOException, Refused {
    List<Change> parsed = new ArrayList<>();
    try (JsonParser parser = JSON.createParser(buffer)) {
      expect(parser.nextToken(), JsonToken.START_ARRAY);
      while (parser.nextToken() == JsonToken.START_ARRAY) {
        Change change = new Change();
        parser.nextToken();
        change.offset = parser.getLongValue();
        change.deleted = parser.nextToken() == JsonToken.VALUE_TRUE;
        parser.nextToken();
        change.shard = parser.getText();
        expect(parser.nextToken(), JsonToken.START_OBJECT);
        while (parser.nextToken() == JsonToken.FIELD_NAME) {
          String name = parser.currentName();
          JsonToken token = parser.nextToken();
          Integer column = columns.get(name);
          if (column == null) {
            throw new Refused("column " + name + " is not a column of the batch");
          }
          Object value = token == JsonToken.VALUE_NULL ? NULL : value(column, parser, token);
          change.values.put(indexes[column], value);
        }
        expect(parser.nextToken(), JsonToken.END_ARRAY);
        parsed.add(change);
      }
    }
    return parsed;
  }

  private static void expect(JsonToken token, JsonToken wanted) throws IOException {
    if (token != wanted) {
      throw new IOException("expected " + wanted + ", found " + token);
    }
  }

  private Object value(int column, JsonParser parser, JsonToken token) throws IOException, Refused {
    ColumnSchema schemaColumn = schema.getColumnByIndex(indexes[column]);
    String form = forms[column];
    try {
      return convert(schemaColumn, form, fixedLengths[column], parser, token);
    } catch (RuntimeException e) {
      String text = token.isScalarValue() ? parser.getText() : String.valueOf(token);
      throw new Refused(
          "column " + schemaColumn.getName() + " holds a value Kudu cannot take: '" + text
              + "' (" + e.getMessage() + ")");
    }
  }

  /** The wire value as the column's Kudu type boxes it (what addX and IN-lists take). */
  private static Object convert(
      ColumnSchema column, String form, int fixedLength, JsonParser parser, JsonToken token)
      throws IOException {
    switch (form) {
      case "int":
        require(token == JsonToken.VALUE_NUMBER_INT, "not an integer");
        return integer(column.getType(), parser.getLongValue());
      case "whole":
        require(token == JsonToken.VALUE_NUMBER_INT || token == JsonToken.VALUE_STRING, "not digits");
        require(parser.getText().chars().allMatch(Character::isDigit), "not digits");
        return decimal(column, parser.getText());
      case "decimal":
        require(token == JsonToken.VALUE_STRING, "not a decimal's text");
        return decimal(column, parser.getText());
      case "decimal_text":
        require(token == JsonToken.VALUE_STRING, "not a decimal's text");
        String text = parser.getText();
        BigDecimal exact = new BigDecimal(text);
        return text.indexOf('E') < 0 && text.indexOf('e') < 0 ? text : exact.toPlainString();
      case "float":
        require(token.isNumeric(), "not a number");
        double number = parser.getDoubleValue();
        return column.getType() == Type.FLOAT ? (Object) (float) number : (Object) number;
      case "date":
        require(token == JsonToken.VALUE_STRING, "not a date");
        return java.sql.Date.valueOf(LocalDate.parse(parser.getText()));
      case "micros":
        require(token == JsonToken.VALUE_STRING, "not a date and time");
        LocalDateTime time = LocalDateTime.parse(parser.getText().replace(' ', 'T'));
        return Math.addExact(
            Math.multiplyExact(time.toEpochSecond(ZoneOffset.UTC), 1_000_000L),
            time.getNano() / 1000L);
      case "time_micros":
        require(token == JsonToken.VALUE_STRING, "not a time");
        return timeMicros(parser.getText());
      case "text":
        require(token == JsonToken.VALUE_STRING, "not text");
        return parser.getText();
      case "binary":
        require(token == JsonToken.VALUE_STRING, "not base64");
        byte[] raw = Base64.getDecoder().decode(parser.getText());
        return raw.length < fixedLength ? Arrays.copyOf(raw, fixedLength) : raw;
      default:
        throw new IllegalArgumentException("the mirror writes no '" + form + "' form");
    }
  }

  private static void require(boolean holds, String otherwise) {
    if (!holds) {
      throw new IllegalArgumentException(otherwise);
    }
  }

  private static Object integer(Type type, long value) {
    switch (type) {
      case INT8:
        require(value == (byte) value, "outside INT8");
        return (byte) value;
      case INT16:
        require(value == (short) value, "outside INT16");
        return (short) value;
      case INT32:
        require(value == (int) value, "outside INT32");
        return (int) value;
      default:
        return value;
    }
  }

  private static BigDecimal decimal(ColumnSchema column, String text) {
    int precision = column.getTypeAttributes().getPrecision();
    int scale = column.getTypeAttributes().getScale();
    BigDecimal scaled = new BigDecimal(text).setScale(scale); // throws if digits would be lost
    require(scaled.precision() <= precision, "more digits than DECIMAL(" + precision + "," + scale + ")");
    return scaled;
  }

  /** {@code [-]HH:MM:SS[.f…]} as signed microseconds (hours may exceed 24, as in MySQL). */
  private static long timeMicros(String text) {
    boolean negative = text.startsWith("-");
    String[] parts = (negative ? text.substring(1) : text).split(":");
    require(parts.length == 3, "not [-]HH:MM:SS");
    String[] seconds = parts[2].split("\\.", 2);
    String fraction = seconds.length == 2 ? (seconds[1] + "000000").substring(0, 6) : "0";
    long micros =
        ((Long.parseLong(parts[0]) * 60 + Long.parseLong(parts[1])) * 60
                    + Long.parseLong(seconds[0]))
                * 1_000_000L
            + Long.parseLong(fraction);
    return negative ? -micros : micros;
  }

  // -- the guard ----------------------------------------------------------------------------
  private void checkKey(Change change) throws Refused {
    for (int index : keyColumns) {
      Object value = change.values.get(index);
      if (value == null || value == NULL) {
        throw new Refused(
            "a change of the batch has no value for key column "
                + schema.getColumnByIndex(index).getName());
      }
    }
  }

  /** A key value as a map key: bytes by content, decimals by value, dates by day. */
  private static Object comparable(Object value) {
    if (value instanceof byte[]) {
      return ByteBuffer.wrap((byte[]) value);
    }
    if (value instanceof BigDecimal) {
      return ((BigDecimal) value).stripTrailingZeros();
    }
    if (value instanceof java.sql.Date) {
      return value.toString();
    }
    return value;
  }

  private List<Object> key(Change change) {
    List<Object> key = new ArrayList<>(keyColumns.length);
    for (int index : keyColumns) {
      key.add(comparable(change.values.get(index)));
    }
    return key;
  }

  /** A scanned key value as {@link #convert} gives it (getObject boxes times as Timestamp). */
  private static Object scanned(RowResult result, int position) {
    Type type = result.getColumnType(position);
    return type == Type.UNIXTIME_MICROS ? (Object) result.getLong(position) : result.getObject(position);
  }

  private Map<List<Object>, Long> storedVersions(KuduClient client, List<Change> changes)
      throws KuduException {
    KuduScanner.KuduScannerBuilder builder = client.newScannerBuilder(table);
    List<String> projected = new ArrayList<>();
    for (int index : keyColumns) {
      Map<Object, Object> distinct = new LinkedHashMap<>();
      for (Change change : changes) {
        Object value = change.values.get(index);
        distinct.putIfAbsent(comparable(value), value);
      }
      ColumnSchema column = schema.getColumnByIndex(index);
      builder.addPredicate(
          KuduPredicate.newInListPredicate(column, new ArrayList<>(distinct.values())));
      projected.add(column.getName());
    }
    projected.add(OFFSET);
    KuduScanner scanner = builder.setProjectedColumnNames(projected).build();
    Map<List<Object>, Long> found = new HashMap<>();
    try {
      while (scanner.hasMoreRows()) {
        RowResultIterator results = scanner.nextRows();
        while (results.hasNext()) {
          RowResult result = results.next();
          List<Object> key = new ArrayList<>(keyColumns.length);
          for (int position = 0; position < keyColumns.length; position++) {
            key.add(comparable(scanned(result, position)));
          }
          found.put(key, result.getLong(keyColumns.length));
        }
      }
    } finally {
      scanner.close();
    }
    return found;
  }

  // -- the write ----------------------------------------------------------------------------
  private Upsert upsert(Change change) {
    Upsert upsert = table.newUpsert();
    PartialRow row = upsert.getRow();
    for (Map.Entry<Integer, Object> column : change.values.entrySet()) {
      if (column.getValue() == NULL) {
        row.setNull(column.getKey());
      } else {
        set(row, column.getKey(), column.getValue());
      }
    }
    row.addLong(OFFSET, change.offset);
    row.addString(SHARD, change.shard);
    row.addBoolean(DELETED, change.deleted);
    return upsert;
  }

  private void set(PartialRow row, int index, Object value) {
    switch (schema.getColumnByIndex(index).getType()) {
      case INT8 -> row.addByte(index, (Byte) value);
      case INT16 -> row.addShort(index, (Short) value);
      case INT32 -> row.addInt(index, (Integer) value);
      case INT64, UNIXTIME_MICROS -> row.addLong(index, (Long) value);
      case FLOAT -> row.addFloat(index, (Float) value);
      case DOUBLE -> row.addDouble(index, (Double) value);
      case BOOL -> row.addBoolean(index, (Boolean) value);
      case DECIMAL -> row.addDecimal(index, (BigDecimal) value);
      case DATE -> row.addDate(index, (java.sql.Date) value);
      case BINARY -> row.addBinary(index, (byte[]) value);
      default -> row.addString(index, (String) value);
    }
  }

  /** Null when written; else {refused sentence, null} for an invalid row or {null, failure}. */
  private static String[] write(KuduClient client, List<Upsert> upserts) throws KuduException {
    KuduSession session = client.newSession();
    List<OperationResponse> responses;
    try {
      session.setFlushMode(SessionConfiguration.FlushMode.MANUAL_FLUSH);
      session.setMutationBufferSpace(upserts.size() + 1);
      for (Upsert upsert : upserts) {
        session.apply(upsert);
      }
      responses = session.flush();
    } finally {
      session.close();
    }
    for (OperationResponse response : responses) {
      if (response.hasRowError()) {
        RowError error = response.getRowError();
        String reason = error.getErrorStatus().toString();
        if (error.getErrorStatus().isInvalidArgument() || error.getErrorStatus().isIllegalState()) {
          return new String[] {"Kudu refused a row (" + reason + ")", null};
        }
        return new String[] {null, reason};
      }
    }
    return null;
  }
}
