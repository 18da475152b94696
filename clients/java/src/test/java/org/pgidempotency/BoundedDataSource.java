package org.pgidempotency;

import java.io.PrintWriter;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.SQLFeatureNotSupportedException;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.logging.Logger;
import javax.sql.DataSource;

/**
 * A pool's limit without a pool: at most size connections open at once;
 * getConnection waits up to 10 seconds for one to close, then fails (as
 * HikariCP's connectionTimeout does), and reports its size as HikariCP
 * does (getMaximumPoolSize), for the filter's bound on waiting claims.
 */
public final class BoundedDataSource implements DataSource {
    private final DataSource inner;
    private final Semaphore slots;
    private final int size;

    public BoundedDataSource(DataSource inner, int size) {
        this.inner = inner;
        this.slots = new Semaphore(size);
        this.size = size;
    }

    public int getMaximumPoolSize() {
        return size;
    }

    @Override
    public Connection getConnection() throws SQLException {
        try {
            if (!slots.tryAcquire(10, TimeUnit.SECONDS)) {
                throw new SQLException("pool exhausted: no connection within 10 s", "08001");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new SQLException(e);
        }
        Connection c;
        try {
            c = inner.getConnection();
        } catch (SQLException | RuntimeException e) {
            slots.release();
            throw e;
        }
        boolean[] closed = new boolean[1];
        return (Connection) Proxy.newProxyInstance(Connection.class.getClassLoader(), new Class<?>[] {Connection.class},
            (proxy, method, args) -> {
                if (method.getName().equals("close")) {
                    synchronized (closed) {
                        if (!closed[0]) {
                            closed[0] = true;
                            slots.release();
                        }
                    }
                }
                try {
                    return method.invoke(c, args);
                } catch (InvocationTargetException e) {
                    throw e.getCause();
                }
            });
    }

    @Override
    public Connection getConnection(String user, String password) {
        throw new UnsupportedOperationException();
    }

    @Override public PrintWriter getLogWriter() { return null; }
    @Override public void setLogWriter(PrintWriter out) { }
    @Override public void setLoginTimeout(int seconds) { }
    @Override public int getLoginTimeout() { return 0; }
    @Override public Logger getParentLogger() throws SQLFeatureNotSupportedException { throw new SQLFeatureNotSupportedException(); }
    @Override public <T> T unwrap(Class<T> iface) throws SQLException { return inner.unwrap(iface); }
    @Override public boolean isWrapperFor(Class<?> iface) throws SQLException { return inner.isWrapperFor(iface); }
}
