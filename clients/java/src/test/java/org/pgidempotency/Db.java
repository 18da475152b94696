package org.pgidempotency;

import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import javax.sql.DataSource;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * The test database, from the environment as libpq reads it (PGHOST,
 * PGPORT, PGUSER, PGDATABASE; a PGHOST that is a directory is reached
 * through its Unix socket) and IDEM_EDITION (c or portable). PGIDEM_JDBC
 * adds connection properties ("name=value&..."): the README's line for a
 * transaction pooler, prepareThreshold=0 (test/pooler/java.sh), where
 * PGIDEM_POOLER says that PG* is a transaction pooler and
 * PGIDEM_LISTEN_HOST and PGIDEM_LISTEN_PORT are the direct address the
 * relays LISTEN on.
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
        return dataSource(database, env("PGHOST", "/var/run/postgresql"), Integer.parseInt(env("PGPORT", "5432")));
    }

    /** PG* is a transaction pooler. */
    public static boolean behindPooler() {
        return !env("PGIDEM_POOLER", "").isEmpty();
    }

    /** The relays' LISTEN connection: the direct address when PG* is a pooler, else null (the relay's own). */
    public static PGSimpleDataSource listenDataSource() {
        String host = env("PGIDEM_LISTEN_HOST", "");
        return host.isEmpty() ? null
            : dataSource(env("PGDATABASE", "postgres"), host, Integer.parseInt(env("PGIDEM_LISTEN_PORT", "5432")));
    }

    private static PGSimpleDataSource dataSource(String database, String host, int port) {
        PGSimpleDataSource ds = new PGSimpleDataSource();
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
        for (String property : env("PGIDEM_JDBC", "").split("&")) {
            String[] kv = property.split("=", 2);
            if (kv.length == 2) {
                try {
                    ds.setProperty(kv[0], kv[1]);
                } catch (SQLException e) {
                    throw new IllegalArgumentException("PGIDEM_JDBC: " + property, e);
                }
            }
        }
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
