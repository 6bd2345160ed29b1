import type { IncomingMessage } from 'node:http';
import type pg from 'pg';
import type { EventFilter } from '../actions/event-filter.js';
import type { FailedAction } from '../actions/failed.js';
import type { Html } from './html.js';
import type { ConsoleSetup } from './options.js';
import type { EventRow } from './queries.js';

// What every console page module shares with the server: the request as a page sees it, the error
// that becomes an HTTP status, the helpers that lay a page out and guard an action (layout.ts), and
// the context a page module is made with. A page module (overview.ts, events.ts, …) is named by its
// URL and returns its routes.

/** An error a page throws to answer with this status and message. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** A request as a page handler sees it. */
export interface Req {
  req: IncomingMessage;
  url: URL;
  who: string | null;
  csrf: string;
  /** The answer's status when not 200 (a refused confirmation that shows the new preview: 409). */
  status?: number;
}

/** The helpers a page module lays its page out with (made in layout.ts). */
export interface PageKit {
  /** The whole page: header, navigation (`here` marked), the actions-off line, the title and the body. */
  layout(r: Req, title: string, here: string, body: Html): string;
  /** The form field carrying the request's CSRF token. */
  csrfField(r: Req): Html;
  /** Whether this request may act: not read-only, and logged in. */
  canAct(r: Req): boolean;
  /** Refuses (HttpError 403) an action this request may not take; returns who acts. */
  checkAction(r: Req, form: URLSearchParams): string;
  eventLink(id: string): Html;
  keyLink(key: string): Html;
  /** A dlq retry or discard button (to its preview) for the rows `fields` select; nothing when the request may not act. */
  failedForm(r: Req, action: FailedAction, fields: Record<string, string | undefined>, label: string): Html | string;
  /** A replay button (to its preview); nothing when the request may not act. */
  replayForm(r: Req, fields: Record<string, string | undefined>, label: string): Html | string;
  eventsTable(rows: EventRow[]): Html;
  /** A filter as the form fields that carry it. */
  filterFields(f: EventFilter): Record<string, string | undefined>;
}

/** What a page module is made with. */
export interface ConsoleContext {
  o: ConsoleSetup;
  /** The schema, quoted for SQL. */
  s: string;
  /** The pool with the long statement timeout: the shared reads, and the actions' previews and changes. */
  longPool: pg.Pool;
  kit: PageKit;
  /** How many times its own duration a shared read waits before it is read again (`pace` option). */
  pace: number;
  /** When a shared read that took `tookMs` is read again: the refresh interval, or `pace` times as long. */
  paced(tookMs: number): number;
  /** An action changed events: every shared read is read afresh on its next view. */
  changed(): void;
  /** Registers what `changed` drops. */
  onChanged(drop: () => void): void;
}

export type Page = (r: Req) => Promise<string>;
export type Action = (r: Req, form: URLSearchParams) => Promise<string>;

/** A page module's routes, by path. */
export interface PageModule {
  get?: Record<string, Page>;
  post?: Record<string, Action>;
}
