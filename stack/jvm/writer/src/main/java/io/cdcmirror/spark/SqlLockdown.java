package io.cdcmirror.spark;

import java.util.Set;

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
 *   <li>{@code SET} of a setting the lockdown depends on ({@code spark.sql.runSQLOnFiles}).</li>
 * </ul>
 * The rule depends on no session setting, so no statement of the session can switch it off.
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
      Set.of("ExplainCommand", "SetCommand", "ResetCommand", "SetNamespaceCommand",
          "SetCatalogAndNamespace", "SetCatalogCommand", "CreateViewCommand");

  private static final Set<String> LOCKED_SETTINGS = Set.of("spark.sql.runsqlonfiles");

  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    extensions.injectCheckRule(session -> SqlLockdown::check);
    return BoxedUnit.UNIT;
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
          + "queries, SHOW, DESCRIBE, EXPLAIN, USE, SET and temporary views)");
    }
    if (command instanceof CreateViewCommand view
        && view.viewType() == PersistedView$.MODULE$) {
      throw refused("CREATE VIEW is disabled (the server is read-only); "
          + "CREATE TEMPORARY VIEW is allowed");
    }
    if (command instanceof SetCommand set) {
      Option<Tuple2<String, Option<String>>> pair = set.kv();
      if (pair.isDefined() && pair.get()._2().isDefined()
          && LOCKED_SETTINGS.contains(pair.get()._1().trim().toLowerCase(java.util.Locale.ROOT))) {
        throw refused("the setting " + pair.get()._1().trim() + " cannot be changed");
      }
    }
  }

  private static BoxedUnit checkExpression(Expression expression) {
    String name = expression.getClass().getSimpleName();
    if (REFLECTION.contains(name)) {
      throw refused("calling Java methods (reflect, java_method, try_reflect) is disabled");
    }
    if (name.startsWith("Hive") && (name.contains("UDF") || name.contains("UDAF"))) {
      throw refused("Hive UDFs (Java classes) are disabled");
    }
    return BoxedUnit.UNIT;
  }

  private static SecurityException refused(String what) {
    return new SecurityException(PREFIX + what + ".");
  }
}
