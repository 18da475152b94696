package org.pgidempotency;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.Socket;
import java.net.SocketAddress;
import java.net.SocketTimeoutException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;
import javax.net.SocketFactory;

/**
 * A pgjdbc socketFactory for PostgreSQL's Unix-domain socket (Java 16+),
 * for servers that listen on no TCP port (no junixsocket needed):
 * {@code jdbc:postgresql://localhost/db?socketFactory=org.pgidempotency.UnixSocketFactory&socketFactoryArg=/var/run/postgresql/.s.PGSQL.5432}.
 * The host and port of the URL are ignored; socketFactoryArg is the socket
 * file. Read timeouts (pgjdbc's getNotifications(timeout), socketTimeout)
 * are honoured.
 */
public final class UnixSocketFactory extends SocketFactory {
    private final String path;

    public UnixSocketFactory(String path) {
        this.path = path;
    }

    /** The socket file of a server: DIR/.s.PGSQL.PORT. */
    public static String socketFile(String dir, int port) {
        return dir + "/.s.PGSQL." + port;
    }

    @Override
    public Socket createSocket() {
        return new UnixSocket(path);
    }

    @Override
    public Socket createSocket(String host, int port) throws IOException {
        Socket s = createSocket();
        s.connect(null);
        return s;
    }

    @Override
    public Socket createSocket(String host, int port, InetAddress localHost, int localPort) throws IOException {
        return createSocket(host, port);
    }

    @Override
    public Socket createSocket(InetAddress host, int port) throws IOException {
        return createSocket((String) null, port);
    }

    @Override
    public Socket createSocket(InetAddress address, int port, InetAddress localAddress, int localPort)
            throws IOException {
        return createSocket((String) null, port);
    }

    private static final class UnixSocket extends Socket {
        private final String path;
        private SocketChannel channel;
        private Selector readable;
        private Selector writable;
        private volatile int timeout;
        private boolean closed;

        UnixSocket(String path) {
            this.path = path;
        }

        @Override
        public void connect(SocketAddress endpoint) throws IOException {
            connect(endpoint, 0);
        }

        @Override
        public void connect(SocketAddress endpoint, int connectTimeout) throws IOException {
            channel = SocketChannel.open(StandardProtocolFamily.UNIX);
            channel.connect(UnixDomainSocketAddress.of(path));
            channel.configureBlocking(false);
            readable = Selector.open();
            writable = Selector.open();
            channel.register(readable, SelectionKey.OP_READ);
            channel.register(writable, SelectionKey.OP_WRITE);
        }

        @Override public boolean isConnected() { return channel != null && channel.isConnected(); }
        @Override public boolean isClosed() { return closed; }
        @Override public void setSoTimeout(int t) { timeout = t; }
        @Override public int getSoTimeout() { return timeout; }
        @Override public void setTcpNoDelay(boolean on) { }
        @Override public void setKeepAlive(boolean on) { }
        @Override public void setReceiveBufferSize(int size) { }
        @Override public void setSendBufferSize(int size) { }
        @Override public void shutdownInput() { }
        @Override public void shutdownOutput() { }

        @Override
        public synchronized void close() throws IOException {
            if (!closed) {
                closed = true;
                if (channel != null) {
                    readable.close();
                    writable.close();
                    channel.close();
                }
            }
        }

        @Override
        public InputStream getInputStream() {
            return new InputStream() {
                @Override
                public int read() throws IOException {
                    byte[] one = new byte[1];
                    int n = read(one, 0, 1);
                    return n < 0 ? -1 : one[0] & 0xff;
                }

                @Override
                public int read(byte[] b, int off, int len) throws IOException {
                    if (len == 0) {
                        return 0;
                    }
                    ByteBuffer buf = ByteBuffer.wrap(b, off, len);
                    while (true) {
                        int n = channel.read(buf);
                        if (n != 0) {
                            return n;
                        }
                        int t = timeout;
                        if (readable.select(t) == 0 && t > 0) {
                            throw new SocketTimeoutException("Read timed out");
                        }
                        readable.selectedKeys().clear();
                    }
                }

                @Override
                public int available() {
                    return 0;
                }
            };
        }

        @Override
        public OutputStream getOutputStream() {
            return new OutputStream() {
                @Override
                public void write(int b) throws IOException {
                    write(new byte[] {(byte) b}, 0, 1);
                }

                @Override
                public void write(byte[] b, int off, int len) throws IOException {
                    ByteBuffer buf = ByteBuffer.wrap(b, off, len);
                    while (buf.hasRemaining()) {
                        if (channel.write(buf) == 0) {
                            writable.select();
                            writable.selectedKeys().clear();
                        }
                    }
                }
            };
        }
    }
}
