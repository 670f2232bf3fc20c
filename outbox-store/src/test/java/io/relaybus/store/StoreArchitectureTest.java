package io.relaybus.store;

import static com.tngtech.archunit.lang.syntax.ArchRuleDefinition.noClasses;

import com.tngtech.archunit.core.importer.ImportOption;
import com.tngtech.archunit.junit.AnalyzeClasses;
import com.tngtech.archunit.junit.ArchTest;
import com.tngtech.archunit.lang.ArchRule;

/**
 * Package rules of the store, checked on its compiled classes. The enforcer's ban on {@code
 * org.apache.kafka} dependencies (pom.xml) keeps Kafka off the classpath; this checks the code
 * itself, so a Kafka type that arrives another way (shaded into a jar the store uses) fails too.
 */
@AnalyzeClasses(
    packages = "io.relaybus.store",
    importOptions = ImportOption.DoNotIncludeTests.class)
class StoreArchitectureTest {

  @ArchTest
  static final ArchRule noKafkaInTheStore =
      noClasses()
          .that()
          .resideInAPackage("io.relaybus.store..")
          .should()
          .dependOnClassesThat()
          .resideInAPackage("org.apache.kafka..")
          .because(
              "the store is the data layer of every runtime (Connect, the inbox, an application)");
}
