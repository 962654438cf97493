// pgjdbc's statement cache evicting through pgfleet (tests/drivers/test_pgjdbc_cache.py compiles
// and runs it against PostgreSQL and through pgfleet, and compares the output). With
// prepareThreshold=1 every statement is a named server-side statement from its first execution;
// with preparedStatementCacheQueries=3 and eight distinct texts, pgjdbc drops its least recently
// used statements and sends their Close in the batch of its next query. Three rounds in one
// transaction each (one with an error and a rollback mid-round), then the same in autocommit.
// Prints one line per result ("ok VALUE" or "error SQLSTATE") and "done"; exits 0 unless
// something other than an SQL error went wrong.
//
//   java -cp postgresql.jar:DIR JdbcCacheEviction URL
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.Properties;
import org.postgresql.PGStatement;

public class JdbcCacheEviction {
  static void run(Connection conn, String sql, int arg) {
    try (PreparedStatement ps = conn.prepareStatement(sql)) {
      ps.setInt(1, arg);
      try (ResultSet rs = ps.executeQuery()) {
        rs.next();
        boolean named = ps.unwrap(PGStatement.class).isUseServerPrepare();
        System.out.println("ok " + rs.getLong(1) + (named ? " named" : " unnamed"));
      }
    } catch (SQLException e) {
      System.out.println("error " + e.getSQLState());
    }
  }

  static void rounds(Connection conn, boolean autocommit) throws SQLException {
    conn.setAutoCommit(autocommit);
    for (int round = 0; round < 3; round++) {
      for (int n = 0; n < 8; n++) {
        run(conn, "SELECT ?::int + " + (n % 6) + " AS c" + (n % 6), round);
      }
      if (round == 1) {
        run(conn, "SELECT 1 / ?::int AS div", 0);
        // In a failed transaction (autocommit: a fresh one) a statement pgjdbc must prepare again.
        run(conn, "SELECT ?::int + 7 AS c7", round);
        if (!autocommit) conn.rollback();
      } else if (!autocommit) {
        conn.commit();
      }
    }
    run(conn, "SELECT ?::int + 41 AS c41", 1);
    if (!autocommit) conn.commit();
  }

  public static void main(String[] args) throws Exception {
    Properties props = new Properties();
    props.setProperty("user", "postgres");
    props.setProperty("prepareThreshold", "1");
    props.setProperty("preparedStatementCacheQueries", "3");
    props.setProperty("connectTimeout", "10");
    props.setProperty("socketTimeout", "30");
    try (Connection conn = DriverManager.getConnection(args[0], props)) {
      rounds(conn, false);
      rounds(conn, true);
    }
    System.out.println("done");
  }
}
