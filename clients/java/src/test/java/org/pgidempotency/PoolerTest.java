package org.pgidempotency;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.time.Duration;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;
import org.postgresql.PGConnection;
import org.postgresql.PGStatement;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * Behind a transaction pooler: the package's statements, and the BEGIN
 * and COMMIT of its own transactions, are unnamed whatever the
 * connection's prepareThreshold (pgjdbc names a statement from its
 * prepareThreshold-th run and COMMIT at once; a named statement lives in
 * one server session, which a pooler lends to other clients).
 */
class PoolerTest {
    /** Named prepared statements of c's server session, read with an unnamed statement. */
    static long named(Connection c) throws Exception {
        try (PreparedStatement s = c.prepareStatement("SELECT count(*) FROM pg_catalog.pg_prepared_statements")) {
            s.unwrap(PGStatement.class).setPrepareThreshold(0);
            try (ResultSet rs = s.executeQuery()) {
                rs.next();
                return rs.getLong(1);
            }
        }
    }

    @Test
    void theStatementsAndTransactionsOfThePackageAreUnnamed() throws Exception {
        PGSimpleDataSource ds = Db.dataSource();
        ds.setPrepareThreshold(1);      // the driver would name every statement at once
        try (Connection c = ds.getConnection()) {
            // one connection throughout, given to calls and lent to the package's transactions
            DataSource one = (DataSource) Proxy.newProxyInstance(DataSource.class.getClassLoader(),
                new Class<?>[] {DataSource.class}, (proxy, method, args) -> {
                    if (method.getName().equals("getConnection")) {
                        return Proxy.newProxyInstance(Connection.class.getClassLoader(), new Class<?>[] {Connection.class},
                            (p, m, a) -> {
                                if (m.getName().equals("close")) {
                                    return null;
                                }
                                try {
                                    return m.invoke(c, a);
                                } catch (InvocationTargetException e) {
                                    throw e.getCause();
                                }
                            });
                    }
                    throw new UnsupportedOperationException(method.getName());
                });
            Idempotency idem = new Idempotency(one);
            for (int i = 0; i < 3; i++) {
                String key = Db.unique("unnamed");
                ClaimResult claim = idem.claim(c, key, null, "", null, null);
                idem.lookup(c, key, "");
                idem.inTransaction(tx -> {
                    idem.complete(tx, key, claim.fence(), "ok", 200, "", Duration.ofHours(1), null);
                    return null;
                });
                assertEquals(ClaimOutcome.REPLAY, idem.inTransaction(tx -> idem.claim(tx, key, null, "", null, null)).outcome());
            }
            assertEquals(1, c.unwrap(PGConnection.class).getPrepareThreshold(), "the connection's threshold is restored");
            if (!Db.behindPooler()) {      // through a pooler each statement may see another server session
                assertEquals(0L, named(c));
            }
        }
    }
}
