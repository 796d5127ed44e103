// What a JDBC tool (DBeaver, a Java service) does with Strata over the Arrow Flight SQL JDBC
// driver, which prepares every statement. Run by services/strata/tests/clients.rs against a
// fresh `strata serve` with API keys:
//   java --add-opens=java.base/java.nio=ALL-UNNAMED \
//        -cp flight-sql-jdbc-driver.jar FlightSqlJdbc.java <host> <port> <root key> <sales read key>
// Exits non-zero, with the failed check, when Strata answers differently.

import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;

public class FlightSqlJdbc {
    static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }

    public static void main(String[] args) throws Exception {
        String base = "jdbc:arrow-flight-sql://" + args[0] + ":" + args[1] + "/?useEncryption=false";
        // User and password, as docs/clients.md gives them: the password is the API key.
        String url = base + "&user=analyst&password=" + args[2];
        try (Connection c = DriverManager.getConnection(url)) {
            try (Statement s = c.createStatement()) {
                s.execute("CREATE TABLE people (id BIGINT, name VARCHAR, score DOUBLE, PRIMARY KEY (id))");
                int n = s.executeUpdate("INSERT INTO people VALUES (1, 'ann', 1.5), (2, 'bob', 2.5)");
                check(n == 2, "insert count " + n);
            }
            // A batch of parameter rows.
            try (PreparedStatement p = c.prepareStatement("INSERT INTO people VALUES (?, ?, ?)")) {
                p.setLong(1, 3);
                p.setString(2, "cy");
                p.setDouble(3, 3.5);
                p.addBatch();
                p.setLong(1, 4);
                p.setString(2, "dee");
                p.setDouble(3, 4.5);
                p.addBatch();
                p.executeBatch();
            }
            try (PreparedStatement p = c.prepareStatement(
                    "SELECT id, name, score FROM people WHERE id >= ? ORDER BY id")) {
                p.setLong(1, 2);
                List<String> got = new ArrayList<>();
                try (ResultSet r = p.executeQuery()) {
                    while (r.next()) {
                        got.add(r.getLong(1) + ":" + r.getString(2) + ":" + r.getDouble(3));
                    }
                }
                check(got.equals(List.of("2:bob:2.5", "3:cy:3.5", "4:dee:4.5")), "rows " + got);
            }
            try (Statement s = c.createStatement(); ResultSet r = s.executeQuery("SELECT count(*) FROM people")) {
                check(r.next() && r.getLong(1) == 4, "count");
            }
            DatabaseMetaData md = c.getMetaData();
            check(md.getDatabaseProductName().equals("Strata"), "product " + md.getDatabaseProductName());
            List<String> tables = new ArrayList<>();
            try (ResultSet r = md.getTables(null, null, "%", null)) {
                while (r.next()) {
                    tables.add(r.getString("TABLE_SCHEM") + "." + r.getString("TABLE_NAME"));
                }
            }
            check(tables.equals(List.of("public.people")), "tables " + tables);
            List<String> columns = new ArrayList<>();
            try (ResultSet r = md.getColumns(null, "public", "people", "%")) {
                while (r.next()) {
                    columns.add(r.getString("COLUMN_NAME"));
                }
            }
            check(columns.equals(List.of("id", "name", "score")), "columns " + columns);
            List<String> keys = new ArrayList<>();
            try (ResultSet r = md.getPrimaryKeys(null, "public", "people")) {
                while (r.next()) {
                    keys.add(r.getString("COLUMN_NAME"));
                }
            }
            check(keys.equals(List.of("id")), "keys " + keys);
            try (Statement s = c.createStatement()) {
                s.executeQuery("SELECT nope FROM people");
                throw new AssertionError("a bad column was accepted");
            } catch (java.sql.SQLException e) {
                check(e.getMessage().contains("nope"), "error " + e.getMessage());
            }
            // A result set of every column type a table takes, read by the JDBC getters.
            try (Statement s = c.createStatement()) {
                s.execute("CREATE TABLE sales.every (k BIGINT, i8 TINYINT, i16 SMALLINT, i32 INT, "
                        + "u64 BIGINT UNSIGNED, f32 FLOAT, f64 DOUBLE, ok BOOLEAN, s VARCHAR, "
                        + "b BYTEA, d DATE, ts TIMESTAMP, PRIMARY KEY (k))");
                int n = s.executeUpdate("INSERT INTO sales.every VALUES (1, -8, -16, -32, 64, 0.5, "
                        + "0.25, true, 'x', X'00ff', DATE '2026-01-02', "
                        + "TIMESTAMP '2026-01-02 03:04:05.678')");
                check(n == 1, "insert count " + n);
            }
            try (Statement s = c.createStatement();
                    ResultSet r = s.executeQuery("SELECT * FROM sales.every")) {
                check(r.next(), "a row of every type");
                check(r.getLong("k") == 1 && r.getByte("i8") == -8 && r.getShort("i16") == -16
                        && r.getInt("i32") == -32 && r.getLong("u64") == 64, "integers");
                check(r.getFloat("f32") == 0.5f && r.getDouble("f64") == 0.25, "floats");
                check(r.getBoolean("ok") && r.getString("s").equals("x"), "boolean, string");
                byte[] b = r.getBytes("b");
                check(b.length == 2 && b[0] == 0 && b[1] == (byte) 0xff, "bytes");
                check(r.getDate("d").toLocalDate().equals(java.time.LocalDate.of(2026, 1, 2)),
                        "date " + r.getDate("d"));
                check(r.getTimestamp("ts").toLocalDateTime().equals(
                        java.time.LocalDateTime.of(2026, 1, 2, 3, 4, 5, 678_000_000)),
                        "timestamp " + r.getTimestamp("ts"));
                check(!r.next(), "one row");
            }
        }
        // A read key for one namespace sees and reads only that namespace, in the catalog
        // too, and cannot write.
        try (Connection c = DriverManager.getConnection(base + "&user=analyst&password=" + args[3])) {
            List<String> tables = new ArrayList<>();
            try (ResultSet r = c.getMetaData().getTables(null, null, "%", null)) {
                while (r.next()) {
                    tables.add(r.getString("TABLE_SCHEM") + "." + r.getString("TABLE_NAME"));
                }
            }
            check(tables.equals(List.of("sales.every")), "a sales reader's tables " + tables);
            try (Statement s = c.createStatement();
                    ResultSet r = s.executeQuery("SELECT count(*) FROM sales.every")) {
                check(r.next() && r.getLong(1) == 1, "a sales reader's count");
            }
            for (String refused : List.of("SELECT * FROM people", "DELETE FROM sales.every")) {
                try (Statement s = c.createStatement()) {
                    s.execute(refused);
                    throw new AssertionError(refused + ": answered for a read key of sales");
                } catch (java.sql.SQLException e) {
                    // refused
                }
            }
        }
        // A wrong password does not connect.
        try (Connection c = DriverManager.getConnection(base + "&user=analyst&password=wrong")) {
            c.createStatement().executeQuery("SELECT 1").close();
            throw new AssertionError("a wrong key connected");
        } catch (java.sql.SQLException e) {
            // refused
        }
        System.out.println("flight sql jdbc: ok");
    }
}
