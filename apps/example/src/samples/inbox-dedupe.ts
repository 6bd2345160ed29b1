import { createInbox, type Handlers } from '@ferry/inbox';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';

// Events from a producer without per-key versions: drop a repeated event id within the retention window.
type MailEvents = { WelcomeRequested: { userId: string; email: string } };

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
const nc = await connect({ servers: process.env.NATS_URL });
const handlers = {
  WelcomeRequested: async (event, { boss }) => {
    await boss.send('send-welcome-email', { to: event.payload.email }); // enqueued iff the event id is new
  },
} satisfies Handlers<MailEvents>;
const inbox = createInbox<MailEvents>({
  pool,
  nc,
  stream: 'USERS',
  consumer: 'mailer',
  mode: 'dedupe',
  dedupeRetentionMs: 14 * 24 * 3_600_000, // longer than any replay or redelivery you expect
  handlers,
});
await inbox.start();
