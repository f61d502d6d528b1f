package io.cdcmirror.spark;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadConstraints;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;

/**
 * A Kafka record's value (UTF-8 JSON bytes) to the fields of a SimpleBinlog message, in one
 * streaming pass over the bytes: the stream writer's fast parse, registered as a Spark SQL
 * function by {@code stream_writer.writer.register_jvm_parse}.
 *
 * <p>Spark's {@code from_json} does the same job, with the schema of
 * {@code stream_writer.transform.MESSAGE_SCHEMA}, and stays the reference (and the fallback
 * without this jar). It costs about a third of the writer's CPU: it decodes the bytes to chars
 * first, and it rebuilds the text of each object-valued field (row images, column types,
 * position) token by token through a JSON generator. Here the bytes are read as bytes and an
 * object-valued field is skipped over and cut out of the input as it came, which is the same
 * JSON.
 *
 * <p>The result has {@code MESSAGE_SCHEMA}'s fields, in its order, with the same meaning:
 * numbers for the three integer fields, text for the others (a string's value; an object or
 * array as its JSON text; another scalar as its literal), a list of such texts for
 * {@code primaryKeys}, and {@code _corrupt_record}, non-null when the value is not one JSON
 * object with fields of the contract's types (then the value itself, decoded, as Spark's
 * permissive mode puts it there). A null value gives a null result. Contract checks beyond
 * types (required fields, version, known event types, …) are Spark expressions applied to
 * both parses alike ({@code stream_writer.transform.error_column}).
 */
public final class SimpleBinlogParse implements UDF1<byte[], Row> {

  private static final long serialVersionUID = 1L;

  // The field order of MESSAGE_SCHEMA (Python is the authority; the tests compare the two).
  private static final int VERSION = 0;
  private static final int BINLOG_OFFSET = 1;
  private static final int EXECUTE_TIME = 2;
  private static final int EVENT_TYPE = 3;
  private static final int SCHEMA_NAME = 4;
  private static final int TABLE_NAME = 5;
  private static final int SOURCE = 6;
  private static final int PRIMARY_KEYS = 7;
  private static final int COLUMN_TYPES = 8;
  private static final int CONTENT = 9;
  private static final int BEFORE_CONTENT = 10;
  private static final int POSITION = 11;
  private static final int CORRUPT = 12;
  private static final int FIELDS = 13;

  /** Thrown for a field whose JSON type the contract does not allow there. */
  private static final class WrongType extends Exception {
    private static final long serialVersionUID = 1L;

    WrongType() {
      super(null, null, false, false);
    }
  }

  private static final WrongType WRONG_TYPE = new WrongType();

  // Jackson's own limits on nesting and number length guard against hostile input; a row
  // image's strings may be long (a TEXT or BLOB column), so no limit on string length.
  private static final JsonFactory FACTORY =
      JsonFactory.builder()
          .streamReadConstraints(StreamReadConstraints.builder().maxStringLength(Integer.MAX_VALUE).build())
          .build();

  @Override
  public Row call(byte[] value) {
    if (value == null) {
      return null;
    }
    Object[] fields = new Object[FIELDS];
    try (JsonParser parser = FACTORY.createParser(value)) {
      if (parser.nextToken() != JsonToken.START_OBJECT) {
        return corrupt(value);
      }
      JsonToken token;
      while ((token = parser.nextToken()) == JsonToken.FIELD_NAME) {
        String name = parser.currentName();
        JsonToken valueToken = parser.nextToken();
        int index = fieldIndex(name);
        if (index < 0) {
          parser.skipChildren();
        } else if (index <= EXECUTE_TIME) {
          fields[index] = integer(parser, valueToken);
        } else if (index == PRIMARY_KEYS) {
          fields[index] = texts(parser, valueToken, value);
        } else {
          fields[index] = text(parser, valueToken, value);
        }
      }
      if (token != JsonToken.END_OBJECT || parser.nextToken() != null) {
        return corrupt(value); // unbalanced, or something after the object
      }
    } catch (IOException | WrongType | RuntimeException e) {
      // Invalid JSON (Jackson's JsonParseException is an IOException), a number out of
      // range or a field of the wrong type: the whole record is corrupt, as in Spark.
      return corrupt(value);
    }
    return RowFactory.create(fields);
  }

  private static int fieldIndex(String name) {
    switch (name) {
      case "version":
        return VERSION;
      case "binlogOffset":
        return BINLOG_OFFSET;
      case "executeTime":
        return EXECUTE_TIME;
      case "eventType":
        return EVENT_TYPE;
      case "schemaName":
        return SCHEMA_NAME;
      case "tableName":
        return TABLE_NAME;
      case "source":
        return SOURCE;
      case "primaryKeys":
        return PRIMARY_KEYS;
      case "columnTypes":
        return COLUMN_TYPES;
      case "content":
        return CONTENT;
      case "beforeContent":
        return BEFORE_CONTENT;
      case "position":
        return POSITION;
      default:
        return -1;
    }
  }

  private static Long integer(JsonParser parser, JsonToken token) throws IOException, WrongType {
    if (token == JsonToken.VALUE_NULL) {
      return null;
    }
    if (token != JsonToken.VALUE_NUMBER_INT) {
      throw WRONG_TYPE;
    }
    // Out of a long's range: Jackson raises (InputCoercionException), a corrupt record.
    return parser.getLongValue();
  }

  /** A string field's value as Spark's from_json gives it for a StringType field. */
  private static String text(JsonParser parser, JsonToken token, byte[] input)
      throws IOException {
    switch (token) {
      case VALUE_NULL:
        return null;
      case VALUE_STRING:
        return parser.getText();
      case START_OBJECT:
      case START_ARRAY:
        // The object as it came: from where its token starts to just past its end.
        int start = (int) parser.currentTokenLocation().getByteOffset();
        parser.skipChildren();
        int end = (int) parser.currentLocation().getByteOffset();
        return new String(input, start, end - start, StandardCharsets.UTF_8);
      default:
        return parser.getText(); // a number or boolean literal
    }
  }

  private static List<String> texts(JsonParser parser, JsonToken token, byte[] input)
      throws IOException, WrongType {
    if (token == JsonToken.VALUE_NULL) {
      return null;
    }
    if (token != JsonToken.START_ARRAY) {
      throw WRONG_TYPE;
    }
    List<String> items = new ArrayList<>(2);
    JsonToken item;
    while ((item = parser.nextToken()) != JsonToken.END_ARRAY) {
      if (item == null) {
        throw WRONG_TYPE; // the input ended inside the array
      }
      items.add(text(parser, item, input));
    }
    return items;
  }

  private static Row corrupt(byte[] value) {
    Object[] fields = new Object[FIELDS];
    fields[CORRUPT] = new String(value, StandardCharsets.UTF_8);
    return RowFactory.create(fields);
  }
}
