package io.relaybus.connect;

import com.fasterxml.jackson.core.JsonLocation;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.StreamReadFeature;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.json.JsonMapper;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.data.SchemaBuilder;
import org.apache.kafka.connect.data.Struct;

/**
 * {@code value.format=json}: parses a payload as one JSON value and gives it a Connect schema
 * inferred from the value itself, so a schema-aware converter writes structured data.
 *
 * <p>The inference, in full: an object is a struct whose fields are its members sorted by name (so
 * member order does not change the schema); a string is a string, {@code true}/{@code false} a
 * boolean, an integer an int64, any other number a float64; an array is an array of one element
 * schema. Nested schemas are optional. Where values meet (array elements), shapes merge: structs
 * take the union of their fields, int64 and float64 give float64, {@code null} and {@code []} take
 * the other's type. Worked example: {@code
 * {"id":7,"tags":["a"],"lines":[{"n":1},{"n":2.5,"x":null}]}} gives {@code struct{id:int64,
 * lines:array<struct{n:float64, x:string}>, tags:array<string>}}.
 *
 * <p>Dead-lettered (the reason names the path, never a value): no JSON or trailing data, a
 * duplicate member, an integer beyond 64 bits, a number beyond float64's range, elements of
 * incompatible types, an empty member name, and a top-level {@code null} (it would be a tombstone).
 *
 * <p>Limit: each record carries its own schema, so payloads of one type whose shapes vary (a member
 * sometimes missing, {@code []} vs {@code [1]}) give different schemas; a schema registry may
 * reject that under strict compatibility. Use {@code value.format=bytes} or {@code string} then.
 */
