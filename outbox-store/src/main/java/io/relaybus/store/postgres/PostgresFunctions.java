package io.relaybus.store.postgres;

import io.relaybus.store.Validation;
import java.util.List;

/**
 * The SQL functions that let an application in any language publish and schedule in its own
 * transaction with one {@code SELECT}: {@code <schema>.<prefix>publish}, {@code
 * <schema>.<prefix>schedule} and {@code <schema>.<prefix>cancel_timer}. Schema version 2 ({@link
 * PostgresMigrations}), so {@code setup()} installs them and {@code schemaSql()} prints them. A
 * change to them is a new migration, never an edit of these: version 2 is frozen.
 *
 * <p>They run the statements of {@link PostgresPublisher} and {@link PostgresTimers}, one per step
 * (each with its own snapshot under READ COMMITTED, as the Java calls), and refuse what {@link
 * io.relaybus.store.OutboxEvent} and {@link io.relaybus.store.Timer} refuse, with the same messages
 * (SQLSTATE 22023, invalid_parameter_value). {@code SqlPublishFunctionTest} proves that they and
 * the Java store write the same rows for the same calls.
 */
final class PostgresFunctions {
  private PostgresFunctions() {}

  static List<String> statements() {
    return List.of(JAVA_LENGTH, CHECK_EVENT, ARM, REMOVE, PUBLISH, SCHEDULE, CANCEL_TIMER);
  }

  /**
   * The functions on storage v2 (the migration after {@link PostgresMigrations#LOG_STORAGE}): the
   * same signatures, checks and results, written as {@link PostgresPublisher} and {@link
   * PostgresTimers} write now. {@code publish} locks the key ({@code {lock_keys}}), takes the
   * transaction's xid before a log id and appends one log row per event (a republish: one row for
   * the handlers the event did not have), and writes no key-sequence row and no delivery row;
   * {@code arm_} (under {@code schedule}) numbers a keyed timer from the log's sequence under the
   * key's lock and records its xid. {@code schedule}, {@code cancel_timer} and {@code
   * remove_timer_} write only timer rows and stay as version 2 made them. Version 2's text stays as
   * released: the functions are replaced by this later migration, which is frozen in turn once
   * released.
   */
  static List<String> v2Statements() {
    return List.of(ARM_V2, PUBLISH_V2);
  }

  /**
   * {@code publish} of {@link #v2Statements()}, writing into each log row where its event row was
   * written ({@code event_tid}, the migration {@link PostgresMigrations#EVENT_TID}), as {@link
   * PostgresPublisher} does; nothing else changes.
   */
  static List<String> v3Statements() {
    return List.of(PUBLISH_V3);
  }

  /** The signatures, as to_regprocedure takes them: setup() reinstalls when one is missing. */
  static final List<String> SIGNATURES =
      List.of(
          "{schema}.{p}publish(text,text,text,bytea,text,json,text[])",
          "{schema}.{p}schedule(text,text,text,bytea,text,json,text[],timestamptz,text,text)",
          "{schema}.{p}cancel_timer(text,text)");

  // A string's length as Java counts it (UTF-16 units: a character beyond the BMP counts twice),
  // for limits and messages identical to OutboxEvent's. Callers skip it when the UTF-8 byte count
  // (never less than the UTF-16 length) is within the limit.
  private static final String JAVA_LENGTH =
      """
      CREATE OR REPLACE FUNCTION {schema}.{p}java_length_(s text) RETURNS integer
      LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
        SELECT length(s) + (SELECT count(*)::integer FROM regexp_split_to_table(s, '') AS c
                            WHERE ascii(c) > 65535)
      $$""";

  // OutboxEvent's checks, message for message.
  private static final String CHECK_EVENT =
      """
      CREATE OR REPLACE FUNCTION {schema}.{p}check_event(
        p_id text, p_type text, p_key text, p_payload bytea, p_content_type text, p_headers json,
        p_handlers text[]) RETURNS void
      LANGUAGE plpgsql IMMUTABLE AS $$
      DECLARE
        h text;
        field record;
        seen text[] := '{}';
      BEGIN
        IF p_id IS NULL OR p_id ~ '^[[:space:]]*$' THEN
          RAISE EXCEPTION 'event id must not be blank, but was %', coalesce('''' || p_id || '''', 'null')
            USING ERRCODE = 'invalid_parameter_value';
        ELSIF octet_length(p_id) > MAX_EVENT_ID AND {schema}.{p}java_length_(p_id) > MAX_EVENT_ID THEN
          RAISE EXCEPTION 'event id must be at most MAX_EVENT_ID characters, but was % characters', {schema}.{p}java_length_(p_id)
            USING ERRCODE = 'invalid_parameter_value';
        ELSIF p_id ~ '^[[:space:]]|[[:space:]]$' THEN
          RAISE EXCEPTION 'event id must not start or end with white space, but was ''%''', p_id
            USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF p_type IS NULL OR p_type ~ '^[[:space:]]*$' THEN
          RAISE EXCEPTION 'type must not be blank, but was %', coalesce('''' || p_type || '''', 'null')
            USING ERRCODE = 'invalid_parameter_value';
        ELSIF octet_length(p_type) > MAX_TYPE AND {schema}.{p}java_length_(p_type) > MAX_TYPE THEN
          RAISE EXCEPTION 'type must be at most MAX_TYPE characters, but was % characters', {schema}.{p}java_length_(p_type)
            USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF p_key IS NOT NULL AND p_key ~ '^[[:space:]]*$' THEN
          RAISE EXCEPTION 'key must not be blank, but was ''%''', p_key
            USING ERRCODE = 'invalid_parameter_value';
        ELSIF octet_length(p_key) > MAX_KEY AND {schema}.{p}java_length_(p_key) > MAX_KEY THEN
          RAISE EXCEPTION 'key must be at most MAX_KEY characters, but was % characters', {schema}.{p}java_length_(p_key)
            USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF p_payload IS NULL THEN
          RAISE EXCEPTION 'payload must not be null (use an empty bytea, ''\\x'')'
            USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF p_content_type IS NULL OR p_content_type ~ '^[[:space:]]*$' THEN
          RAISE EXCEPTION 'contentType must not be blank, but was %', coalesce('''' || p_content_type || '''', 'null')
            USING ERRCODE = 'invalid_parameter_value';
        ELSIF octet_length(p_content_type) > MAX_TYPE AND {schema}.{p}java_length_(p_content_type) > MAX_TYPE THEN
          RAISE EXCEPTION 'contentType must be at most MAX_TYPE characters, but was % characters', {schema}.{p}java_length_(p_content_type)
            USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF p_headers IS NULL OR json_typeof(p_headers) <> 'object' THEN
          RAISE EXCEPTION 'headers must be a JSON object of string values (''{}'' for none), but were %', coalesce(p_headers::text, 'null')
            USING ERRCODE = 'invalid_parameter_value';
        END IF;
        FOR field IN SELECT * FROM json_each(p_headers) LOOP
          IF field.key ~ '^[[:space:]]*$' THEN
            RAISE EXCEPTION 'header name must not be blank, but was ''%''', field.key
              USING ERRCODE = 'invalid_parameter_value';
          ELSIF octet_length(field.key) > MAX_HEADER_NAME AND {schema}.{p}java_length_(field.key) > MAX_HEADER_NAME THEN
            RAISE EXCEPTION 'header name must be at most MAX_HEADER_NAME characters, but was % characters', {schema}.{p}java_length_(field.key)
              USING ERRCODE = 'invalid_parameter_value';
          ELSIF json_typeof(field.value) <> 'string' THEN
            RAISE EXCEPTION 'headers must be a JSON object of string values, but header ''%'' is %', field.key, field.value
              USING ERRCODE = 'invalid_parameter_value';
          ELSIF octet_length(field.value #>> '{}') > MAX_HEADER_VALUE AND {schema}.{p}java_length_(field.value #>> '{}') > MAX_HEADER_VALUE THEN
            RAISE EXCEPTION 'header ''%'' must be at most MAX_HEADER_VALUE characters, but was % characters', field.key, {schema}.{p}java_length_(field.value #>> '{}')
              USING ERRCODE = 'invalid_parameter_value';
          END IF;
        END LOOP;
        IF p_handlers IS NULL OR cardinality(p_handlers) = 0 THEN
          RAISE EXCEPTION 'handlers must name at least one handler, but were %', coalesce(p_handlers::text, 'null')
            USING ERRCODE = 'invalid_parameter_value';
        END IF;
        FOREACH h IN ARRAY p_handlers LOOP
          IF h IS NULL OR h ~ '^[[:space:]]*$' THEN
            RAISE EXCEPTION 'handler must not be blank, but was %', coalesce('''' || h || '''', 'null')
              USING ERRCODE = 'invalid_parameter_value';
          ELSIF octet_length(h) > MAX_HANDLER AND {schema}.{p}java_length_(h) > MAX_HANDLER THEN
            RAISE EXCEPTION 'handler must be at most MAX_HANDLER characters, but was % characters', {schema}.{p}java_length_(h)
              USING ERRCODE = 'invalid_parameter_value';
          ELSIF h !~ '^[A-Za-z0-9._-]+$' THEN
            RAISE EXCEPTION 'handler must match [A-Za-z0-9._-]+ (it becomes part of a topic name), but was ''%''', h
              USING ERRCODE = 'invalid_parameter_value';
          ELSIF h = ANY (seen) THEN
            RAISE EXCEPTION 'handlers must be distinct, but ''%'' is listed twice', h
              USING ERRCODE = 'invalid_parameter_value';
          END IF;
          seen := seen || h;
        END LOOP;
      END
      $$"""
          .replace("MAX_EVENT_ID", String.valueOf(Validation.MAX_EVENT_ID_LENGTH))
          .replace("MAX_TYPE", String.valueOf(Validation.MAX_TYPE_LENGTH))
          .replace("MAX_KEY", String.valueOf(Validation.MAX_KEY_LENGTH))
          .replace("MAX_HEADER_NAME", String.valueOf(Validation.MAX_HEADER_NAME_LENGTH))
          .replace("MAX_HEADER_VALUE", String.valueOf(Validation.MAX_HEADER_VALUE_LENGTH))
          .replace("MAX_HANDLER", String.valueOf(Validation.MAX_HANDLER_LENGTH));

