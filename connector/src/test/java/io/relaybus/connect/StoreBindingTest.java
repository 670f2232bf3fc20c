package io.relaybus.connect;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

class StoreBindingTest {

  private static OutboxSourceConfig config(Map<String, String> props) {
    return OutboxSourceConfig.withoutStoreCheck(OutboxSourceConfig.CONFIG_DEF, props);
  }

  @ParameterizedTest
  @EnumSource(StoreKind.class)
  void eachStoreNamesOnlyDeclaredKeys(StoreKind kind) {
    assertThat(OutboxSourceConfig.FIELDS)
        .containsAll(kind.binding().keys())
        .contains(kind.binding().connectionKey());
  }

  /** store.kind's documentation is prose; it must still name each store's keys. */
  @ParameterizedTest
  @EnumSource(StoreKind.class)
  void storeKindDocumentationNamesTheStoresKeys(StoreKind kind) {
    for (ConfigField key : kind.binding().keys()) {
      assertThat(OutboxSourceConfig.STORE_KIND.documentation()).contains(key.name());
    }
  }

  /** Guards validate() finding the missing key by reading it, not by searching a message. */
  @Test
  void aMissingStoreSettingComesWithItsKey() {
    assertThat(config(Map.of()).missingStoreSetting())
        .hasValueSatisfying(
            missing -> {
              assertThat(missing.key()).isEqualTo(OutboxSourceConfig.CONNECTION_URL);
              assertThat(missing.message())
                  .startsWith("Missing required configuration \"connection.url\"");
            });
    assertThat(config(Map.of("store.kind", "mongodb")).missingStoreSetting())
        .map(StoreBinding.MissingSetting::key)
        .contains(OutboxSourceConfig.MONGODB_URI);
    assertThat(
            config(Map.of("store.kind", "mongodb", "mongodb.uri", "mongodb://db-0:27017"))
                .missingStoreSetting())
        .map(StoreBinding.MissingSetting::key)
        .contains(OutboxSourceConfig.MONGODB_DATABASE);
    assertThat(
            config(Map.of("store.kind", "mongodb", "mongodb.uri", "mongodb://db-0:27017/shop"))
                .missingStoreSetting())
        .isEmpty();
  }

  @Test
  void addressesCarryNoCredentials() {
    OutboxSourceConfig postgres =
        config(Map.of("connection.url", "jdbc:postgresql://db:5432/app?password=s3cret"));
    OutboxSourceConfig mongodb =
        config(Map.of("store.kind", "mongodb", "mongodb.uri", "mongodb://app:s3cret@db-0/shop"));

    assertThat(postgres.store().address(postgres))
        .isEqualTo("jdbc:postgresql://db:5432/app?password=****");
    assertThat(mongodb.store().address(mongodb)).isEqualTo("mongodb://db-0/shop");
  }
}
