/*
 * errors.ts: the errors this package throws of its own, and the SQLSTATEs of
 * doc/reference.md ("Errors") that callers test for.
 */

/** SQLSTATEs the extension raises (doc/reference.md, "Errors"). */
export const SqlState = {
  invalidParameterValue: '22023',
  programLimitExceeded: '54000',
  leaseLost: '55000',
  checkViolation: '23514',
  cardinalityViolation: '21000',
  uniqueViolation: '23505',
  readOnlyTransaction: '25006',
  featureNotSupported: '0A000',
  serializationFailure: '40001',
  insufficientPrivilege: '42501',
  undefinedTable: '42P01',
} as const;

/** The SQLSTATE of an error from pg, or undefined. */
export function sqlState(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** true when err is the extension's "idempotency lease lost" (55000). */
export function isLeaseLost(err: unknown): boolean {
  return sqlState(err) === SqlState.leaseLost;
}

/** The database's extension is missing or older than this package supports. */
export class ExtensionVersionError extends Error {
  readonly found: string | null;
  readonly required: string;
  constructor(found: string | null, required: string) {
    super(found === null
      ? `the idempotency extension is not installed in this database (CREATE EXTENSION idempotency, or the portable edition's script); pg-idempotency needs ${required} or later`
      : `the idempotency extension in this database is version ${found}; pg-idempotency needs ${required} or later (ALTER EXTENSION idempotency UPDATE)`);
    this.name = 'ExtensionVersionError';
    this.found = found;
    this.required = required;
  }
}

/**
 * The key's answer is gone (extension 1.6: it was kept for response_ttl
 * only): the request ran, and does not run again while the key lives. The
 * storage adapters throw it where their library has no such outcome; its
 * status (410 Gone) is what Express's and Fastify's error handlers send.
 */
export class AnswerGoneError extends Error {
  readonly status = 410;
  readonly statusCode = 410;
  readonly key: string;
  /** The stored outcome's response code. */
  readonly responseCode: number | null;
  constructor(key: string, responseCode: number | null) {
    super(`the answer to idempotency key "${key}" is gone: it is no longer kept, and the request does not run again`);
    this.name = 'AnswerGoneError';
    this.key = key;
    this.responseCode = responseCode;
  }
}

/** An error a handler throws to answer with an HTTP status and JSON body. */
export class HttpError extends Error {
  readonly status: number;
  readonly body: unknown;
  constructor(status: number, message: string, body?: unknown) {
    super(message);
    this.name = 'HttpError';
    this.status = status;
    this.body = body;
  }
}