  /**
   * {@code check_event} of schema version 19: it refuses U+0000 in a header's name or value (the
   * escape backslash-u0000 in the JSON) as {@link Validation} does, with 22023 and its message;
   * before, json_each failed on it with 22P05. json_each cannot read it, so headers that hold it
   * are read twice, with it turned into U+0001 and into U+0002: where the readings differ, it was
   * U+0000.
   */
  static List<String> checkEventRefusingNul() {
    return List.of(CHECK_EVENT_NUL);
  }

  private static final String CHECK_EVENT_NUL =
      replaceOnce(
          replaceOnce(
              replaceOnce(
                  replaceOnce(
                      CHECK_EVENT,
                      "  seen text[] := '{}';\n",
                      "  seen text[] := '{}';\n  marked1 json;\n  marked2 json;\n  at integer;\n"),
                  "  FOR field IN SELECT * FROM json_each(p_headers) LOOP\n",
                  """
                    marked1 := p_headers;
                    IF strpos(p_headers::text, '\\u0000') > 0 THEN
                      marked1 := regexp_replace(p_headers::text, '(?<!\\\\)((?:\\\\\\\\)*)\\\\u0000', '\\1\\\\u0001', 'g')::json;
                      marked2 := regexp_replace(p_headers::text, '(?<!\\\\)((?:\\\\\\\\)*)\\\\u0000', '\\1\\\\u0002', 'g')::json;
                    END IF;
                    FOR field IN SELECT a.key, a.value, b.key AS key2, b.value #>> '{}' AS value2
                                 FROM json_each(marked1) WITH ORDINALITY AS a(key, value, n)
                                 LEFT JOIN json_each(marked2) WITH ORDINALITY AS b(key, value, n)
                                   ON b.n = a.n LOOP
                  """),
              "        USING ERRCODE = 'invalid_parameter_value';\n"
                  + "    ELSIF json_typeof(field.value) <> 'string' THEN\n",
              """
                        USING ERRCODE = 'invalid_parameter_value';
                    ELSIF field.key2 <> field.key THEN
                      at := (SELECT min(i) FROM generate_series(1, length(field.key)) AS i
                             WHERE substr(field.key, i, 1) <> substr(field.key2, i, 1));
                      RAISE EXCEPTION 'header name must not contain the character U+0000 (NUL), but did at index %', {schema}.{p}java_length_(left(field.key, at - 1))
                        USING ERRCODE = 'invalid_parameter_value';
                    ELSIF json_typeof(field.value) <> 'string' THEN
                """),
          "        USING ERRCODE = 'invalid_parameter_value';\n    END IF;\n  END LOOP;\n",
          """
                    USING ERRCODE = 'invalid_parameter_value';
                ELSIF field.value2 <> field.value #>> '{}' THEN
                  at := (SELECT min(i) FROM generate_series(1, length(field.value2)) AS i
                         WHERE substr(field.value #>> '{}', i, 1) <> substr(field.value2, i, 1));
                  RAISE EXCEPTION 'header ''%'' must not contain the character U+0000 (NUL), but did at index %', field.key, {schema}.{p}java_length_(left(field.value #>> '{}', at - 1))
                    USING ERRCODE = 'invalid_parameter_value';
                END IF;
              END LOOP;
            """);

  /**
   * {@code check_event} of schema version 20: {@link #checkEventRefusingNul()} refusing more than
   * {@link Validation#MAX_HANDLERS} handlers, as OutboxEvent does. A delivery's id on the log has
   * room for 1024 handlers per log row: the 1025th delivery of an event took the id of the next
   * row's first and was never claimed.
   */
  static List<String> checkEventLimitingHandlers() {
    return List.of(CHECK_EVENT_HANDLERS);
  }

  private static final String CHECK_EVENT_HANDLERS =
      replaceOnce(
          CHECK_EVENT_NUL,
          "      USING ERRCODE = 'invalid_parameter_value';\n  END IF;\n  FOREACH h IN ARRAY p_handlers LOOP\n",
          """
                USING ERRCODE = 'invalid_parameter_value';
            ELSIF cardinality(p_handlers) > MAX_HANDLERS THEN
              RAISE EXCEPTION 'handlers must name at most MAX_HANDLERS handlers, but named %', cardinality(p_handlers)
                USING ERRCODE = 'invalid_parameter_value';
            END IF;
            FOREACH h IN ARRAY p_handlers LOOP
          """
              .replace("MAX_HANDLERS", String.valueOf(Validation.MAX_HANDLERS)));

  /**
   * {@code check_event} of schema version 27, checking text as {@link Validation} does whatever the
   * database's locale and whatever the JSON escapes:
   *
   * <ul>
   *   <li>White space is Java's ({@link Character#isWhitespace}, which {@code String.isBlank} and
   *       {@code String.strip} use), written out as regular-expression escapes. Before, the
   *       function matched {@code [[:space:]]}, which follows the database's character
   *       classification: under {@code C.UTF-8} it missed U+001C to U+001F, under {@code C} every
   *       white space beyond ASCII, and under ICU it took U+00A0 and U+0085, which Java does not.
   *       An event id ending in U+001F, or a key, type, content type or header name of only such
   *       characters, was published, and every Java reader refused it (the inbox dead-lettered it
   *       as poison).
   *   <li>A header name or value whose JSON escapes a surrogate without its pair ({@code \ud83d}
   *       alone) is refused with Java's message, naming the header, the surrogate and its index.
   *       json_each cannot read it: the function failed with 22P02 ("invalid input syntax for type
   *       json"), naming neither the header nor the rule. The headers are read twice, as version 19
   *       reads U+0000, with such surrogates turned into U+E800 to U+EFFF, and into U+F800 to
   *       U+FFFF; a surrogate with its pair is kept aside meanwhile, as control characters that
   *       JSON text cannot hold unescaped.
   * </ul>
   *
   * Nothing else changes. Frozen with migration 27: written out, limits included.
   */
  static List<String> checkEventAsJavaChecksText() {
    return List.of(
        CHECK_EVENT_V27,
        javasWhiteSpace(SCHEDULE_CHECKING_FIRE_AT),
        javasWhiteSpace(CANCEL_TIMER_CHECKED));
  }

  /**
   * Java's white space ({@link Character#isWhitespace}) as a bracket expression of PostgreSQL's
   * regular expressions, whose escapes name the characters whatever the locale: what {@code
   * check_event} of version 27 writes out. Frozen with migration 27.
   */
  private static final String JAVA_WHITE_SPACE =
      "[\\u0009-\\u000d\\u001c-\\u0020\\u1680\\u2000-\\u2006\\u2008-\\u200a\\u2028\\u2029\\u205f\\u3000]";

  /**
   * {@code function} (version 26's {@code schedule}, version 24's {@code cancel_timer}) with the
   * timer id's and handler's white space taken as Java takes it, as row 148 did for {@code
   * check_event}: a timer armed with SQL under an id ending in U+001F could not be cancelled from
   * Java, which refuses such an id.
   */
  private static String javasWhiteSpace(String function) {
    if (!function.contains("[[:space:]]")) {
      throw new IllegalStateException("no [[:space:]] to replace");
    }
    return function.replace("[[:space:]]", JAVA_WHITE_SPACE);
  }

