// What a JDBC tool (DBeaver, a Java service) does with Strata over the Arrow Flight SQL JDBC
// driver, which prepares every statement. Run by services/strata/tests/clients.rs against a
// fresh `strata serve`:
//   java --add-opens=java.base/java.nio=ALL-UNNAMED \
//        -cp flight-sql-jdbc-driver.jar FlightSqlJdbc.java <host> <port>
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
        String url = "jdbc:arrow-flight-sql://" + args[0] + ":" + args[1] + "/?useEncryption=false";
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
        }
        System.out.println("flight sql jdbc: ok");
    }
}
