/*
 * express.ts: idempotentExpress(opts)(handler): an Express route handler
 * with the behaviour of http.ts. The body must be parsed (express.json())
 * before it, so that the fingerprint sees it.
 */
import { createIdempotency, Handler, HttpAnswer, IdempotencyOptions } from './http';

/** The parts of Express's req and res this binding uses. */
export interface ExpressRequest {
  method: string;
  baseUrl?: string;
  path: string;
  body?: unknown;
  get(name: string): string | undefined;
}
export interface ExpressResponse {
  status(code: number): ExpressResponse;
  set(name: string, value: string): ExpressResponse;
  send(body: unknown): unknown;
}

export function send(res: ExpressResponse, a: HttpAnswer): void {
  res.status(a.status);
  for (const [k, v] of Object.entries(a.headers)) res.set(k, v);
  res.send(a.text);
}

export function idempotentExpress<Req extends ExpressRequest = ExpressRequest>(opts: IdempotencyOptions<Req>) {
  const engine = createIdempotency<Req>(opts);
  return (handler: Handler<Req>) =>
    async function idempotencyRoute(req: Req, res: ExpressResponse, next: (err?: unknown) => void): Promise<void> {
      try {
        const answer = await engine.handle({
          req, key: req.get(engine.header), method: req.method,
          path: (req.baseUrl ?? '') + req.path, body: req.body,
        }, handler);
        send(res, answer);
      } catch (e) {
        next(e);
      }
    };
}
