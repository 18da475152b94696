package org.pgidempotency;

import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import javax.sql.DataSource;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * The test database, from the environment as libpq reads it (PGHOST,
 * PGPORT, PGUSER, PGDATABASE; a PGHOST that is a directory is reached
 * through its Unix socket) and IDEM_EDITION (c or portable).
 */
public final class Db {
    private Db() {
    }

    public static String env(String name, String dflt) {
        String v = System.getenv(name);
        return v == null || v.isEmpty() ? dflt : v;
    }

    /** c or portable: the edition installed in the test database. */
    public static String edition() {
        return env("IDEM_EDITION", "c");
    }

    public static PGSimpleDataSource dataSource(String database) {
        PGSimpleDataSource ds = new PGSimpleDataSource();
        String host = env("PGHOST", "/var/run/postgresql");
        int port = Integer.parseInt(env("PGPORT", "5432"));
        if (host.startsWith("/")) {
            ds.setServerNames(new String[] {"localhost"});
            ds.setSocketFactory(UnixSocketFactory.class.getName());
            ds.setSocketFactoryArg(UnixSocketFactory.socketFile(host, port));
        } else {
            ds.setServerNames(new String[] {host});
        }
        ds.setPortNumbers(new int[] {port});
        ds.setDatabaseName(database);
        ds.setUser(env("PGUSER", System.getProperty("user.name")));
        return ds;
    }

    public static PGSimpleDataSource dataSource() {
        return dataSource(env("PGDATABASE", "postgres"));
    }

    /** Runs statements in autocommit on a new connection. */
    public static void exec(DataSource ds, String... sql) {
        try (Connection c = ds.getConnection(); Statement s = c.createStatement()) {
            for (String q : sql) {
                s.execute(q);
            }
        } catch (SQLException e) {
            throw new RuntimeException(e);
        }
    }

    /** The first column of the first row. */
    public static Object value(DataSource ds, String sql) {
        try (Connection c = ds.getConnection(); Statement s = c.createStatement();
             var rs = s.executeQuery(sql)) {
            return rs.next() ? rs.getObject(1) : null;
        } catch (SQLException e) {
            throw new RuntimeException(e);
        }
    }

    /** A name unique to this run, for keys. */
    public static String unique(String prefix) {
        return prefix + "-" + java.util.UUID.randomUUID();
    }
}
