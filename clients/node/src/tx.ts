/*
 * tx.ts: withTransaction(pool, fn): runs fn(client) in one transaction on a
 * client of the pool; COMMIT when fn resolves, ROLLBACK when it throws.
 */
import type { Pool, PoolClient } from 'pg';

export async function withTransaction<T>(pool: Pool, fn: (client: PoolClient) => Promise<T>,
  begin = 'BEGIN'): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query(begin);
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (e) {
    await client.query('ROLLBACK').catch(() => {});
    throw e;
  } finally {
    client.release();
  }
}