final class JsonPayloads {
  private static final ObjectMapper MAPPER =
      JsonMapper.builder()
          .enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION)
          .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS)
          .build();

  private JsonPayloads() {}

  /** The payload as a schema'd Connect value. */
  static SchemaAndValue toConnect(byte[] payload) throws UndeliverableException {
    JsonNode root = parse(payload);
    if (root.isNull()) {
      throw new UndeliverableException(
          "payload is JSON null, which would be a tombstone (value.format=json)");
    }
    Shape shape = infer(root, "$");
    Schema schema = shape.toSchema(false);
    return new SchemaAndValue(schema, value(root, schema));
  }

  private static JsonNode parse(byte[] payload) throws UndeliverableException {
    JsonNode root;
    try {
      root = MAPPER.readTree(payload);
    } catch (JsonProcessingException e) {
      // The parser's own message quotes the offending text: report only where it failed.
      JsonLocation at = e.getLocation();
      throw new UndeliverableException(
          "payload is not valid JSON (value.format=json)"
              + (at == null
                  ? ""
                  : " at line %d, column %d".formatted(at.getLineNr(), at.getColumnNr())));
    } catch (IOException e) {
      throw new UndeliverableException("payload is not valid JSON (value.format=json)");
    }
    if (root == null || root.isMissingNode()) {
      throw new UndeliverableException("payload is empty, not JSON (value.format=json)");
    }
    return root;
  }

  /**
   * An inferred shape: {@code type == null} is still unknown (only nulls or empty arrays seen).
   * Struct fields are kept sorted by name.
   */
  private record Shape(Schema.Type type, SortedMap<String, Shape> fields, Shape element) {
    static final Shape UNKNOWN = new Shape(null, null, null);

    static Shape of(Schema.Type type) {
      return new Shape(type, null, null);
    }

    Schema toSchema(boolean optional) {
      SchemaBuilder builder;
      if (type == null) {
        builder = SchemaBuilder.string();
      } else if (type == Schema.Type.STRUCT) {
        builder = SchemaBuilder.struct();
        for (Map.Entry<String, Shape> field : fields.entrySet()) {
          builder.field(field.getKey(), field.getValue().toSchema(true));
        }
      } else if (type == Schema.Type.ARRAY) {
        builder = SchemaBuilder.array(element.toSchema(true));
      } else {
        builder = SchemaBuilder.type(type);
      }
      return optional ? builder.optional().build() : builder.build();
    }

    String label() {
      return type == null ? "null" : type.getName();
    }
  }

  private static Shape infer(JsonNode node, String path) throws UndeliverableException {
    if (node.isNull()) {
      return Shape.UNKNOWN;
    }
    if (node.isTextual()) {
      return Shape.of(Schema.Type.STRING);
    }
    if (node.isBoolean()) {
      return Shape.of(Schema.Type.BOOLEAN);
    }
    if (node.isIntegralNumber()) {
      if (!node.canConvertToLong()) {
        throw new UndeliverableException(
            "integer at %s does not fit in 64 bits (value.format=json)".formatted(path));
      }
      return Shape.of(Schema.Type.INT64);
    }
    if (node.isNumber()) {
      // Jackson reads a number beyond float64's range as Infinity
      if (!Double.isFinite(node.doubleValue())) {
        throw new UndeliverableException(
            "number at %s is beyond the range of float64 (value.format=json)".formatted(path));
      }
      return Shape.of(Schema.Type.FLOAT64);
    }
    if (node.isArray()) {
      Shape element = Shape.UNKNOWN;
      for (JsonNode item : node) {
        element = merge(element, infer(item, path + "[]"), path + "[]");
      }
      return new Shape(Schema.Type.ARRAY, null, element);
    }
    if (node.isObject()) {
      SortedMap<String, Shape> fields = new TreeMap<>();
      for (Map.Entry<String, JsonNode> member : node.properties()) {
        if (member.getKey().isEmpty()) {
          throw new UndeliverableException(
              "object at %s has a member with an empty name, which no struct field can have"
                  .formatted(path));
        }
        fields.put(member.getKey(), infer(member.getValue(), path + "." + member.getKey()));
      }
      return new Shape(Schema.Type.STRUCT, fields, null);
    }
    throw new UndeliverableException("unsupported JSON value at " + path);
  }

  private static Shape merge(Shape a, Shape b, String path) throws UndeliverableException {
    if (a.type() == null) {
      return b;
    }
    if (b.type() == null) {
      return a;
    }
    if (a.type() == b.type()) {
      return switch (a.type()) {
        case STRUCT -> {
          SortedMap<String, Shape> fields = new TreeMap<>(a.fields());
          for (Map.Entry<String, Shape> field : b.fields().entrySet()) {
            Shape mine = fields.get(field.getKey());
            fields.put(
                field.getKey(),
                mine == null
                    ? field.getValue()
                    : merge(mine, field.getValue(), path + "." + field.getKey()));
          }
          yield new Shape(Schema.Type.STRUCT, fields, null);
        }
        case ARRAY ->
            new Shape(Schema.Type.ARRAY, null, merge(a.element(), b.element(), path + "[]"));
        default -> a;
      };
    }
    if (isNumber(a) && isNumber(b)) {
      return Shape.of(Schema.Type.FLOAT64);
    }
    throw new UndeliverableException(
        "values at %s have incompatible types %s and %s, which no one schema holds (value.format=json)"
            .formatted(path, a.label(), b.label()));
  }

  private static boolean isNumber(Shape shape) {
    return shape.type() == Schema.Type.INT64 || shape.type() == Schema.Type.FLOAT64;
  }

  /** The Connect value of {@code node} under the (merged) {@code schema}. */
  private static Object value(JsonNode node, Schema schema) {
    if (node == null || node.isNull()) {
      return null;
    }
    return switch (schema.type()) {
      case STRING -> node.asText();
      case BOOLEAN -> node.booleanValue();
      case INT64 -> node.longValue();
      case FLOAT64 -> node.doubleValue();
      case ARRAY -> {
        List<Object> items = new ArrayList<>(node.size());
        for (JsonNode item : node) {
          items.add(value(item, schema.valueSchema()));
        }
        yield items;
      }
      case STRUCT -> {
        Struct struct = new Struct(schema);
        for (org.apache.kafka.connect.data.Field field : schema.fields()) {
          struct.put(field, value(node.get(field.name()), field.schema()));
        }
        yield struct;
      }
      default -> throw new IllegalStateException("no JSON value has schema type " + schema.type());
    };
  }
}
