// What a Java service or JDBC tool does with Strata over the PostgreSQL JDBC driver. Run by
// services/strata/tests/clients.rs against a fresh `strata serve` with API keys:
//   java -cp postgresql.jar PostgresJdbc.java <host> <port> <root key> <sales reader key>
// Exits non-zero, with the failed check, when Strata answers differently.

import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.Date;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Timestamp;
import java.sql.Types;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

public class PostgresJdbc {
    static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }

    static Connection connect(String host, String port, String key) throws SQLException {
        Properties p = new Properties();
        p.setProperty("user", "analyst"); // not checked: the password is the API key
        p.setProperty("password", key);
        return DriverManager.getConnection("jdbc:postgresql://" + host + ":" + port + "/strata", p);
    }

    static List<String> tables(DatabaseMetaData md) throws SQLException {
        List<String> got = new ArrayList<>();
        try (ResultSet r = md.getTables(null, null, "%", new String[] {"TABLE"})) {
            while (r.next()) {
                got.add(r.getString("TABLE_SCHEM") + "." + r.getString("TABLE_NAME"));
            }
        }
        return got;
    }

    public static void main(String[] args) throws Exception {
        String host = args[0], port = args[1], root = args[2], salesReader = args[3];
        try (Connection c = connect(host, port, root)) {
            try (Statement s = c.createStatement()) {
                s.execute("CREATE TABLE sales.items (id BIGINT, qty INT, price DOUBLE, name VARCHAR, "
                        + "ok BOOLEAN, day DATE, at TIMESTAMP, PRIMARY KEY (id))");
                s.execute("CREATE TABLE hr.staff (id BIGINT, name VARCHAR, PRIMARY KEY (id))");
                int n = s.executeUpdate("INSERT INTO hr.staff VALUES (1, 'ann'), (2, 'bob')");
                check(n == 2, "insert count " + n);
            }
            // Parameters of every type, as a batch and one at a time (past the driver's
            // prepareThreshold of 5, when it switches to named server-side statements).
            try (PreparedStatement p = c.prepareStatement("INSERT INTO sales.items VALUES (?, ?, ?, ?, ?, ?, ?)")) {
                for (long id = 1; id <= 8; id++) {
                    p.setLong(1, id);
                    p.setInt(2, (int) id * 10);
                    p.setDouble(3, id + 0.5);
                    p.setString(4, "item " + id);
                    p.setBoolean(5, id % 2 == 0);
                    p.setDate(6, Date.valueOf("2026-01-0" + (id % 9 + 1)));
                    p.setTimestamp(7, Timestamp.valueOf("2026-01-02 03:04:05.25"));
                    if (id <= 4) {
                        p.addBatch();
                    } else {
                        check(p.executeUpdate() == 1, "single insert " + id);
                    }
                    if (id == 4) {
                        p.executeBatch();
                    }
                }
            }
            try (PreparedStatement p = c.prepareStatement(
                    "SELECT id, qty, price, name, ok, day, at FROM sales.items WHERE id >= ? AND name <> ? ORDER BY id")) {
                for (int round = 0; round < 7; round++) {
                    p.setLong(1, 7);
                    p.setString(2, "none");
                    List<String> got = new ArrayList<>();
                    try (ResultSet r = p.executeQuery()) {
                        ResultSetMetaData m = r.getMetaData();
                        check(m.getColumnCount() == 7, "columns " + m.getColumnCount());
                        check(m.getColumnName(4).equals("name"), "column name " + m.getColumnName(4));
                        while (r.next()) {
                            got.add(r.getLong(1) + ":" + r.getInt(2) + ":" + r.getDouble(3) + ":" + r.getString(4)
                                    + ":" + r.getBoolean(5) + ":" + r.getDate(6) + ":" + r.getTimestamp(7));
                        }
                    }
                    check(got.equals(List.of(
                            "7:70:7.5:item 7:false:2026-01-08:2026-01-02 03:04:05.25",
                            "8:80:8.5:item 8:true:2026-01-09:2026-01-02 03:04:05.25")),
                            "round " + round + ": " + got);
                }
            }
            try (Statement s = c.createStatement(); ResultSet r = s.executeQuery("SELECT count(*) FROM sales.items")) {
                check(r.next() && r.getLong(1) == 8, "count");
            }
            try (PreparedStatement p = c.prepareStatement("UPDATE sales.items SET qty = ? WHERE id = ?")) {
                p.setInt(1, 0);
                p.setLong(2, 3);
                check(p.executeUpdate() == 1, "update count");
            }
            DatabaseMetaData md = c.getMetaData();
            List<String> all = tables(md);
            check(all.contains("sales.items") && all.contains("hr.staff"), "getTables " + all);
            List<String> cols = new ArrayList<>();
            try (ResultSet r = md.getColumns(null, "sales", "items", "%")) {
                while (r.next()) {
                    cols.add(r.getString("COLUMN_NAME"));
                }
            }
            check(cols.equals(List.of("id", "qty", "price", "name", "ok", "day", "at")), "getColumns " + cols);
            // The primary key, as DBeaver's Keys tab and ORMs read it.
            List<String> keys = new ArrayList<>();
            try (ResultSet r = md.getPrimaryKeys(null, "sales", "items")) {
                while (r.next()) {
                    keys.add(r.getString("TABLE_SCHEM") + "." + r.getString("TABLE_NAME") + ":"
                            + r.getString("COLUMN_NAME") + ":" + r.getShort("KEY_SEQ") + ":" + r.getString("PK_NAME"));
                }
            }
            check(keys.equals(List.of("sales.items:id:1:items_pkey")), "getPrimaryKeys " + keys);
            // Its index (the key's, unique), as DBeaver's Indexes tab reads it.
            List<String> indexes = new ArrayList<>();
            try (ResultSet r = md.getIndexInfo(null, "sales", "items", false, true)) {
                while (r.next()) {
                    indexes.add(r.getString("INDEX_NAME") + ":" + r.getString("COLUMN_NAME") + ":"
                            + r.getShort("ORDINAL_POSITION") + ":" + r.getBoolean("NON_UNIQUE"));
                }
            }
            check(indexes.equals(List.of("items_pkey:id:1:false")), "getIndexInfo " + indexes);
            // No foreign keys: empty, not an error.
            try (ResultSet r = md.getImportedKeys(null, "sales", "items")) {
                check(!r.next(), "getImportedKeys");
            }
            try (ResultSet r = md.getExportedKeys(null, "sales", "items")) {
                check(!r.next(), "getExportedKeys");
            }
            // The types and functions tools list (DBeaver's data type editor, SQL completion).
            Map<String, Integer> types = new HashMap<>();
            try (ResultSet r = md.getTypeInfo()) {
                while (r.next()) {
                    types.put(r.getString("TYPE_NAME"), r.getInt("DATA_TYPE"));
                }
            }
            check(Integer.valueOf(Types.BIGINT).equals(types.get("int8"))
                    && Integer.valueOf(Types.BIT).equals(types.get("bool"))
                    && Integer.valueOf(Types.TIMESTAMP).equals(types.get("timestamp")), "getTypeInfo " + types);
            int functions = 0;
            try (ResultSet r = md.getFunctions(null, "pg_catalog", "length")) {
                while (r.next()) {
                    functions++;
                }
            }
            check(functions > 0, "getFunctions found no length()");
            try (ResultSet r = md.getProcedures(null, "sales", "%")) {
                check(!r.next(), "getProcedures");
            }
            // DBeaver's navigator, as its PostgreSQL plugin asks (its own catalog queries,
            // prepared, the schema's oid bound): schemas, a schema's tables, their columns,
            // their keys (the Keys tab, from pg_constraint), their indexes.
            long salesOid = -1;
            try (Statement s = c.createStatement(); ResultSet r = s.executeQuery(
                    "SELECT n.oid,n.*,d.description FROM pg_catalog.pg_namespace n\n"
                    + "LEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid=n.oid AND d.objsubid=0 "
                    + "AND d.classoid='pg_namespace'::regclass\n ORDER BY nspname")) {
                while (r.next()) {
                    if ("sales".equals(r.getString("nspname"))) {
                        salesOid = r.getLong("oid");
                    }
                }
            }
            check(salesOid > 0, "DBeaver's schema list");
            List<String> navigator = new ArrayList<>();
            try (PreparedStatement p = c.prepareStatement(
                    "SELECT c.oid,c.*,d.description,(select array_agg(i.inhparent) from pg_catalog.pg_inherits i "
                    + "where i.inhrelid = c.oid) parents\nFROM pg_catalog.pg_class c\n"
                    + "LEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid=c.oid AND d.objsubid=0\n"
                    + "WHERE c.relnamespace=? AND c.relkind not in ('i','c')")) {
                p.setLong(1, salesOid);
                try (ResultSet r = p.executeQuery()) {
                    while (r.next()) {
                        navigator.add(r.getString("relname") + ":" + r.getString("relkind"));
                    }
                }
            }
            check(navigator.equals(List.of("items:r")), "DBeaver's tables " + navigator);
            List<String> attributes = new ArrayList<>();
            try (PreparedStatement p = c.prepareStatement(
                    "SELECT c.relname,a.*,pg_catalog.pg_get_expr(ad.adbin, ad.adrelid, true) as def_value,dsc.description"
                    + "\nFROM pg_catalog.pg_attribute a\nINNER JOIN pg_catalog.pg_class c ON (a.attrelid=c.oid)"
                    + "\nLEFT OUTER JOIN pg_catalog.pg_attrdef ad ON (a.attrelid=ad.adrelid AND a.attnum = ad.adnum)"
                    + "\nLEFT OUTER JOIN pg_catalog.pg_description dsc ON (c.oid=dsc.objoid AND a.attnum = dsc.objsubid)"
                    + "\nWHERE NOT a.attisdropped AND c.relnamespace=? AND c.relkind not in ('i','c')  ORDER BY a.attnum")) {
                p.setLong(1, salesOid);
                try (ResultSet r = p.executeQuery()) {
                    while (r.next()) {
                        attributes.add(r.getString("attname") + ":" + r.getShort("attnum"));
                    }
                }
            }
            check(attributes.subList(0, 2).equals(List.of("id:1", "qty:2")) && attributes.size() == 7,
                    "DBeaver's columns " + attributes);
            List<String> constraints = new ArrayList<>();
            try (PreparedStatement p = c.prepareStatement(
                    "SELECT c.oid,c.*,t.relname as tabrelname,rt.relnamespace as refnamespace"
                    + "\nFROM pg_catalog.pg_constraint c\nINNER JOIN pg_catalog.pg_class t ON t.oid=c.conrelid"
                    + "\nLEFT OUTER JOIN pg_catalog.pg_class rt ON rt.oid=c.confrelid\nWHERE t.relnamespace=?"
                    + "\nORDER BY c.oid")) {
                p.setLong(1, salesOid);
                try (ResultSet r = p.executeQuery()) {
                    while (r.next()) {
                        List<String> numbers = new ArrayList<>();
                        for (Object n : (Object[]) r.getArray("conkey").getArray()) {
                            numbers.add(String.valueOf(((Number) n).intValue()));
                        }
                        constraints.add(r.getString("tabrelname") + ":" + r.getString("conname") + ":"
                                + r.getString("contype") + ":" + numbers);
                    }
                }
            }
            check(constraints.equals(List.of("items:items_pkey:p:[1]")), "DBeaver's keys " + constraints);
            try (PreparedStatement p = c.prepareStatement(
                    "SELECT i.*,i.indkey as keys,c.relname,c.relnamespace,c.relam,tc.relname as tabrelname,"
                    + "dsc.description,pg_catalog.pg_get_expr(i.indexprs, i.indrelid, true) as expr"
                    + "\nFROM pg_catalog.pg_index i\nINNER JOIN pg_catalog.pg_class c ON c.oid=i.indexrelid"
                    + "\nINNER JOIN pg_catalog.pg_class tc ON tc.oid=i.indrelid"
                    + "\nLEFT OUTER JOIN pg_catalog.pg_description dsc ON i.indexrelid=dsc.objoid"
                    + "\nWHERE  c.relnamespace=? ORDER BY c.relname")) {
                p.setLong(1, salesOid);
                try (ResultSet r = p.executeQuery()) {
                    check(!r.next(), "DBeaver's indexes");
                }
            }
            check(md.getDatabaseProductVersion().startsWith("16"), "version " + md.getDatabaseProductVersion());
            // A query timeout: the driver sends a cancel request when it passes, and the
            // statement (a cross join of 8^12 rows, minutes of work) stops with 57014.
            try (Statement s = c.createStatement()) {
                s.setQueryTimeout(1);
                s.executeQuery("SELECT count(*) FROM sales.items a, sales.items b, sales.items c, "
                        + "sales.items d, sales.items e, sales.items f, sales.items g, sales.items h, "
                        + "sales.items i, sales.items j, sales.items k, sales.items l");
                check(false, "the cross join finished within its timeout");
            } catch (SQLException e) {
                check("57014".equals(e.getSQLState()), "timeout: " + e.getSQLState() + " " + e.getMessage());
            }
            try (Statement s = c.createStatement(); ResultSet r = s.executeQuery("SELECT count(*) FROM sales.items")) {
                check(r.next() && r.getLong(1) == 8, "count after a cancel");
            }
            // Errors carry SQLSTATE codes.
            try (Statement s = c.createStatement()) {
                s.executeQuery("SELECT * FROM sales.missing");
                check(false, "a missing table answered");
            } catch (SQLException e) {
                check("42P01".equals(e.getSQLState()), "missing table: " + e.getSQLState() + " " + e.getMessage());
            }
        }
        // A key for one namespace: only its tables, in metadata and in SQL.
        try (Connection c = connect(host, port, salesReader)) {
            List<String> seen = tables(c.getMetaData());
            check(seen.equals(List.of("sales.items")), "sales reader sees " + seen);
            try (Statement s = c.createStatement()) {
                s.executeQuery("SELECT * FROM hr.staff");
                check(false, "another namespace answered");
            } catch (SQLException e) {
                check("42P01".equals(e.getSQLState()), "other namespace: " + e.getSQLState());
            }
        }
        try {
            connect(host, port, "not-a-key").close();
            check(false, "a wrong key connected");
        } catch (SQLException e) {
            check("28P01".equals(e.getSQLState()), "wrong key: " + e.getSQLState());
        }
        System.out.println("postgres jdbc: ok");
    }
}