  private static final String CHECK_EVENT_V27 =
      """
      CREATE OR REPLACE FUNCTION {schema}.{p}check_event(
        p_id text, p_type text, p_key text, p_payload bytea, p_content_type text, p_headers json,
        p_handlers text[]) RETURNS void
      LANGUAGE plpgsql IMMUTABLE AS $$
      DECLARE
        h text;
        field record;
        seen text[] := '{}';
        marked1 json;
        marked2 json;
        at integer;
        code integer;
        t1 text;
        t2 text;
      BEGIN
        IF p_id IS NULL OR p_id ~ '^[\\u0009-\\u000d\\u001c-\\u0020\\u1680\\u2000-\\u2006\\u2008-\\u200a\\u2028\\u2029\\u205f\\u3000]*$' THEN
          RAISE EXCEPTION 'event id must not be blank, but was %', coalesce('''' || p_id || '''', 'null')
            USING ERRCODE = 'invalid_parameter_value';
        ELSIF octet_length(p_id) > 200 AND {schema}.{p}java_length_(p_id) > 200 THEN
          RAISE EXCEPTION 'event id must be at most 200 characters, but was % characters', {schema}.{p}java_length_(p_id)
            USING ERRCODE = 'invalid_parameter_value';
        ELSIF p_id ~ '^[\\u0009-\\u000d\\u001c-\\u0020\\u1680\\u2000-\\u2006\\u2008-\\u200a\\u2028\\u2029\\u205f\\u3000]|[\\u0009-\\u000d\\u001c-\\u0020\\u1680\\u2000-\\u2006\\u2008-\\u200a\\u2028\\u2029\\u205f\\u3000]$' THEN
          RAISE EXCEPTION 'event id must not start or end with white space, but was ''%''', p_id
            USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF p_type IS NULL OR p_type ~ '^[\\u0009-\\u000d\\u001c-\\u0020\\u1680\\u2000-\\u2006\\u2008-\\u200a\\u2028\\u2029\\u205f\\u3000]*$' THEN
          RAISE EXCEPTION 'type must not be blank, but was %', coalesce('''' || p_type || '''', 'null')
            USING ERRCODE = 'invalid_parameter_value';
        ELSIF octet_length(p_type) > 200 AND {schema}.{p}java_length_(p_type) > 200 THEN
          RAISE EXCEPTION 'type must be at most 200 characters, but was % characters', {schema}.{p}java_length_(p_type)
            USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF p_key IS NOT NULL AND p_key ~ '^[\\u0009-\\u000d\\u001c-\\u0020\\u1680\\u2000-\\u2006\\u2008-\\u200a\\u2028\\u2029\\u205f\\u3000]*$' THEN
          RAISE EXCEPTION 'key must not be blank, but was ''%''', p_key
            USING ERRCODE = 'invalid_parameter_value';
        ELSIF octet_length(p_key) > 1000 AND {schema}.{p}java_length_(p_key) > 1000 THEN
          RAISE EXCEPTION 'key must be at most 1000 characters, but was % characters', {schema}.{p}java_length_(p_key)
            USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF p_payload IS NULL THEN
          RAISE EXCEPTION 'payload must not be null (use an empty bytea, ''\\x'')'
            USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF p_content_type IS NULL OR p_content_type ~ '^[\\u0009-\\u000d\\u001c-\\u0020\\u1680\\u2000-\\u2006\\u2008-\\u200a\\u2028\\u2029\\u205f\\u3000]*$' THEN
          RAISE EXCEPTION 'contentType must not be blank, but was %', coalesce('''' || p_content_type || '''', 'null')
            USING ERRCODE = 'invalid_parameter_value';
        ELSIF octet_length(p_content_type) > 200 AND {schema}.{p}java_length_(p_content_type) > 200 THEN
          RAISE EXCEPTION 'contentType must be at most 200 characters, but was % characters', {schema}.{p}java_length_(p_content_type)
            USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF p_headers IS NULL OR json_typeof(p_headers) <> 'object' THEN
          RAISE EXCEPTION 'headers must be a JSON object of string values (''{}'' for none), but were %', coalesce(p_headers::text, 'null')
            USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- Headers are read twice, U+0000 (\\u0000) and surrogates without their pair (\\uD800 to \\uDFFF)
        -- turned into U+0001 and U+E800 to U+EFFF in the first reading, into U+0002 and U+F800 to U+FFFF
        -- in the second: json_each can read neither, and where the readings differ, one was. A high
        -- surrogate with its low one is a character: kept aside meanwhile as control characters, which
        -- JSON text cannot hold unescaped.
        marked1 := p_headers;
        IF strpos(p_headers::text, '\\u0000') > 0 OR p_headers::text ~* '\\\\ud[89a-f]' THEN
          t1 := regexp_replace(p_headers::text,
                  '(?<!\\\\)((?:\\\\\\\\)*)\\\\u([dD][89abAB][0-9a-fA-F]{2})\\\\u([dD][c-fC-F][0-9a-fA-F]{2})',
                  '\\1' || chr(1) || '\\2' || chr(2) || '\\3', 'g');
          t2 := regexp_replace(t1, '(?<!\\\\)((?:\\\\\\\\)*)\\\\u0000', '\\1\\\\u0002', 'g');
          t1 := regexp_replace(t1, '(?<!\\\\)((?:\\\\\\\\)*)\\\\u0000', '\\1\\\\u0001', 'g');
          t1 := regexp_replace(t1, '(?<!\\\\)((?:\\\\\\\\)*)\\\\u[dD]([89a-fA-F][0-9a-fA-F]{2})', '\\1\\\\uE\\2', 'g');
          t2 := regexp_replace(t2, '(?<!\\\\)((?:\\\\\\\\)*)\\\\u[dD]([89a-fA-F][0-9a-fA-F]{2})', '\\1\\\\uF\\2', 'g');
          marked1 := regexp_replace(t1, chr(1) || '([0-9a-fA-F]{4})' || chr(2) || '([0-9a-fA-F]{4})',
                                    '\\\\u\\1\\\\u\\2', 'g')::json;
          marked2 := regexp_replace(t2, chr(1) || '([0-9a-fA-F]{4})' || chr(2) || '([0-9a-fA-F]{4})',
                                    '\\\\u\\1\\\\u\\2', 'g')::json;
        END IF;
        FOR field IN SELECT a.key, a.value, b.key AS key2, b.value #>> '{}' AS value2
                     FROM json_each(marked1) WITH ORDINALITY AS a(key, value, n)
                     LEFT JOIN json_each(marked2) WITH ORDINALITY AS b(key, value, n)
                       ON b.n = a.n LOOP
          IF field.key ~ '^[\\u0009-\\u000d\\u001c-\\u0020\\u1680\\u2000-\\u2006\\u2008-\\u200a\\u2028\\u2029\\u205f\\u3000]*$' THEN
            RAISE EXCEPTION 'header name must not be blank, but was ''%''', field.key
              USING ERRCODE = 'invalid_parameter_value';
          ELSIF octet_length(field.key) > 200 AND {schema}.{p}java_length_(field.key) > 200 THEN
            RAISE EXCEPTION 'header name must be at most 200 characters, but was % characters', {schema}.{p}java_length_(field.key)
              USING ERRCODE = 'invalid_parameter_value';
          ELSIF field.key2 <> field.key THEN
            -- U+0000 first, anywhere, as Java looks; then the first surrogate without its pair
            at := (SELECT min(c.i)
                   FROM unnest(regexp_split_to_array(field.key, ''), regexp_split_to_array(field.key2, ''))
                     WITH ORDINALITY AS c(x, y, i)
                   WHERE c.x <> c.y AND c.x = chr(1));
            IF at IS NOT NULL THEN
              RAISE EXCEPTION 'header name must not contain the character U+0000 (NUL), but did at index %', {schema}.{p}java_length_(left(field.key, at - 1))
                USING ERRCODE = 'invalid_parameter_value';
            END IF;
            SELECT c.i, ascii(c.x) - 4096 INTO at, code
            FROM unnest(regexp_split_to_array(field.key, ''), regexp_split_to_array(field.key2, ''))
              WITH ORDINALITY AS c(x, y, i)
            WHERE c.x <> c.y ORDER BY c.i LIMIT 1;
            RAISE EXCEPTION 'header name must be well-formed UTF-16, but had the unpaired surrogate U+% at index %', upper(to_hex(code)), {schema}.{p}java_length_(left(field.key, at - 1))
              USING ERRCODE = 'invalid_parameter_value';
          ELSIF json_typeof(field.value) <> 'string' THEN
            RAISE EXCEPTION 'headers must be a JSON object of string values, but header ''%'' is %', field.key, field.value
              USING ERRCODE = 'invalid_parameter_value';
          ELSIF octet_length(field.value #>> '{}') > 8192 AND {schema}.{p}java_length_(field.value #>> '{}') > 8192 THEN
            RAISE EXCEPTION 'header ''%'' must be at most 8192 characters, but was % characters', field.key, {schema}.{p}java_length_(field.value #>> '{}')
              USING ERRCODE = 'invalid_parameter_value';
          ELSIF field.value2 <> field.value #>> '{}' THEN
            at := (SELECT min(c.i)
                   FROM unnest(regexp_split_to_array(field.value #>> '{}', ''), regexp_split_to_array(field.value2, ''))
                     WITH ORDINALITY AS c(x, y, i)
                   WHERE c.x <> c.y AND c.x = chr(1));
            IF at IS NOT NULL THEN
              RAISE EXCEPTION 'header ''%'' must not contain the character U+0000 (NUL), but did at index %', field.key, {schema}.{p}java_length_(left(field.value #>> '{}', at - 1))
                USING ERRCODE = 'invalid_parameter_value';
            END IF;
            SELECT c.i, ascii(c.x) - 4096 INTO at, code
            FROM unnest(regexp_split_to_array(field.value #>> '{}', ''), regexp_split_to_array(field.value2, ''))
              WITH ORDINALITY AS c(x, y, i)
            WHERE c.x <> c.y ORDER BY c.i LIMIT 1;
            RAISE EXCEPTION 'header ''%'' must be well-formed UTF-16, but had the unpaired surrogate U+% at index %', field.key, upper(to_hex(code)), {schema}.{p}java_length_(left(field.value #>> '{}', at - 1))
              USING ERRCODE = 'invalid_parameter_value';
          END IF;
        END LOOP;
        IF p_handlers IS NULL OR cardinality(p_handlers) = 0 THEN
          RAISE EXCEPTION 'handlers must name at least one handler, but were %', coalesce(p_handlers::text, 'null')
            USING ERRCODE = 'invalid_parameter_value';
        ELSIF cardinality(p_handlers) > 1000 THEN
          RAISE EXCEPTION 'handlers must name at most 1000 handlers, but named %', cardinality(p_handlers)
            USING ERRCODE = 'invalid_parameter_value';
        END IF;
        FOREACH h IN ARRAY p_handlers LOOP
          IF h IS NULL OR h ~ '^[\\u0009-\\u000d\\u001c-\\u0020\\u1680\\u2000-\\u2006\\u2008-\\u200a\\u2028\\u2029\\u205f\\u3000]*$' THEN
            RAISE EXCEPTION 'handler must not be blank, but was %', coalesce('''' || h || '''', 'null')
              USING ERRCODE = 'invalid_parameter_value';
          ELSIF octet_length(h) > 200 AND {schema}.{p}java_length_(h) > 200 THEN
            RAISE EXCEPTION 'handler must be at most 200 characters, but was % characters', {schema}.{p}java_length_(h)
              USING ERRCODE = 'invalid_parameter_value';
          ELSIF h !~ '^[A-Za-z0-9._-]+$' THEN
            RAISE EXCEPTION 'handler must match [A-Za-z0-9._-]+ (it becomes part of a topic name), but was ''%''', h
              USING ERRCODE = 'invalid_parameter_value';
          ELSIF h = ANY (seen) THEN
            RAISE EXCEPTION 'handlers must be distinct, but ''%'' is listed twice', h
              USING ERRCODE = 'invalid_parameter_value';
          END IF;
          seen := seen || h;
        END LOOP;
      END
      $$""";

