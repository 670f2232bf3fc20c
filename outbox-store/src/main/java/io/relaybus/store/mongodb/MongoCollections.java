package io.relaybus.store.mongodb;

import com.mongodb.client.MongoCollection;
import com.mongodb.client.MongoDatabase;
import io.relaybus.store.Validation;
import java.util.regex.Pattern;
import org.bson.Document;

/**
 * The store's collections for one database and collection prefix. The prefix is checked like the
 * PostgreSQL table prefix ({@code [a-z_][a-z0-9_]*} or empty), so the same prefix names the same
 * outbox in both stores.
 */
final class MongoCollections {
  /** MongoDB forbids {@code /\. "$} and NUL in database names; we allow a plain subset. */
  private static final Pattern DATABASE = Pattern.compile("[A-Za-z0-9_-]{1,63}");

  final String database;
  final String prefix;
  final MongoCollection<Document> events;
  final MongoCollection<Document> deliveries;
  final MongoCollection<Document> lanes;
  final MongoCollection<Document> keys;
  final MongoCollection<Document> completed;
  final MongoCollection<Document> meta;

  MongoCollections(MongoDatabase db, String prefix) {
    this.database = db.getName();
    this.prefix = prefix;
    this.events = db.getCollection(prefix + "events");
    this.deliveries = db.getCollection(prefix + "deliveries");
    this.lanes = db.getCollection(prefix + "lanes");
    this.keys = db.getCollection(prefix + "key_sequences");
    this.completed = db.getCollection(prefix + "completed_deliveries");
    this.meta = db.getCollection(prefix + "meta");
  }

  static String validDatabase(String database) {
    if (database == null || !DATABASE.matcher(database).matches()) {
      throw new IllegalArgumentException(
          "database must match [A-Za-z0-9_-]{1,63}, but was "
              + (database == null ? "null" : "'" + database + "'"));
    }
    return database;
  }

  static String validPrefix(String prefix) {
    return Validation.sqlIdentifier(
        "collection prefix", prefix, Validation.MAX_TABLE_PREFIX_LENGTH, true);
  }

  /** {@code database} and prefix, as error messages name the outbox. */
  String where() {
    return "database %s with collection prefix '%s'".formatted(database, prefix);
  }
}
