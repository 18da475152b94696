/*
 * fastify.ts: idempotentFastify(opts)(handler): a Fastify route handler with
 * the behaviour of http.ts.
 */
import { createIdempotency, Handler, IdempotencyOptions } from './http';

/** The parts of Fastify's request and reply this binding uses. */
export interface FastifyRequestLike {
  method: string;
  url: string;
  body?: unknown;
  headers: Record<string, string | string[] | undefined>;
}
export interface FastifyReplyLike {
  code(status: number): FastifyReplyLike;
  header(name: string, value: string): FastifyReplyLike;
  send(body: unknown): unknown;
}

export function idempotentFastify<Req extends FastifyRequestLike = FastifyRequestLike>(opts: IdempotencyOptions<Req>) {
  const engine = createIdempotency<Req>(opts);
  return (handler: Handler<Req>) =>
    async function idempotencyRoute(request: Req, reply: FastifyReplyLike): Promise<unknown> {
      const h = request.headers[engine.header];
      const answer = await engine.handle({
        req: request, key: Array.isArray(h) ? h[0] : h, method: request.method,
        path: request.url.split('?')[0], body: request.body,
      }, handler);
      reply.code(answer.status);
      for (const [k, v] of Object.entries(answer.headers)) reply.header(k, v);
      return reply.send(answer.text);
    };
}
