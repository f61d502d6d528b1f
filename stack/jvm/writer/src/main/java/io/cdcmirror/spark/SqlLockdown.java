package io.cdcmirror.spark;

import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.analysis.PersistedView$;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.plans.logical.Command;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.execution.command.CreateViewCommand;
import org.apache.spark.sql.execution.command.SetCommand;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.execution.datasources.v2.FileTable;

import scala.Option;
import scala.Tuple2;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * The sessions of {@code cdc-mirror sql-server} read the lake's catalog tables and nothing
 * else of the host: {@code spark.sql.extensions=io.cdcmirror.spark.SqlLockdown}.
 *
 * <p>A check rule runs on every analysed plan of the session (queries, the queries inside
 * commands, views as they are expanded, subqueries) and refuses:
 * <ul>
 *   <li>calling Java methods: {@code reflect}, {@code java_method}, {@code try_reflect}, and
 *       Hive UDFs (whose classes are arbitrary Java);</li>
 *   <li>data read by path rather than through a catalog table ({@code text.`/etc/passwd`},
 *       a file source relation without a table);</li>
 *   <li>shell commands ({@code SELECT TRANSFORM ... USING 'cmd'});</li>
 *   <li>every command but the read-only ones (SHOW, DESCRIBE, EXPLAIN, USE, SET, temporary
 *       views): no ADD JAR/FILE/ARCHIVE, LOAD DATA, CREATE TABLE/FUNCTION/DATABASE, LOCATION
 *       changes, INSERT (also INTO DIRECTORY), DROP, ALTER;</li>
 *   <li>{@code SET key=value} of any key but the harmless ones of {@link #SETTABLE} (a
 *       catalog, a JDBC URL, a Hadoop filesystem, {@code spark.sql.runSQLOnFiles}: all
 *       refused), and {@code RESET};</li>
 *   <li>every statement of a session whose settings differ from the server's in a key not in
 *       {@link #SETTABLE}: HiveServer2 copies the settings a client sends when it connects
 *       ({@code jdbc:hive2://...?key=value}, {@code #var=value}) into the session without a
 *       SET statement, so the rule checks the session's settings themselves.</li>
 * </ul>
 * The rule depends on no session setting, so no statement of the session can switch it off.
 * {@link #guardSystemProperties()} refuses, in addition, the JVM system properties a client
 * would set when it connects ({@code set:system:key}), which the login checks read.
 */
public final class SqlLockdown extends AbstractFunction1<SparkSessionExtensions, BoxedUnit>
    implements java.io.Serializable {

  private static final long serialVersionUID = 1L;

  private static final String PREFIX = "cdc-mirror SQL server: ";

  /** Expressions that call a Java method named in the query. */
  private static final Set<String> REFLECTION =
      Set.of("CallMethodViaReflection", "TryReflect");

  /** Plan nodes that run a shell command or write, which are not Commands. */
  private static final Set<String> REFUSED_NODES =
      Set.of("ScriptTransformation", "HiveScriptTransformation", "InsertIntoStatement",
          "InsertIntoDir");

  /** Read-only commands, by class name (v1 and v2 forms). SetCommand is checked apart. */
  private static final Set<String> READ_ONLY_COMMANDS =
      Set.of("ExplainCommand", "SetCommand", "SetNamespaceCommand",
          "SetCatalogAndNamespace", "SetCatalogCommand", "CreateViewCommand");

  /**
   * The only settings a session may change (lower case), by SET or when it connects: how
   * results look and how much parallelism a query uses, nothing that names a class, a path,
   * a URL or a catalog. The last four are set by the server itself for each session
   * (Spark's HiveServer2: its Hive version, java8 dates and how binary results print; the
   * Hive JDBC driver's fetch size).
   */
  public static final Set<String> SETTABLE =
      Set.of("spark.sql.session.timezone", "spark.sql.ansi.enabled",
          "spark.sql.shuffle.partitions", "spark.sql.adaptive.enabled",
          "spark.sql.hive.version", "spark.sql.datetime.java8api.enabled",
          "spark.sql.binaryoutputstyle", "hive.server2.thrift.resultset.default.fetch.size");

  /** Pure: whether {@code SET key=value} may change {@code key}. */
  public static boolean settable(String key) {
    return SETTABLE.contains(key.trim().toLowerCase(Locale.ROOT));
  }

  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    extensions.injectCheckRule(session -> plan -> {
      checkSessionSettings(session);
      return check(plan);
    });
    return BoxedUnit.UNIT;
  }

  /**
   * Refuses the session's statements when a setting differs from the server's (its
   * SparkConf, or a JVM system property of the operator's such as the login settings HiveServer2
   * copies into each session) in a key not in {@link #SETTABLE}.
   */
  public static void checkSessionSettings(SparkSession session) {
    Map<String, String> settings =
        CollectionConverters.asJava(session.sessionState().conf().getAllConfs());
    Map<String, String> server = serverSettings(session);
    for (Map.Entry<String, String> setting : settings.entrySet()) {
      String key = setting.getKey();
      String value = setting.getValue();
      if (value.equals(server.get(key))) {
        continue;
      }
      if (settable(key) || value.equals(System.getProperty(key))) {
        continue;
      }
      throw refused("the setting " + key + " cannot be changed (it was given when connecting);"
          + " reconnect without it");
    }
  }

  /**
   * The server's settings: its SparkConf, and its shared state's, which every new session starts
   * from and which also holds what the server set once its JVM ran (the secret settings kept off
   * its command line: cdc_platform.spark.set_secret_conf). spark-core is not on this module's
   * compile path: by reflection.
   */
  private static Map<String, String> serverSettings(SparkSession session) {
    try {
      Map<String, String> found = new java.util.HashMap<>();
      Object context = SparkSession.class.getMethod("sparkContext").invoke(session);
      putAll(found, context.getClass().getMethod("getConf").invoke(context));
      Object shared = session.getClass().getMethod("sharedState").invoke(session);
      putAll(found, shared.getClass().getMethod("conf").invoke(shared));
      return found;
    } catch (ReflectiveOperationException exc) {
      throw new IllegalStateException(PREFIX + "cannot read the server's settings", exc);
    }
  }

  /** The entries of a SparkConf {@code conf} put into {@code found}. */
  private static void putAll(Map<String, String> found, Object conf)
      throws ReflectiveOperationException {
    for (Object pair : (Object[]) conf.getClass().getMethod("getAll").invoke(conf)) {
      Tuple2<?, ?> entry = (Tuple2<?, ?>) pair;
      found.put(String.valueOf(entry._1()), String.valueOf(entry._2()));
    }
  }

  /**
   * Refuses JVM system properties set by a HiveServer2 session (a client's
   * {@code set:system:key=value} when it connects): the login checks read theirs there.
   * Idempotent.
   */
  public static synchronized void guardSystemProperties() {
    Properties current = System.getProperties();
    if (!(current instanceof GuardedProperties)) {
      System.setProperties(new GuardedProperties(current));
    }
  }

  /** System properties that a HiveServer2 session may not change. */
  static final class GuardedProperties extends Properties {
    private static final long serialVersionUID = 1L;

    GuardedProperties(Properties current) {
      super();
      putAll(current);
    }

    private static void refuseFromSession() {
      for (StackTraceElement frame : Thread.currentThread().getStackTrace()) {
        // HiveSessionImpl.setVariable: the session's settings from the client (set:system:).
        if (frame.getClassName().startsWith("org.apache.hive.service.cli.session.HiveSession")
            && "setVariable".equals(frame.getMethodName())) {
          throw refused("system properties cannot be set by a session");
        }
      }
    }

    @Override
    public synchronized Object put(Object key, Object value) {
      refuseFromSession();
      return super.put(key, value);
    }

    @Override
    public synchronized Object setProperty(String key, String value) {
      refuseFromSession();
      return super.setProperty(key, value);
    }

    @Override
    public synchronized Object remove(Object key) {
      refuseFromSession();
      return super.remove(key);
    }
  }

  /** Throws {@link SecurityException} naming what the plan may not do. */
  public static BoxedUnit check(LogicalPlan plan) {
    plan.foreachWithSubqueries(node -> {
      checkNode(node);
      node.expressions().foreach(expression -> {
        expression.foreach(SqlLockdown::checkExpression);
        return BoxedUnit.UNIT;
      });
      return BoxedUnit.UNIT;
    });
    return BoxedUnit.UNIT;
  }

  private static void checkNode(LogicalPlan node) {
    String name = node.getClass().getSimpleName();
    if (REFUSED_NODES.contains(name)) {
      throw refused(name.contains("Transformation")
          ? "TRANSFORM ... USING (running a shell command) is disabled"
          : "INSERT is disabled (the server is read-only)");
    }
    if (node instanceof LogicalRelation relation && relation.catalogTable().isEmpty()) {
      throw refused("reading files by path is disabled; query a table of the catalog");
    }
    if (node instanceof DataSourceV2Relation relation
        && relation.table() instanceof FileTable
        && relation.identifier().isEmpty()) {
      throw refused("reading files by path is disabled; query a table of the catalog");
    }
    if (node instanceof Command) {
      checkCommand(node, name);
    }
  }

  private static void checkCommand(LogicalPlan command, String name) {
    boolean readOnly = name.startsWith("Show") || name.startsWith("Describe")
        || READ_ONLY_COMMANDS.contains(name);
    if (!readOnly) {
      throw refused("the statement " + name + " is disabled (the server is read-only: "
          + "queries, SHOW, DESCRIBE, EXPLAIN, USE, SET of "
          + String.join(", ", new java.util.TreeSet<>(SETTABLE)) + " and temporary views)");
    }
    if (command instanceof CreateViewCommand view
        && view.viewType() == PersistedView$.MODULE$) {
      throw refused("CREATE VIEW is disabled (the server is read-only); "
          + "CREATE TEMPORARY VIEW is allowed");
    }
    if (command instanceof SetCommand set) {
      Option<Tuple2<String, Option<String>>> pair = set.kv();
      // SET and SET -v list the settings, SET key shows one; SET key=value changes one.
      if (pair.isDefined() && pair.get()._2().isDefined() && !settable(pair.get()._1())) {
        throw refused("the setting " + pair.get()._1().trim() + " cannot be changed (SET may "
            + "change only " + String.join(", ", new java.util.TreeSet<>(SETTABLE)) + ")");
      }
    }
  }

  private static BoxedUnit checkExpression(Expression expression) {
    String name = expression.getClass().getSimpleName();
    if (REFLECTION.contains(name)) {
      throw refused("calling Java methods (reflect, java_method, try_reflect) is disabled");
    }
    // Every Hive function wrapper (HiveSimpleUDF, HiveGenericUDF, HiveGenericUDTF,
    // HiveUDAFFunction, ...) lives in Spark's Hive package: refused by class, not by name.
    if (expression.getClass().getName().startsWith("org.apache.spark.sql.hive.")) {
      throw refused("Hive functions (UDF, UDAF, UDTF: Java classes) are disabled");
    }
    return BoxedUnit.UNIT;
  }

  private static SecurityException refused(String what) {
    return new SecurityException(PREFIX + what + ".");
  }
}
