package io.relaybus.inbox;

import static com.tngtech.archunit.lang.syntax.ArchRuleDefinition.noClasses;

import com.tngtech.archunit.core.importer.ImportOption;
import com.tngtech.archunit.junit.AnalyzeClasses;
import com.tngtech.archunit.junit.ArchTest;
import com.tngtech.archunit.lang.ArchRule;

/**
 * Package rules of the inbox, checked on its compiled classes. Kafka clients are allowed, Kafka
 * Connect is not. The enforcer (pom.xml) keeps Connect off the compile classpath; this checks the
 * code itself, so a Connect type that arrives another way (shaded into a jar the inbox uses) fails
 * too.
 */
@AnalyzeClasses(
    packages = "io.relaybus.inbox",
    importOptions = ImportOption.DoNotIncludeTests.class)
class InboxArchitectureTest {

  @ArchTest
  static final ArchRule noConnectInTheInbox =
      noClasses()
          .that()
          .resideInAPackage("io.relaybus.inbox..")
          .should()
          .dependOnClassesThat()
          .resideInAPackage("org.apache.kafka.connect..")
          .because("the inbox runs in consumer services, shared by Kafka and RabbitMQ consumers");
}
