package io.relaybus.connect;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.nio.charset.StandardCharsets;
import java.util.List;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.data.Struct;
import org.junit.jupiter.api.Test;

class JsonPayloadsTest {

  private static SchemaAndValue convert(String json) throws UndeliverableException {
    return JsonPayloads.toConnect(json.getBytes(StandardCharsets.UTF_8));
  }

  /** The worked example of the class Javadoc. */
  @Test
  void infersSortedStructsAndMergesArrayElements() throws Exception {
    SchemaAndValue result =
        convert("{\"id\":7,\"tags\":[\"a\"],\"lines\":[{\"n\":1},{\"n\":2.5,\"x\":null}]}");

    Schema schema = result.schema();
    assertThat(schema.type()).isEqualTo(Schema.Type.STRUCT);
    assertThat(schema.isOptional()).isFalse();
    assertThat(schema.fields()).extracting(f -> f.name()).containsExactly("id", "lines", "tags");
    assertThat(schema.field("id").schema()).isEqualTo(Schema.OPTIONAL_INT64_SCHEMA);
    Schema line = schema.field("lines").schema().valueSchema();
    assertThat(line.fields()).extracting(f -> f.name()).containsExactly("n", "x");
    assertThat(line.field("n").schema()).isEqualTo(Schema.OPTIONAL_FLOAT64_SCHEMA);
    assertThat(line.field("x").schema()).isEqualTo(Schema.OPTIONAL_STRING_SCHEMA);

    Struct value = (Struct) result.value();
    value.validate();
    assertThat(value.getInt64("id")).isEqualTo(7L);
    assertThat(value.getArray("tags")).containsExactly("a");
    List<Struct> lines = value.getArray("lines");
    assertThat(lines).extracting(l -> l.getFloat64("n")).containsExactly(1.0, 2.5);
    assertThat(lines.get(0).get("x")).isNull();
  }

  @Test
  void memberOrderDoesNotChangeTheSchema() throws Exception {
    assertThat(convert("{\"a\":1,\"b\":\"x\"}").schema())
        .isEqualTo(convert("{\"b\":\"y\",\"a\":2}").schema());
  }

  @Test
  void topLevelPrimitivesKeepTheirType() throws Exception {
    assertThat(convert("\"hi\"")).isEqualTo(new SchemaAndValue(Schema.STRING_SCHEMA, "hi"));
    assertThat(convert("true")).isEqualTo(new SchemaAndValue(Schema.BOOLEAN_SCHEMA, true));
    assertThat(convert("12")).isEqualTo(new SchemaAndValue(Schema.INT64_SCHEMA, 12L));
  }

  @Test
  void rejectsWhatNoSchemaHoldsAndNamesThePathNotTheValue() {
    assertThatThrownBy(() -> convert("{\"a\":[1,\"secret\"]}"))
        .isInstanceOf(UndeliverableException.class)
        .hasMessage(
            "values at $.a[] have incompatible types int64 and string, which no one schema holds"
                + " (value.format=json)");
    assertThatThrownBy(() -> convert("{\"n\":123456789012345678901234567890}"))
        .hasMessage("integer at $.n does not fit in 64 bits (value.format=json)");
    assertThatThrownBy(() -> convert("null"))
        .hasMessage("payload is JSON null, which would be a tombstone (value.format=json)");
    assertThatThrownBy(() -> convert("{\"\":1}")).hasMessageContaining("member with an empty name");
  }

  @Test
  void rejectsNonJsonWithoutQuotingIt() {
    assertThatThrownBy(() -> convert("secret-token not json"))
        .isInstanceOf(UndeliverableException.class)
        .hasMessageStartingWith("payload is not valid JSON (value.format=json) at line 1")
        .hasMessageNotContaining("secret");
    assertThatThrownBy(() -> convert("{\"a\":1} {\"b\":2}"))
        .hasMessageStartingWith("payload is not valid JSON");
    assertThatThrownBy(() -> convert("{\"a\":1,\"a\":2}"))
        .hasMessageStartingWith("payload is not valid JSON");
    assertThatThrownBy(() -> convert(""))
        .hasMessage("payload is empty, not JSON (value.format=json)");
  }

  /**
   * An integer beyond 64 bits is dead-lettered, but a number beyond float64's range (1e400, a valid
   * JSON number) is parsed by Jackson to Infinity and sent as such: JsonConverter then writes the
   * string "Infinity" where the payload had a number, so consumers get another type and value than
   * the application published, silently. It must be dead-lettered naming its path, as the integer
   * is.
   */
  @Test
  void numberBeyondFloat64IsDeadLetteredNotSentAsInfinity() throws Exception {
    SchemaAndValue converted;
    try {
      converted = convert("{\"total\":1e400}");
    } catch (UndeliverableException e) {
      assertThat(e).hasMessageContaining("$.total").hasMessageNotContaining("1e400");
      return;
    }
    org.apache.kafka.connect.json.JsonConverter json =
        new org.apache.kafka.connect.json.JsonConverter();
    json.configure(java.util.Map.of("schemas.enable", "false"), false);
    String written =
        new String(
            json.fromConnectData("t", converted.schema(), converted.value()),
            StandardCharsets.UTF_8);
    org.assertj.core.api.Assertions.fail(
        "payload {\"total\":1e400} was not dead-lettered; its record holds %s and JsonConverter"
            + " writes %s",
        converted.value(), written);
  }
}
