import type { IncomingMessage } from 'node:http';
import type { Html } from './html.js';

// What every console page module shares with the server: the request as a page sees it, the error
// that becomes an HTTP status, and the helpers that lay a page out and guard an action.

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

/** The server's helpers a page module uses. */
export interface PageKit {
  /** The whole page: header, navigation (`here` marked), the actions-off line, the title and the body. */
  layout(r: Req, title: string, here: string, body: Html): string;
  /** The form field carrying the request's CSRF token. */
  csrfField(r: Req): Html;
  /** Whether this request may act: not read-only, and logged in. */
  canAct(r: Req): boolean;
  /** Refuses (HttpError 403) an action this request may not take; returns who acts. */
  checkAction(r: Req, form: URLSearchParams): string;
}