  // The new event ("ev", empty when the id exists) and its key's next sequence ("seq"): the first
  // steps of publish and arm_.
  private static final String INSERT_EVENT =
      """
      WITH ev AS (
        INSERT INTO {events} (id, type, key, payload, content_type, headers, handlers)
        VALUES (p_id, p_type, p_key, p_payload, p_content_type, p_headers, p_handlers)
        ON CONFLICT (id) DO NOTHING
        RETURNING id
      ), seq AS (
        INSERT INTO {keys} AS k (key, sequence)
        SELECT p_key, 1 FROM ev WHERE p_key IS NOT NULL
        ON CONFLICT (key) DO UPDATE SET sequence = k.sequence + 1, updated_at = now()
        RETURNING sequence
      )""";

  // PostgresPublisher's insertOne, then (id taken) its lockExisting, addHandlers, nextSequence and
  // insertDeliveries, in that order; an id that vanishes between insert and lock goes round again.
  private static final String PUBLISH =
      """
      CREATE OR REPLACE FUNCTION {schema}.{p}publish(
        p_id text, p_type text, p_key text, p_payload bytea, p_content_type text, p_headers json,
        p_handlers text[])
      RETURNS TABLE (new_event boolean, added_handlers text[], differing_fields text[])
      LANGUAGE plpgsql VOLATILE AS $$
      #variable_conflict use_column
      DECLARE
        inserted text;
        stored record;
        added text[];
        seq bigint;
      BEGIN
        PERFORM {schema}.{p}check_event(p_id, p_type, p_key, p_payload, p_content_type, p_headers, p_handlers);
        FOR round IN 1 .. 3 LOOP
          {insert_event}, ins AS (
            INSERT INTO {deliveries} (event_id, handler, lane, key, sequence)
            SELECT ev.id, h, {lane_fn}(coalesce(p_key, p_id)), p_key, (SELECT sequence FROM seq)
            FROM ev CROSS JOIN unnest(p_handlers) AS h
            RETURNING 1
          )
          SELECT id INTO inserted FROM ev;
          IF inserted IS NOT NULL THEN
            RETURN QUERY SELECT true, p_handlers, '{}'::text[];
            RETURN;
          END IF;
          -- The id exists: lock it (a purge that races this keeps it), compare, add what is new.
          SELECT key, handlers,
                 array_remove(ARRAY[
                   CASE WHEN type IS DISTINCT FROM p_type THEN 'type' END,
                   CASE WHEN key IS DISTINCT FROM p_key THEN 'key' END,
                   CASE WHEN payload IS DISTINCT FROM p_payload THEN 'payload' END,
                   CASE WHEN content_type IS DISTINCT FROM p_content_type THEN 'contentType' END,
                   CASE WHEN headers::jsonb IS DISTINCT FROM p_headers::jsonb THEN 'headers' END
                 ], NULL) AS differing
            INTO stored
            FROM {events} WHERE id = p_id FOR UPDATE;
          IF FOUND THEN
            added := ARRAY(SELECT h FROM unnest(p_handlers) WITH ORDINALITY AS x(h, i)
                           WHERE h <> ALL (stored.handlers) ORDER BY i);
            IF cardinality(added) > 0 THEN
              UPDATE {events} SET handlers = handlers || added WHERE id = p_id;
              seq := NULL;
              IF stored.key IS NOT NULL THEN
                INSERT INTO {keys} AS k (key, sequence) VALUES (stored.key, 1)
                ON CONFLICT (key) DO UPDATE SET sequence = k.sequence + 1, updated_at = now()
                RETURNING sequence INTO seq;
              END IF;
              -- The stored event wins: a republish adds routes, it does not rewrite what happened.
              INSERT INTO {deliveries} (event_id, handler, lane, key, sequence)
              SELECT p_id, h, {lane_fn}(coalesce(stored.key, p_id)), stored.key, seq FROM unnest(added) AS h
              ON CONFLICT (event_id, handler) DO NOTHING;
            END IF;
            RETURN QUERY SELECT false, added, stored.differing;
            RETURN;
          END IF;
        END LOOP;
        RAISE EXCEPTION 'event ''%'' kept vanishing while published (purged concurrently); try again', p_id
          USING ERRCODE = 'serialization_failure';
      END
      $$"""
          .replace("{insert_event}", INSERT_EVENT.indent(4).strip());

  // Storage v2: PostgresPublisher's insertOne (lock the key, then xid, then a log id: the event row
  // and one log row), then (id taken) its lockExisting, addHandlers and addToLog, in that order;
  // an id that vanishes between insert and lock goes round again.
  private static final String PUBLISH_V2 =
      """
      CREATE OR REPLACE FUNCTION {schema}.{p}publish(
        p_id text, p_type text, p_key text, p_payload bytea, p_content_type text, p_headers json,
        p_handlers text[])
      RETURNS TABLE (new_event boolean, added_handlers text[], differing_fields text[])
      LANGUAGE plpgsql VOLATILE AS $$
      #variable_conflict use_column
      DECLARE
        v_lane smallint;
        v_xid xid8;
        inserted text;
        stored record;
        added text[];
      BEGIN
        PERFORM {schema}.{p}check_event(p_id, p_type, p_key, p_payload, p_content_type, p_headers, p_handlers);
        v_lane := {lane_fn}(coalesce(p_key, p_id));
        FOR round IN 1 .. 3 LOOP
          WITH locked AS MATERIALIZED (
            SELECT {lock_keys}(ARRAY[v_lane], ARRAY[p_key]) AS l, pg_current_xact_id() AS xid
          ), ev AS (
            INSERT INTO {events} (id, type, key, payload, content_type, headers, handlers)
            SELECT p_id, p_type, p_key, p_payload, p_content_type, p_headers, p_handlers FROM locked
            ON CONFLICT (id) DO NOTHING
            RETURNING id, handlers
          ), logged AS (
            INSERT INTO {log} (id, xid, lane, event_id, handlers, key)
            SELECT nextval('{log_seq}'), locked.xid, v_lane, ev.id, ev.handlers, p_key
            FROM ev CROSS JOIN locked
          )
          SELECT id INTO inserted FROM ev;
          IF inserted IS NOT NULL THEN
            RETURN QUERY SELECT true, p_handlers, '{}'::text[];
            RETURN;
          END IF;
          -- The id exists: lock it (a purge that races this keeps it), compare, add what is new.
          SELECT key, handlers,
                 array_remove(ARRAY[
                   CASE WHEN type IS DISTINCT FROM p_type THEN 'type' END,
                   CASE WHEN key IS DISTINCT FROM p_key THEN 'key' END,
                   CASE WHEN payload IS DISTINCT FROM p_payload THEN 'payload' END,
                   CASE WHEN content_type IS DISTINCT FROM p_content_type THEN 'contentType' END,
                   CASE WHEN headers::jsonb IS DISTINCT FROM p_headers::jsonb THEN 'headers' END
                 ], NULL) AS differing
            INTO stored
            FROM {events} WHERE id = p_id FOR UPDATE;
          IF FOUND THEN
            added := ARRAY(SELECT h FROM unnest(p_handlers) WITH ORDINALITY AS x(h, i)
                           WHERE h <> ALL (stored.handlers) ORDER BY i);
            IF cardinality(added) > 0 THEN
              UPDATE {events} SET handlers = handlers || added WHERE id = p_id;
              -- The stored event wins: a republish adds routes, it does not rewrite what happened.
              v_lane := {lane_fn}(coalesce(stored.key, p_id));
              PERFORM {lock_keys}(ARRAY[v_lane], ARRAY[stored.key]);
              v_xid := pg_current_xact_id();
              INSERT INTO {log} (id, xid, lane, event_id, handlers, key)
              VALUES (nextval('{log_seq}'), v_xid, v_lane, p_id, added, stored.key);
            END IF;
            RETURN QUERY SELECT false, added, stored.differing;
            RETURN;
          END IF;
        END LOOP;
        RAISE EXCEPTION 'event ''%'' kept vanishing while published (purged concurrently); try again', p_id
          USING ERRCODE = 'serialization_failure';
      END
      $$""";

