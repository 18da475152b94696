package org.pgidempotency;

import java.sql.SQLException;

/**
 * An error of the extension, by its SQLSTATE (doc/reference.md, "Errors").
 * {@link #of(SQLException)} picks the subclass from the SQLSTATE alone, never
 * from the message; the SQLException is the cause.
 */
public class IdempotencyException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final String sqlState;

    public IdempotencyException(String message, String sqlState, Throwable cause) {
        super(message, cause);
        this.sqlState = sqlState;
    }

    /** The SQLSTATE, or null for the package's own errors. */
    public String sqlState() {
        return sqlState;
    }

    /** The exception for e's SQLSTATE. */
    public static IdempotencyException of(SQLException e) {
        String state = e.getSQLState();
        String m = e.getMessage();
        if (state == null) {
            return new IdempotencyException(m, null, e);
        }
        return switch (state) {
            case "55000" -> new LeaseLostException(m, e);
            case "22023" -> new InvalidParameterException(m, e);
            case "54000" -> new ResponseTooLargeException(m, e);
            case "23514" -> new CheckViolationException(m, e);
            case "40001" -> new SerializationFailureException(m, e);
            case "42501" -> new InsufficientPrivilegeException(m, e);
            case "25006" -> new ReadOnlyTransactionException(m, e);
            case "0A000" -> new FeatureNotSupportedException(m, e);
            case "23505" -> new UniqueViolationException(m, e);
            case "21000" -> new CardinalityViolationException(m, e);
            default -> state.startsWith("08") ? new ConnectionException(m, e)
                                              : new IdempotencyException(m, state, e);
        };
    }

    /** 55000: the fence or lease token no longer holds the key or event (another holder has it). */
    public static class LeaseLostException extends IdempotencyException {
        private static final long serialVersionUID = 1L;
        public LeaseLostException(String m, Throwable c) { super(m, "55000", c); }
    }

    /** 22023: an argument the extension refuses (an empty or too long key, a ttl shorter than the lease, ...). */
    public static class InvalidParameterException extends IdempotencyException {
        private static final long serialVersionUID = 1L;
        public InvalidParameterException(String m, Throwable c) { super(m, "22023", c); }
    }

    /** 54000: a response body over idempotency.max_response_bytes. */
    public static class ResponseTooLargeException extends IdempotencyException {
        private static final long serialVersionUID = 1L;
        public ResponseTooLargeException(String m, Throwable c) { super(m, "54000", c); }
    }

    /** 23514: an UPDATE that breaks an enforced state machine. */
    public static class CheckViolationException extends IdempotencyException {
        private static final long serialVersionUID = 1L;
        public CheckViolationException(String m, Throwable c) { super(m, "23514", c); }
    }

    /** 40001: a concurrent update under REPEATABLE READ or SERIALIZABLE; retry the transaction. */
    public static class SerializationFailureException extends IdempotencyException {
        private static final long serialVersionUID = 1L;
        public SerializationFailureException(String m, Throwable c) { super(m, "40001", c); }
    }

    /** 42501: missing privileges, another role's key or event, a scope outside the role's. */
    public static class InsufficientPrivilegeException extends IdempotencyException {
        private static final long serialVersionUID = 1L;
        public InsufficientPrivilegeException(String m, Throwable c) { super(m, "42501", c); }
    }

    /** 25006: a write in a read-only transaction or on a hot standby. */
    public static class ReadOnlyTransactionException extends IdempotencyException {
        private static final long serialVersionUID = 1L;
        public ReadOnlyTransactionException(String m, Throwable c) { super(m, "25006", c); }
    }

    /** 0A000: claim_events or a waiting claim outside READ COMMITTED, and the like. */
    public static class FeatureNotSupportedException extends IdempotencyException {
        private static final long serialVersionUID = 1L;
        public FeatureNotSupportedException(String m, Throwable c) { super(m, "0A000", c); }
    }

    /** 23505: a key written around the functions, or a key_hash collision. */
    public static class UniqueViolationException extends IdempotencyException {
        private static final long serialVersionUID = 1L;
        public UniqueViolationException(String m, Throwable c) { super(m, "23505", c); }
    }

    /** 21000: transition's key matches several rows. */
    public static class CardinalityViolationException extends IdempotencyException {
        private static final long serialVersionUID = 1L;
        public CardinalityViolationException(String m, Throwable c) { super(m, "21000", c); }
    }

    /** Class 08: the connection failed. */
    public static class ConnectionException extends IdempotencyException {
        private static final long serialVersionUID = 1L;
        public ConnectionException(String m, SQLException c) { super(m, c.getSQLState(), c); }
    }

    /** The database's extension is missing or older than this package needs. */
    public static class ExtensionVersionException extends IdempotencyException {
        private static final long serialVersionUID = 1L;
        public ExtensionVersionException(String m) { super(m, null, null); }
    }
}
