/*
 * nestjs.ts: IdempotencyInterceptor, a NestJS interceptor (Express
 * platform) with the behaviour of http.ts. The controller's method runs as
 * the handler; its HandlerContext is req.idempotency (ctx.db in transaction
 * mode). Answers other than the controller's own (replays, refusals, the
 * stored answer of a failure) are written to the response here, with the
 * status, headers and body of http.ts; then an HttpException ends Nest's
 * handling (its exception filter only ends a response already sent).
 * @nestjs/common and rxjs are loaded when the interceptor is created: they
 * are the application's.
 */
import { createIdempotency, IdempotencyOptions, HandlerContext } from './http';

/* The parts of Nest's ExecutionContext and CallHandler used here. */
export interface NestExecutionContext {
  switchToHttp(): { getRequest(): any; getResponse(): any };
  getHandler(): Function;
}
export interface NestCallHandler {
  handle(): any;
}

export interface NestRequestLike {
  method: string;
  baseUrl?: string;
  path: string;
  body?: unknown;
  headers: Record<string, string | string[] | undefined>;
  idempotency?: HandlerContext;
}

export class IdempotencyInterceptor {
  private readonly engine: ReturnType<typeof createIdempotency<NestRequestLike>>;
  private readonly nest: any;
  private readonly rxjs: any;

  constructor(opts: IdempotencyOptions<NestRequestLike>) {
    this.engine = createIdempotency<NestRequestLike>(opts);
    /* eslint-disable @typescript-eslint/no-var-requires */
    this.nest = require('@nestjs/common');
    this.rxjs = require('rxjs');
  }

  async intercept(context: NestExecutionContext, next: NestCallHandler): Promise<unknown> {
    const http = context.switchToHttp();
    const req: NestRequestLike = http.getRequest();
    const res = http.getResponse();
    const meta = (Reflect as any).getMetadata?.('__httpCode__', context.getHandler());
    const status: number = meta ?? (req.method === 'POST' ? 201 : 200);
    let ran = false;
    const h = req.headers[this.engine.header];
    const answer = await this.engine.handle({
      req, key: Array.isArray(h) ? h[0] : h, method: req.method,
      path: (req.baseUrl ?? '') + req.path, body: req.body,
    }, async (r, ctx) => {
      r.idempotency = ctx;
      const body = await this.rxjs.lastValueFrom(next.handle(), { defaultValue: null });
      ran = true;
      return { status, body };
    });
    for (const [k, v] of Object.entries(answer.headers)) res.setHeader(k, v);
    if (ran && answer.status === status) return this.rxjs.of(answer.body);
    res.statusCode = answer.status;
    // Express's send, as for the controller's own answers: a replay then
    // carries the Content-Type (charset included) the first answer had
    if (typeof res.send === 'function') res.send(answer.text);
    else res.end(answer.text);
    throw new this.nest.HttpException('answered by IdempotencyInterceptor', answer.status);
  }
}
