// pgjdbc through pgfleet in transaction mode (tests/drivers/test_pgjdbc.py compiles and runs it).
// THREADS connections, each TRANSACTIONS transactions of server-prepared statements
// (prepareThreshold=1: named from the first execution), an executeBatch insert, and statements
// that rotate through pgjdbc's own statement cache (preparedStatementCacheQueries=4), so pgjdbc
// closes and re-prepares statements by protocol Close/Parse; every fifth transaction also reads a
// cursor (fetch size 10) and recovers from a failing statement. Prints one "ERROR ..." line per
// failure and a summary line; exits 0 only when nothing failed.
//
//   java -cp postgresql.jar:DIR JdbcClients URL THREADS TRANSACTIONS MARKER TABLE
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.postgresql.PGStatement;

public class JdbcClients {
  static final AtomicLong serverPrepared = new AtomicLong();
  static final AtomicLong executions = new AtomicLong();
  static final AtomicLong batchRows = new AtomicLong();

  public static void main(String[] args) throws Exception {
    String url = args[0];
    int threads = Integer.parseInt(args[1]);
    int transactions = Integer.parseInt(args[2]);
    String marker = args[3];
    String table = args[4];
    ExecutorService pool = Executors.newFixedThreadPool(threads);
    List<Future<?>> futures = new ArrayList<>();
    for (int i = 0; i < threads; i++) {
      final int client = i;
      futures.add(pool.submit(() -> {
        run(url, client, transactions, marker, table);
        return null;
      }));
    }
    pool.shutdown();
    if (!pool.awaitTermination(60, TimeUnit.SECONDS)) {
      System.out.println("ERROR timeout: clients still running after 60 s");
      System.exit(3);
    }
    int failures = 0;
    for (int i = 0; i < futures.size(); i++) {
      try {
        futures.get(i).get();
      } catch (ExecutionException e) {
        failures++;
        Throwable cause = e.getCause();
        System.out.println("ERROR client " + i + ": " + cause);
      }
    }
    System.out.println("SUMMARY failures=" + failures + " executions=" + executions.get()
        + " server_prepared=" + serverPrepared.get() + " batch_rows=" + batchRows.get());
    System.exit(failures == 0 ? 0 : 1);
  }

  static void check(boolean ok, String what) {
    if (!ok) throw new IllegalStateException(what);
  }

  // Runs ps, checks the single int/long result, and counts whether pgjdbc used a server-side
  // (named) prepared statement for it.
  static void expectLong(PreparedStatement ps, long expected) throws SQLException {
    try (ResultSet rs = ps.executeQuery()) {
      check(rs.next(), "no row");
      long got = rs.getLong(1);
      check(got == expected, "got " + got + ", expected " + expected);
    }
    executions.incrementAndGet();
    if (ps.unwrap(PGStatement.class).isUseServerPrepare()) serverPrepared.incrementAndGet();
  }

  static void run(String url, int client, int transactions, String marker, String table)
      throws SQLException {
    Properties props = new Properties();
    props.setProperty("user", "postgres");
    props.setProperty("prepareThreshold", "1");
    props.setProperty("preparedStatementCacheQueries", "4");
    props.setProperty("connectTimeout", "10");
    props.setProperty("socketTimeout", "30");
    try (Connection conn = DriverManager.getConnection(url, props)) {
      conn.setAutoCommit(false);
      for (int n = 0; n < transactions; n++) {
        try (PreparedStatement ps = conn.prepareStatement("SELECT ?::int + 1 AS " + marker)) {
          ps.setInt(1, n);
          expectLong(ps, n + 1);
        }
        try (PreparedStatement ps =
            conn.prepareStatement("SELECT ?::bigint * 2 AS " + marker + ", ?::text")) {
          ps.setLong(1, n);
          ps.setString(2, "c" + client);
          expectLong(ps, 2L * n);
        }
        try (PreparedStatement ins = conn.prepareStatement(
            "INSERT INTO " + table + " (client, n, note) VALUES (?, ?, ?) /* " + marker + " */")) {
          for (int k = 0; k < 5; k++) {
            ins.setInt(1, client);
            ins.setInt(2, n);
            ins.setString(3, "batch" + k);
            ins.addBatch();
          }
          int[] counts = ins.executeBatch();
          check(counts.length == 5, "batch returned " + counts.length + " counts");
          for (int c : counts) check(c == 1, "batch row count " + c);
          batchRows.addAndGet(counts.length);
        }
        // Three more statement texts: six in all through pgjdbc's cache of four, so it closes
        // its least recently used statements and prepares them again later under new names.
        int k = n % 3;
        try (PreparedStatement ps =
            conn.prepareStatement("SELECT ?::int + " + k + " AS " + marker + "_rot")) {
          ps.setInt(1, n);
          expectLong(ps, n + k);
        }
        conn.commit();
        if (n % 5 == 0) extras(conn, n, marker);
      }
    }
  }

  // A cursor (fetch size 10: a named portal read by Execute with a row limit) and a statement
  // that fails at execution, whose transaction the client rolls back; the statement stays usable.
  static void extras(Connection conn, int n, String marker) throws SQLException {
    try (PreparedStatement ps = conn.prepareStatement(
        "SELECT g AS " + marker + "_cursor FROM generate_series(1, ?) g")) {
      ps.setFetchSize(10);
      ps.setInt(1, 35);
      int rows = 0;
      try (ResultSet rs = ps.executeQuery()) {
        while (rs.next()) check(rs.getInt(1) == ++rows, "cursor row " + rows);
      }
      check(rows == 35, "cursor returned " + rows + " rows");
    }
    conn.commit();
    try (PreparedStatement ps = conn.prepareStatement("SELECT 10 / ? AS " + marker + "_div")) {
      ps.setInt(1, 0);
      try {
        ps.executeQuery().close();
        throw new IllegalStateException("division by zero did not fail");
      } catch (SQLException e) {
        check("22012".equals(e.getSQLState()), "unexpected error " + e);
      }
      conn.rollback();
      ps.setInt(1, 5);
      try (ResultSet rs = ps.executeQuery()) {
        check(rs.next() && rs.getInt(1) == 2, "10 / 5 after the failure");
      }
      conn.commit();
    }
  }
}
