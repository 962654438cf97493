// pgjdbc after a schema change (tests/drivers/test_pgjdbc_schema_change.py compiles and runs it
// against PostgreSQL and through pgfleet, and compares the output). With prepareThreshold=1 a
// statement is a named server-side statement from its first execution, and pgjdbc caches it per
// connection; when a table loses a column, PostgreSQL refuses the cached plan with 0A000 and
// pgjdbc (in autocommit) deallocates and prepares it again by itself. Then a second connection
// prepares the same text, and a column's type changes under an INSERT.
// Prints one line per result ("ok ..." or "error SQLSTATE") and "done".
//
//   java -cp postgresql.jar:DIR JdbcSchemaChange URL
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Properties;

public class JdbcSchemaChange {
  static void select(Connection conn, String sql) {
    try (PreparedStatement ps = conn.prepareStatement(sql)) {
      ps.setInt(1, 1);
      try (ResultSet rs = ps.executeQuery()) {
        ResultSetMetaData meta = rs.getMetaData();
        StringBuilder line = new StringBuilder("ok");
        for (int i = 1; i <= meta.getColumnCount(); i++) {
          line.append(' ').append(meta.getColumnName(i)).append(':').append(meta.getColumnTypeName(i));
        }
        while (rs.next()) {
          for (int i = 1; i <= meta.getColumnCount(); i++) line.append(' ').append(rs.getString(i));
        }
        System.out.println(line);
      }
    } catch (SQLException e) {
      System.out.println("error " + e.getSQLState());
    }
  }

  static void insert(Connection conn, String sql, Object value) {
    try (PreparedStatement ps = conn.prepareStatement(sql)) {
      ps.setObject(1, value);
      System.out.println("ok " + ps.executeUpdate());
    } catch (SQLException e) {
      System.out.println("error " + e.getSQLState());
    }
  }

  static void ddl(Connection conn, String sql) throws SQLException {
    try (Statement st = conn.createStatement()) {
      st.execute(sql);
    }
  }

  public static void main(String[] args) throws Exception {
    Properties props = new Properties();
    props.setProperty("user", "postgres");
    props.setProperty("prepareThreshold", "1");
    String select = "SELECT * FROM jdbc_schema WHERE a = ?";
    String insert = "INSERT INTO jdbc_schema_i (v) VALUES (?)";
    try (Connection first = DriverManager.getConnection(args[0], props);
        Connection other = DriverManager.getConnection(args[0], props)) {
      ddl(first, "DROP TABLE IF EXISTS jdbc_schema, jdbc_schema_i");
      ddl(first, "CREATE TABLE jdbc_schema (a int, b text, c int)");
      ddl(first, "INSERT INTO jdbc_schema VALUES (1, 'x', 2)");
      ddl(first, "CREATE TABLE jdbc_schema_i (v int)");
      for (int i = 0; i < 3; i++) select(first, select);
      insert(first, insert, 1);
      insert(first, insert, 2);
      ddl(other, "ALTER TABLE jdbc_schema DROP COLUMN b");
      for (int i = 0; i < 3; i++) select(first, select);
      select(other, select);
      ddl(other, "ALTER TABLE jdbc_schema_i ALTER COLUMN v TYPE bigint");
      insert(first, insert, 3);
      insert(other, insert, 4L);
      select(other, "SELECT count(*) AS n FROM jdbc_schema_i WHERE v > ?");
    }
    System.out.println("done");
  }
}