  private static final String PUBLISH_V3 =
      replaceOnce(
          replaceOnce(PUBLISH_V2, "RETURNING id, handlers\n", "RETURNING id, handlers, ctid\n"),
          "INSERT INTO {log} (id, xid, lane, event_id, handlers, key)\n"
              + "      SELECT nextval('{log_seq}'), locked.xid, v_lane, ev.id, ev.handlers, p_key\n",
          "INSERT INTO {log} (id, xid, lane, event_id, handlers, key, event_tid)\n"
              + "      SELECT nextval('{log_seq}'), locked.xid, v_lane, ev.id, ev.handlers, p_key,"
              + " ev.ctid\n");

  /** {@code text} with its one occurrence of {@code target} replaced; fails if there is not one. */
  static String replaceOnce(String text, String target, String replacement) {
    int at = text.indexOf(target);
    if (at < 0 || text.indexOf(target, at + 1) >= 0) {
      throw new IllegalStateException("expected exactly one occurrence of: " + target);
    }
    return text.substring(0, at) + replacement + text.substring(at + target.length());
  }

  // Storage v2: PostgresTimers' arm. A keyed timer takes its key's lock, then a log id as its
  // sequence (it sorts among its key's events in commit order); every timer records its xid.
  private static final String ARM_V2 =
      """
      CREATE OR REPLACE FUNCTION {schema}.{p}arm_(
        p_id text, p_type text, p_key text, p_payload bytea, p_content_type text, p_headers json,
        p_handlers text[], p_fire_at timestamptz, p_timer_id text) RETURNS boolean
      LANGUAGE plpgsql VOLATILE AS $$
      #variable_conflict use_column
      DECLARE
        v_lane smallint := {lane_fn}(coalesce(p_key, p_id));
        events bigint;
        inserted bigint;
      BEGIN
        WITH ev AS (
          INSERT INTO {events} (id, type, key, payload, content_type, headers, handlers)
          VALUES (p_id, p_type, p_key, p_payload, p_content_type, p_headers, p_handlers)
          ON CONFLICT (id) DO NOTHING
          RETURNING id
        ), seq AS MATERIALIZED (
          SELECT nextval('{log_seq}') AS sequence
          FROM ev CROSS JOIN (SELECT p_key AS key, v_lane AS lane) k
          CROSS JOIN LATERAL (SELECT {lock_keys}(ARRAY[k.lane], ARRAY[k.key])) l
          WHERE k.key IS NOT NULL
        ), ins AS (
          INSERT INTO {deliveries}
            (event_id, handler, lane, key, sequence, available_at, timer_id, fire_at, xid)
          SELECT ev.id, h, v_lane, p_key, (SELECT sequence FROM seq), p_fire_at, p_timer_id,
                 CASE WHEN p_timer_id IS NULL THEN NULL ELSE p_fire_at END, pg_current_xact_id()
          FROM ev CROSS JOIN unnest(p_handlers) AS h
          ON CONFLICT (handler, timer_id) WHERE timer_id IS NOT NULL AND status = 'pending'
          DO NOTHING
          RETURNING 1
        )
        SELECT (SELECT count(*) FROM ev), (SELECT count(*) FROM ins) INTO events, inserted;
        IF events = 0 THEN
          RAISE EXCEPTION 'event id ''%'' exists already: a timer arms a new event, so give it a new id (e.g. gen_random_uuid()::text)', p_id
            USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF inserted = 0 THEN
          DELETE FROM {events} WHERE id = p_id;
          RETURN false;
        END IF;
        RETURN true;
      END
      $$""";

  // PostgresTimers.schedule: arm, or apply the conflict policy to the pending timer of the id,
  // checking the lane's in_flight in a statement after the row lock (a fresh snapshot).
  private static final String SCHEDULE =
      """
      CREATE OR REPLACE FUNCTION {schema}.{p}schedule(
        p_id text, p_type text, p_key text, p_payload bytea, p_content_type text, p_headers json,
        p_handlers text[], p_fire_at timestamptz, p_timer_id text DEFAULT NULL,
        p_on_conflict text DEFAULT NULL)
      RETURNS TABLE (outcome text, event_id text)
      LANGUAGE plpgsql VOLATILE AS $$
      #variable_conflict use_column
      DECLARE
        h text;
        pending_id bigint;
        pending_lane smallint;
        pending_event text;
        done text;
      BEGIN
        PERFORM {schema}.{p}check_event(p_id, p_type, p_key, p_payload, p_content_type, p_headers, p_handlers);
        IF p_fire_at IS NULL THEN
          RAISE EXCEPTION 'fire_at must not be null (e.g. now() + interval ''6 seconds'')'
            USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF p_timer_id IS NOT NULL THEN
          IF p_timer_id ~ '^[[:space:]]*$' THEN
            RAISE EXCEPTION 'timer id must not be blank, but was ''%''', p_timer_id
              USING ERRCODE = 'invalid_parameter_value';
          ELSIF octet_length(p_timer_id) > MAX_TIMER_ID AND {schema}.{p}java_length_(p_timer_id) > MAX_TIMER_ID THEN
            RAISE EXCEPTION 'timer id must be at most MAX_TIMER_ID characters, but was % characters', {schema}.{p}java_length_(p_timer_id)
              USING ERRCODE = 'invalid_parameter_value';
          ELSIF p_timer_id ~ '^[[:space:]]|[[:space:]]$' THEN
            RAISE EXCEPTION 'timer id must not start or end with white space, but was ''%''', p_timer_id
              USING ERRCODE = 'invalid_parameter_value';
          ELSIF p_on_conflict IS NULL OR p_on_conflict NOT IN ('EXTEND', 'REPLACE', 'KEEP', 'FAIL') THEN
            RAISE EXCEPTION 'timer onConflict must be one of EXTEND, REPLACE, KEEP, FAIL for a named timer, but was %', coalesce('''' || p_on_conflict || '''', 'null')
              USING ERRCODE = 'invalid_parameter_value';
          ELSIF cardinality(p_handlers) <> 1 THEN
            RAISE EXCEPTION 'a named timer''s event must have exactly one handler (timer ids are unique per handler), but timer ''%'' has handlers %', p_timer_id, p_handlers
              USING ERRCODE = 'invalid_parameter_value';
          END IF;
        ELSIF p_on_conflict IS NOT NULL THEN
          RAISE EXCEPTION 'timer onConflict must be null for a timer without an id, but was ''%''', p_on_conflict
            USING ERRCODE = 'invalid_parameter_value';
        END IF;
        h := p_handlers[1];
        IF p_on_conflict = 'EXTEND' THEN
          WITH moved AS (
            UPDATE {deliveries} AS d SET fire_at = p_fire_at,
              available_at = CASE WHEN p_fire_at < d.available_at THEN p_fire_at ELSE d.available_at END
            WHERE d.handler = h AND d.timer_id = p_timer_id AND d.status = 'pending'
              AND d.firing_claims IS DISTINCT FROM d.claims
            RETURNING d.event_id, d.lane, d.handler, d.key, d.sequence,
              CASE WHEN d.available_at = p_fire_at THEN p_fire_at END AS base
          ), PULL_FOLLOWERS_INTO_DONE;
          IF done IS NOT NULL THEN
            RETURN QUERY SELECT 'EXTENDED', done;
            RETURN;
          END IF;
        END IF;
        FOR round IN 1 .. 3 LOOP
          pending_id := NULL;
          IF p_timer_id IS NOT NULL THEN
            SELECT id, lane, event_id INTO pending_id, pending_lane, pending_event FROM {deliveries}
            WHERE handler = h AND timer_id = p_timer_id AND status = 'pending'
            FOR UPDATE;
          END IF;
          IF pending_id IS NULL THEN
            IF {schema}.{p}arm_(p_id, p_type, p_key, p_payload, p_content_type, p_headers, p_handlers, p_fire_at, p_timer_id) THEN
              RETURN QUERY SELECT 'ARMED', p_id;
              RETURN;
            END IF;
            CONTINUE; -- a concurrent arm of the same id committed first: apply the policy to it
          END IF;
          IF p_on_conflict IN ('KEEP', 'FAIL') THEN
            IF EXISTS (SELECT 1 FROM {lanes} WHERE lane = pending_lane AND pending_id = ANY (in_flight)) THEN
              RETURN QUERY SELECT 'ALREADY_FIRING', pending_event;
            ELSIF p_on_conflict = 'FAIL' THEN
              RAISE EXCEPTION 'timer ''%'' of handler ''%'' is already pending (event ''%'') and the conflict policy is FAIL: nothing was published; use EXTEND, REPLACE or KEEP, or cancel it first', p_timer_id, h, pending_event
                USING ERRCODE = 'unique_violation';
            ELSE
              RETURN QUERY SELECT 'KEPT', pending_event;
            END IF;
            RETURN;
          ELSIF p_on_conflict = 'EXTEND' THEN
            WITH moved AS (
              UPDATE {deliveries} AS d SET fire_at = p_fire_at,
                available_at = CASE WHEN p_fire_at < d.available_at THEN p_fire_at ELSE d.available_at END
              WHERE d.id = pending_id AND NOT EXISTS (
                SELECT 1 FROM {lanes} l WHERE l.lane = d.lane AND d.id = ANY (l.in_flight))
              RETURNING d.event_id, d.lane, d.handler, d.key, d.sequence,
                CASE WHEN d.available_at = p_fire_at THEN p_fire_at END AS base
            ), PULL_FOLLOWERS_INTO_DONE;
            RETURN QUERY SELECT CASE WHEN done IS NULL THEN 'ALREADY_FIRING' ELSE 'EXTENDED' END, pending_event;
            RETURN;
          ELSE -- REPLACE
            IF NOT {schema}.{p}remove_timer_(pending_id) THEN
              RETURN QUERY SELECT 'ALREADY_FIRING', pending_event;
              RETURN;
            END IF;
            IF NOT {schema}.{p}arm_(p_id, p_type, p_key, p_payload, p_content_type, p_headers, p_handlers, p_fire_at, p_timer_id) THEN
              RAISE EXCEPTION 'cannot happen: the replaced timer''s row is locked';
            END IF;
            RETURN QUERY SELECT 'REPLACED', p_id;
            RETURN;
          END IF;
        END LOOP;
        RAISE EXCEPTION 'timer ''%'' of handler ''%'' kept being armed and removed concurrently; try again', p_timer_id, h
          USING ERRCODE = 'serialization_failure';
      END
      $$"""
          .replace("MAX_TIMER_ID", String.valueOf(io.relaybus.store.Timer.MAX_ID_LENGTH))
          .replace("PULL_FOLLOWERS_INTO_DONE", pullFollowersInto("done"));

