/*
 * index.ts: the package's public API (see README.md).
 */
export * from './errors';
export * from './client';
export { withTransaction } from './tx';
export { OutboxRelay, RelayOptions, relayPollingLine } from './relay';
export { createIdempotency, problem, keyProblem, KEY_MAX_CHARS, HttpAnswer, HandlerResult, HandlerContext, RequestInfo, IdempotencyOptions, Handler } from './http';
export { idempotentExpress, ExpressRequest, ExpressResponse } from './express';
export { idempotentFastify, FastifyRequestLike, FastifyReplyLike } from './fastify';
export { PgIdempotencyStorage, NodeIdempotencyStorageOptions } from './node-idempotency';
export { IdempotencyInterceptor, NestExecutionContext, NestCallHandler, NestRequestLike } from './nestjs';
