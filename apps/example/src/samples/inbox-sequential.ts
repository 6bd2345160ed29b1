import { createInbox, type HandlerContext, type Handlers } from '@ferry/inbox';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';

// Ledger entries: every version must be applied, in order; a missing one is waited for, then parked.
type LedgerEvents = { Credited: { account: string; cents: number }; Debited: { account: string; cents: number } };

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
const nc = await connect({ servers: process.env.NATS_URL });
const apply =
  (sign: 1 | -1) =>
  async (event: { payload: { account: string; cents: number } }, { tx }: HandlerContext) => {
    await tx.query('UPDATE balances SET cents = cents + $2 WHERE account = $1', [event.payload.account, sign * event.payload.cents]);
  };
const handlers = { Credited: apply(1), Debited: apply(-1) } satisfies Handlers<LedgerEvents>;
const inbox = createInbox<LedgerEvents>({
  pool,
  nc,
  stream: 'LEDGER',
  consumer: 'balances',
  mode: 'sequential',
  gapTimeoutMs: 60_000, // how long version n+2 waits for n+1 before it parks
  handlers,
});
await inbox.start();