  private static final String CANCEL_TIMER =
      """
      CREATE OR REPLACE FUNCTION {schema}.{p}cancel_timer(p_handler text, p_timer_id text)
      RETURNS TABLE (outcome text, event_id text)
      LANGUAGE plpgsql VOLATILE AS $$
      #variable_conflict use_column
      DECLARE
        pending_id bigint;
        pending_event text;
      BEGIN
        SELECT id, event_id INTO pending_id, pending_event FROM {deliveries}
        WHERE handler = p_handler AND timer_id = p_timer_id AND status = 'pending'
        FOR UPDATE;
        IF pending_id IS NULL THEN
          RETURN QUERY SELECT 'NOT_FOUND', NULL::text;
        ELSIF {schema}.{p}remove_timer_(pending_id) THEN
          RETURN QUERY SELECT 'CANCELLED', pending_event;
        ELSE
          RETURN QUERY SELECT 'ALREADY_FIRING', pending_event;
        END IF;
      END
      $$""";

  // The helpers of schedule and cancel_timer: PostgresTimers' arm (and unarm), and remove.
  private static final String ARM =
      """
      CREATE OR REPLACE FUNCTION {schema}.{p}arm_(
        p_id text, p_type text, p_key text, p_payload bytea, p_content_type text, p_headers json,
        p_handlers text[], p_fire_at timestamptz, p_timer_id text) RETURNS boolean
      LANGUAGE plpgsql VOLATILE AS $$
      #variable_conflict use_column
      DECLARE
        events bigint;
        inserted bigint;
      BEGIN
        {insert_event}, ins AS (
          INSERT INTO {deliveries} (event_id, handler, lane, key, sequence, available_at, timer_id, fire_at)
          SELECT ev.id, h, {lane_fn}(coalesce(p_key, p_id)), p_key, (SELECT sequence FROM seq), p_fire_at, p_timer_id,
                 CASE WHEN p_timer_id IS NULL THEN NULL ELSE p_fire_at END
          FROM ev CROSS JOIN unnest(p_handlers) AS h
          ON CONFLICT (handler, timer_id) WHERE timer_id IS NOT NULL AND status = 'pending'
          DO NOTHING
          RETURNING 1
        )
        SELECT (SELECT count(*) FROM ev), (SELECT count(*) FROM ins) INTO events, inserted;
        IF events = 0 THEN
          RAISE EXCEPTION 'event id ''%'' exists already: a timer arms a new event, so give it a new id (e.g. gen_random_uuid()::text)', p_id
            USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF inserted = 0 THEN
          DELETE FROM {events} WHERE id = p_id;
          RETURN false;
        END IF;
        RETURN true;
      END
      $$"""
          .replace("{insert_event}", INSERT_EVENT.indent(2).strip());

  private static final String REMOVE =
      """
      CREATE OR REPLACE FUNCTION {schema}.{p}remove_timer_(p_delivery bigint) RETURNS boolean
      LANGUAGE plpgsql VOLATILE AS $$
      DECLARE
        gone text;
      BEGIN
        WITH g AS (
          DELETE FROM {deliveries} AS d
          WHERE d.id = p_delivery AND NOT EXISTS (
            SELECT 1 FROM {lanes} l WHERE l.lane = d.lane AND d.id = ANY (l.in_flight))
          RETURNING d.event_id, d.handler, d.lane, d.key, d.sequence, now() AS base
        ), ev AS (
          DELETE FROM {events} e USING g
          WHERE e.id = g.event_id AND e.handlers = ARRAY[g.handler]
        ), moved AS (SELECT * FROM g), PULL_FOLLOWERS_INTO_GONE;
        RETURN gone IS NOT NULL;
      END
      $$"""
          .replace("PULL_FOLLOWERS_INTO_GONE", pullFollowersInto("gone"));

  /**
   * PostgresTimers' "pulled" step (a keyed timer moved earlier or removed pulls back the followers
   * a claim deferred behind it), ending in {@code SELECT event_id INTO variable FROM moved}.
   */
  private static String pullFollowersInto(String variable) {
    return PostgresTimers.PULL_FOLLOWERS
        .strip()
        .replace("SELECT event_id FROM moved", "SELECT event_id INTO " + variable + " FROM moved");
  }

  // The pull as the Java calls do it since 2026-12-07: the followers one microsecond apart by their
  // rank in the key's run, not by their sequence's distance from the timer's (log ids are shared
  // by every key: a distance of 100 million ids put them 100 s behind).
  private static final String PULL_FOLLOWERS_BY_RANK =
      """
      ranked AS (
        SELECT f.id, m.base + row_number() OVER (
                 PARTITION BY m.lane, m.handler, m.key, m.sequence ORDER BY f.sequence)
                 * interval '1 microsecond' AS at
        FROM moved m JOIN {deliveries} f
          ON f.lane = m.lane AND f.handler = m.handler AND f.key = m.key
        WHERE m.key IS NOT NULL AND m.base IS NOT NULL
          AND f.status = 'pending' AND f.sequence > m.sequence
      ), pulled AS (
        UPDATE {deliveries} AS f SET available_at = r.at
        FROM ranked r WHERE f.id = r.id AND f.available_at > r.at
      )
      SELECT event_id FROM moved""";

  /**
   * {@code schedule} and {@code remove_timer_} (under {@code cancel_timer} and a REPLACE) of
   * version 2, pulling followers by rank ({@link #PULL_FOLLOWERS_BY_RANK}); nothing else changes.
   */
  static List<String> timersPullingByRank() {
    return List.of(pullingByRank(SCHEDULE, "done"), pullingByRank(REMOVE, "gone"));
  }

  private static String pullingByRank(String function, String variable) {
    String byRank =
        PULL_FOLLOWERS_BY_RANK
            .strip()
            .replace(
                "SELECT event_id FROM moved", "SELECT event_id INTO " + variable + " FROM moved");
    String replaced = function.replace(pullFollowersInto(variable), byRank);
    if (replaced.equals(function)) {
      throw new IllegalStateException("the function's pull was not found: " + function);
    }
    return replaced;
  }

  /**
   * The pull of one timer's followers, in a statement of its own: {@link #PULL_FOLLOWERS_BY_RANK}
   * after a "moved" of one row (the timer's event id, lane, handler, key, sequence and the base its
   * followers go behind, each given as the SQL text of a value: {@code ?} for the Java calls, a
   * parameter of {@code pull_followers_} for the functions). Returns the event id.
   */
  static String pullOneTimersFollowers(
      String eventId, String lane, String handler, String key, String sequence, String base) {
    return """
        WITH moved AS (
          SELECT %s::text AS event_id, %s::smallint AS lane, %s::text AS handler, %s::text AS key,
                 %s::bigint AS sequence, %s::timestamptz AS base
        ),
        """
            .formatted(eventId, lane, handler, key, sequence, base)
        + PULL_FOLLOWERS_BY_RANK.strip();
  }

  /**
   * Schema version 22: {@code schedule}, {@code cancel_timer} and {@code remove_timer_} as the Java
   * calls ({@link PostgresTimers}) work since 2026-12-07. A call answered ALREADY_FIRING holds no
   * lock: {@code lock_timer_} reads the pending timer and whether it is in its lane's {@code
   * in_flight} without a lock, and locks only the row version it read ({@code xmin}) when the timer
   * is not firing, reading again when the row changed meanwhile (a claim that handed it out wrote
   * it). Before, {@code SELECT ... FOR UPDATE} came first and held a firing timer's row until the
   * caller's transaction ended: the task's completion, release or reschedule of the timer and a
   * takeover's charge waited for it. A keyed timer moved earlier or removed pulls its key's
   * followers in a statement after the one that moved it ({@code pull_followers_}, the statement
   * the Java calls run): a claim that deferred them behind the timer held the timer row (FOR SHARE)
   * until it committed, so the write waited for it, and only a later snapshot sees the deferral.
   * Before, the extend pulled in its own statement and left a follower such a claim deferred behind
   * the old deadline. {@code publish}, {@code arm_} and the checks stay as they are.
   */
  static List<String> timersLockingOnlyWhatTheyChange() {
    return List.of(LOCK_TIMER, PULL_FOLLOWERS_FN, REMOVE_V22, SCHEDULE_V22, CANCEL_TIMER_V22);
  }

  /**
   * Schema version 24: {@code arm_} records every timer's deadline in {@code fire_at}, a timer
   * without an id too, as {@link PostgresTimers} does since 2026-12-07. Without it a keyed timer
   * without an id behind another timer of its key fired when that one was cancelled or moved
   * earlier: the pull of the key's followers ({@code pull_followers_}) moves {@code available_at}
   * earlier, and only a row with {@code fire_at} is re-armed by the claim. And {@code cancel_timer}
   * refuses a handler or timer id that the Java {@code cancelTimer} refuses, with its message
   * (before, it answered NOT_FOUND). Nothing else changes.
   */
  static List<String> everyTimerKeepsItsDeadline() {
    return List.of(
        replaceOnce(
            ARM_V2,
            "CASE WHEN p_timer_id IS NULL THEN NULL ELSE p_fire_at END, pg_current_xact_id()",
            "p_fire_at, pg_current_xact_id()"),
        CANCEL_TIMER_CHECKED);
  }

  /**
   * Schema version 26: {@code schedule} of version 22 refusing a deadline outside the years 1 to
   * 9999 ({@link io.relaybus.store.Timer#MIN_AT} to {@link io.relaybus.store.Timer#MAX_AT}, which
   * the Java {@code Timer} refuses) with SQLSTATE 22023, naming the argument, the rule and the
   * value. Before, it armed or extended to {@code infinity} (a timer that never fires, holding its
   * key's later events for good), {@code -infinity} and years past 9999 or before 1, which the Java
   * store read back as instants 292 million years away (or, before year 1, two days off) and
   * counted in the backlog's lag. Nothing else changes.
   */
  static List<String> scheduleRefusingDeadlinesOutsideTheYears1To9999() {
    return List.of(SCHEDULE_CHECKING_FIRE_AT);
  }

  // PostgresTimers.find: the pending timer of the id, read without a lock; locked (the version
  // read) unless it is in flight. None: every column NULL. Frozen with migration 22: its ten rounds
  // are written out, not taken from PostgresTimers.LOCK_ROUNDS, which may change without it.
  private static final String LOCK_TIMER =
      """
      CREATE OR REPLACE FUNCTION {schema}.{p}lock_timer_(
        p_handler text, p_timer_id text, OUT pending_id bigint, OUT pending_lane smallint,
        OUT pending_event text, OUT firing boolean)
      LANGUAGE plpgsql VOLATILE AS $$
      DECLARE
        v_version xid;
      BEGIN
        FOR round IN 1 .. 10 LOOP
          SELECT d.id, d.lane, d.event_id, d.xmin, EXISTS (
              SELECT 1 FROM {lanes} l WHERE l.lane = d.lane AND d.id = ANY (l.in_flight))
            INTO pending_id, pending_lane, pending_event, v_version, firing
          FROM {deliveries} d
          WHERE d.handler = p_handler AND d.timer_id = p_timer_id AND d.status = 'pending';
          IF NOT FOUND OR firing THEN
            RETURN; -- none, or in flight: answered without a lock
          END IF;
          PERFORM 1 FROM {deliveries} d
          WHERE d.id = pending_id AND d.xmin = v_version AND d.status = 'pending'
          FOR UPDATE;
          IF FOUND THEN
            RETURN;
          END IF;
          -- the row changed since the read (handed out, extended, re-armed, gone): read it again
        END LOOP;
        RAISE EXCEPTION 'timer ''%'' of handler ''%'' kept changing concurrently; try again', p_timer_id, p_handler
          USING ERRCODE = 'serialization_failure';
      END
      $$""";

  // PostgresTimers.pull: a keyed timer moved earlier or removed pulls back its key's followers
  // that a claim deferred behind it, in the caller's next statement (a fresh snapshot).
  private static final String PULL_FOLLOWERS_FN =
      """
      CREATE OR REPLACE FUNCTION {schema}.{p}pull_followers_(
        p_event_id text, p_lane smallint, p_handler text, p_key text, p_sequence bigint,
        p_base timestamptz) RETURNS void
      LANGUAGE plpgsql VOLATILE AS $$
      DECLARE
        v_pulled text;
      BEGIN
        IF p_key IS NULL OR p_base IS NULL THEN
          RETURN;
        END IF;
        PULL;
      END
      $$"""
          .replace(
              "PULL",
              pullOneTimersFollowers(
                      "p_event_id", "p_lane", "p_handler", "p_key", "p_sequence", "p_base")
                  .replace("SELECT event_id FROM moved", "SELECT event_id INTO v_pulled FROM moved")
                  .indent(2)
                  .strip());

  // PostgresTimers' remove, then its pull in a statement of its own.
  private static final String REMOVE_V22 =
      """
      CREATE OR REPLACE FUNCTION {schema}.{p}remove_timer_(p_delivery bigint) RETURNS boolean
      LANGUAGE plpgsql VOLATILE AS $$
      DECLARE
        g_event text;
        g_lane smallint;
        g_handler text;
        g_key text;
        g_sequence bigint;
        g_base timestamptz;
      BEGIN
        WITH g AS (
          DELETE FROM {deliveries} AS d
          WHERE d.id = p_delivery AND NOT EXISTS (
            SELECT 1 FROM {lanes} l WHERE l.lane = d.lane AND d.id = ANY (l.in_flight))
          RETURNING d.event_id, d.handler, d.lane, d.key, d.sequence, now() AS base
        ), ev AS (
          DELETE FROM {events} e USING g
          WHERE e.id = g.event_id AND e.handlers = ARRAY[g.handler]
        )
        SELECT g.event_id, g.lane, g.handler, g.key, g.sequence, g.base
          INTO g_event, g_lane, g_handler, g_key, g_sequence, g_base FROM g;
        IF g_event IS NULL THEN
          RETURN false; -- in flight: left to its task
        END IF;
        PERFORM {schema}.{p}pull_followers_(g_event, g_lane, g_handler, g_key, g_sequence, g_base);
        RETURN true;
      END
      $$""";

  // PostgresTimers' extend of the timer that {timer} selects: fire_at always, available_at only
  // when earlier; what it moved into the m_ variables (m_event NULL: nothing moved).
  private static final String EXTEND_V22 =
      """
      WITH m AS (
        UPDATE {deliveries} AS d SET fire_at = p_fire_at,
          available_at = CASE WHEN p_fire_at < d.available_at THEN p_fire_at ELSE d.available_at END
        WHERE {timer}
        RETURNING d.event_id, d.lane, d.handler, d.key, d.sequence,
          CASE WHEN d.available_at = p_fire_at THEN p_fire_at END AS base
      )
      SELECT m.event_id, m.lane, m.handler, m.key, m.sequence, m.base
        INTO m_event, m_lane, m_handler, m_key, m_sequence, m_base FROM m;""";

  private static String extendV22(String timer, int indent) {
    return EXTEND_V22.replace("{timer}", timer).indent(indent).strip();
  }

  // PostgresTimers.schedule: the common extend in one statement (it waits for a claim that holds
  // the row and re-reads it, so a timer the claim took is left alone); otherwise lock_timer_ and
  // the policy. The followers of a keyed timer moved earlier are pulled in the next statement.
  private static final String SCHEDULE_V22 =
      replaceOnce(
              SCHEDULE.substring(0, SCHEDULE.indexOf("  h := p_handlers[1];\n")),
              """
              DECLARE
                h text;
                pending_id bigint;
                pending_lane smallint;
                pending_event text;
                done text;
              """,
              """
              DECLARE
                h text;
                pending_id bigint;
                pending_lane smallint;
                pending_event text;
                firing boolean;
                m_event text;
                m_lane smallint;
                m_handler text;
                m_key text;
                m_sequence bigint;
                m_base timestamptz;
              """)
          + """
            h := p_handlers[1];
            IF p_on_conflict = 'EXTEND' THEN
              EXTEND_PENDING
              IF m_event IS NOT NULL THEN
                PERFORM {schema}.{p}pull_followers_(m_event, m_lane, m_handler, m_key, m_sequence, m_base);
                RETURN QUERY SELECT 'EXTENDED', m_event;
                RETURN;
              END IF;
            END IF;
            FOR round IN 1 .. 3 LOOP
              pending_id := NULL;
              firing := false;
              IF p_timer_id IS NOT NULL THEN
                SELECT t.pending_id, t.pending_lane, t.pending_event, t.firing
                  INTO pending_id, pending_lane, pending_event, firing
                FROM {schema}.{p}lock_timer_(h, p_timer_id) t;
              END IF;
              IF pending_id IS NULL THEN
                IF {schema}.{p}arm_(p_id, p_type, p_key, p_payload, p_content_type, p_headers, p_handlers, p_fire_at, p_timer_id) THEN
                  RETURN QUERY SELECT 'ARMED', p_id;
                  RETURN;
                END IF;
                CONTINUE; -- a concurrent arm of the same id committed first: apply the policy to it
              END IF;
              IF p_on_conflict IN ('KEEP', 'FAIL') THEN
                IF firing OR EXISTS (SELECT 1 FROM {lanes} WHERE lane = pending_lane AND pending_id = ANY (in_flight)) THEN
                  RETURN QUERY SELECT 'ALREADY_FIRING', pending_event;
                ELSIF p_on_conflict = 'FAIL' THEN
                  RAISE EXCEPTION 'timer ''%'' of handler ''%'' is already pending (event ''%'') and the conflict policy is FAIL: nothing was published; use EXTEND, REPLACE or KEEP, or cancel it first', p_timer_id, h, pending_event
                    USING ERRCODE = 'unique_violation';
                ELSE
                  RETURN QUERY SELECT 'KEPT', pending_event;
                END IF;
                RETURN;
              ELSIF firing THEN
                RETURN QUERY SELECT 'ALREADY_FIRING', pending_event;
                RETURN;
              ELSIF p_on_conflict = 'EXTEND' THEN
                EXTEND_LOCKED
                IF m_event IS NULL THEN
                  RETURN QUERY SELECT 'ALREADY_FIRING', pending_event;
                  RETURN;
                END IF;
                PERFORM {schema}.{p}pull_followers_(m_event, m_lane, m_handler, m_key, m_sequence, m_base);
                RETURN QUERY SELECT 'EXTENDED', pending_event;
                RETURN;
              ELSE -- REPLACE
                IF NOT {schema}.{p}remove_timer_(pending_id) THEN
                  RETURN QUERY SELECT 'ALREADY_FIRING', pending_event;
                  RETURN;
                END IF;
                IF NOT {schema}.{p}arm_(p_id, p_type, p_key, p_payload, p_content_type, p_headers, p_handlers, p_fire_at, p_timer_id) THEN
                  RAISE EXCEPTION 'cannot happen: the replaced timer''s row is locked';
                END IF;
                RETURN QUERY SELECT 'REPLACED', p_id;
                RETURN;
              END IF;
            END LOOP;
            RAISE EXCEPTION 'timer ''%'' of handler ''%'' kept being armed and removed concurrently; try again', p_timer_id, h
              USING ERRCODE = 'serialization_failure';
          END
          $$"""
              .replace(
                  "EXTEND_PENDING",
                  extendV22(
                      """
                      d.handler = h AND d.timer_id = p_timer_id AND d.status = 'pending'
                        AND d.firing_claims IS DISTINCT FROM d.claims""",
                      4))
              .replace(
                  "EXTEND_LOCKED",
                  extendV22(
                      """
                      d.id = pending_id AND NOT EXISTS (
                        SELECT 1 FROM {lanes} l WHERE l.lane = d.lane AND d.id = ANY (l.in_flight))""",
                      6));

  // schedule of version 22, refusing first a deadline the Java Timer refuses, with the bounds of
  // Timer.MIN_AT and Timer.MAX_AT as Instant prints them (frozen with migration 26: written out)
  private static final String SCHEDULE_CHECKING_FIRE_AT =
      replaceOnce(
          SCHEDULE_V22,
          """
            IF p_fire_at IS NULL THEN
              RAISE EXCEPTION 'fire_at must not be null (e.g. now() + interval ''6 seconds'')'
                USING ERRCODE = 'invalid_parameter_value';
            END IF;
          """,
          """
            IF p_fire_at IS NULL THEN
              RAISE EXCEPTION 'fire_at must not be null (e.g. now() + interval ''6 seconds'')'
                USING ERRCODE = 'invalid_parameter_value';
            ELSIF p_fire_at < '0001-01-01 00:00:00+00'::timestamptz
                OR p_fire_at > '9999-12-31 23:59:59.999999+00'::timestamptz THEN
              RAISE EXCEPTION 'fire_at must be between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999999Z (the years 1 to 9999), but was %',
                CASE WHEN isfinite(p_fire_at)
                  THEN to_char(p_fire_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
                       || CASE WHEN p_fire_at < '0001-01-01 00:00:00+00'::timestamptz THEN ' BC' ELSE '' END
                  ELSE p_fire_at::text END
                USING ERRCODE = 'invalid_parameter_value';
            END IF;
          """);

  // PostgresTimers.cancel: lock_timer_, then remove_timer_ unless the timer is firing.
  private static final String CANCEL_TIMER_V22 =
      """
      CREATE OR REPLACE FUNCTION {schema}.{p}cancel_timer(p_handler text, p_timer_id text)
      RETURNS TABLE (outcome text, event_id text)
      LANGUAGE plpgsql VOLATILE AS $$
      #variable_conflict use_column
      DECLARE
        pending_id bigint;
        pending_event text;
        firing boolean;
      BEGIN
        SELECT t.pending_id, t.pending_event, t.firing INTO pending_id, pending_event, firing
        FROM {schema}.{p}lock_timer_(p_handler, p_timer_id) t;
        IF pending_id IS NULL THEN
          RETURN QUERY SELECT 'NOT_FOUND', NULL::text;
        ELSIF firing THEN
          RETURN QUERY SELECT 'ALREADY_FIRING', pending_event;
        ELSIF {schema}.{p}remove_timer_(pending_id) THEN
          RETURN QUERY SELECT 'CANCELLED', pending_event;
        ELSE
          RETURN QUERY SELECT 'ALREADY_FIRING', pending_event;
        END IF;
      END
      $$""";

  // cancel_timer of version 22, refusing first what the Java cancelTimer refuses, with its
  // messages (Validation.handler, Timer.checkCancelId): it answered NOT_FOUND to a handler with a
  // stray space, a null one or a blank timer id, and the caller took its timer for gone.
  private static final String CANCEL_TIMER_CHECKED =
      replaceOnce(
          CANCEL_TIMER_V22,
          "BEGIN\n  SELECT t.pending_id, t.pending_event, t.firing",
          """
          BEGIN
            IF p_handler IS NULL OR p_handler ~ '^[[:space:]]*$' THEN
              RAISE EXCEPTION 'handler must not be blank, but was %', coalesce('''' || p_handler || '''', 'null')
                USING ERRCODE = 'invalid_parameter_value';
            ELSIF octet_length(p_handler) > MAX_HANDLER AND {schema}.{p}java_length_(p_handler) > MAX_HANDLER THEN
              RAISE EXCEPTION 'handler must be at most MAX_HANDLER characters, but was % characters', {schema}.{p}java_length_(p_handler)
                USING ERRCODE = 'invalid_parameter_value';
            ELSIF p_handler !~ '^[A-Za-z0-9._-]+$' THEN
              RAISE EXCEPTION 'handler must match [A-Za-z0-9._-]+ (it becomes part of a topic name), but was ''%''', p_handler
                USING ERRCODE = 'invalid_parameter_value';
            ELSIF p_timer_id IS NULL OR p_timer_id ~ '^[[:space:]]*$' THEN
              RAISE EXCEPTION 'timerId must not be blank, but was %', coalesce('''' || p_timer_id || '''', 'null')
                USING ERRCODE = 'invalid_parameter_value';
            END IF;
            SELECT t.pending_id, t.pending_event, t.firing"""
              .replace("MAX_HANDLER", String.valueOf(Validation.MAX_HANDLER_LENGTH)));
}
