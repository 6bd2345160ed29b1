import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { html } from './html.js';
import { SESSION_MS } from './limits.js';
import { checkOperatorName, OPERATOR_NAME_MAX, tokenActor } from './operator-name.js';
import type { ConsoleSetup } from './options.js';
import { HttpError, type PageKit, type Req } from './page-kit.js';

// Who is asking: the bearer token, basic auth, or a login session (a cookie); the CSRF token of each
// principal; the check every action passes; and /login, its form and its POST.

const digest = (s: string) => createHash('sha256').update(s).digest();
const sameSecret = (a: string, b: string) => timingSafeEqual(digest(a), digest(b));

export function consoleAuth(o: ConsoleSetup) {
  const secret = randomBytes(32);
  const sessions = new Map<string, { who: string; until: number }>();
  const credentials = o.token !== undefined || o.basic !== undefined;

  const csrfFor = (who: string | null) =>
    createHmac('sha256', secret)
      .update(`csrf:${who ?? ''}`)
      .digest('hex');

  function principal(req: IncomingMessage): string | null {
    const auth = req.headers.authorization ?? '';
    if (o.token !== undefined && /^Bearer /i.test(auth) && sameSecret(auth.slice(7).trim(), o.token)) return tokenActor(o.operator);
    if (o.basic && /^Basic /i.test(auth)) {
      const [user, ...rest] = Buffer.from(auth.slice(6).trim(), 'base64').toString('utf8').split(':');
      if (sameSecret(user ?? '', o.basic.user) && sameSecret(rest.join(':'), o.basic.password)) return o.basic.user;
    }
    const sid = /(?:^|;\s*)ferry_console=([A-Za-z0-9_-]{20,})/.exec(req.headers.cookie ?? '')?.[1];
    const session = sid ? sessions.get(sid) : undefined;
    if (session && session.until > Date.now()) return session.who;
    return null;
  }

  /** Not a cross-site request: the Origin (or Referer) is the console's own, and the browser did not say cross-site. */
  function sameOrigin(req: IncomingMessage): boolean {
    const expected = `http://${req.headers.host ?? ''}`;
    const site = req.headers['sec-fetch-site'];
    if (site !== undefined && site !== 'same-origin' && site !== 'none') return false;
    const origin = req.headers.origin;
    if (origin !== undefined) return origin === expected;
    const referer = req.headers.referer;
    return referer !== undefined && (referer === expected || referer.startsWith(`${expected}/`));
  }

  function checkAction(r: Req, form: URLSearchParams): string {
    if (o.readOnly) throw new HttpError(403, 'this console is read-only (--read-only): it takes no actions');
    if (r.who === null)
      throw new HttpError(
        403,
        credentials
          ? 'actions need the console token or credentials: log in first'
          : 'actions need credentials: start ferry console with --token-file or --basic-auth-file',
      );
    if (!sameOrigin(r.req)) throw new HttpError(403, 'cross-origin request refused');
    const token = form.get('csrf') ?? '';
    if (!sameSecret(token, r.csrf)) throw new HttpError(403, 'missing or wrong CSRF token: reload the page and try again');
    return r.who;
  }

  const canAct = (r: Req) => !o.readOnly && r.who !== null;

  /** /login: GET shows the form, POST logs in (303 to the overview) or shows it again with why not. */
  function loginRoutes(kit: Pick<PageKit, 'layout' | 'csrfField'>) {
    const { layout, csrfField } = kit;
    function loginPage(r: Req, message = ''): string {
      const fields =
        o.basic !== undefined
          ? html`<label>user <input name="user" autocomplete="username"></label> <label>password <input name="password" type="password" autocomplete="current-password"></label>`
          : html`<label>token <input name="token" type="password" autocomplete="current-password"></label> <label>your name <input name="operator" value="${o.operator ?? ''}" autocomplete="nickname" maxlength="${OPERATOR_NAME_MAX}"></label><p class="note">The token is shared: the name you give is recorded with your actions in the audit trail, as your claim (the console cannot check it).</p>`;
      return layout(
        r,
        'Log in',
        '',
        html`${message ? html`<p class="advice">${message}</p>` : ''}${credentials ? html`<form method="post" action="/login">${csrfField(r)}${fields} <button type="submit">Log in</button></form>` : html`<p class="note">There is nothing to log in to (see above).</p>`}`,
      );
    }

    function login(r: Req, form: URLSearchParams, res: ServerResponse): string | undefined {
      if (!sameOrigin(r.req)) throw new HttpError(403, 'cross-origin request refused');
      if (!sameSecret(form.get('csrf') ?? '', r.csrf))
        throw new HttpError(403, 'missing or wrong CSRF token: reload the page and try again');
      let who: string | null = null;
      if (o.token !== undefined && sameSecret(form.get('token') ?? '', o.token)) {
        const typed = (form.get('operator') ?? '').trim();
        try {
          who = tokenActor(typed === '' ? o.operator : checkOperatorName(typed));
        } catch (err) {
          res.statusCode = 400;
          return loginPage(r, `Not logged in: ${(err as Error).message}.`);
        }
      }
      if (o.basic && sameSecret(form.get('user') ?? '', o.basic.user) && sameSecret(form.get('password') ?? '', o.basic.password))
        who = o.basic.user;
      if (who === null) {
        res.statusCode = 403;
        return loginPage(r, 'Wrong credentials.');
      }
      const sid = randomBytes(24).toString('base64url');
      const now = Date.now();
      for (const [k, v] of sessions) if (v.until <= now) sessions.delete(k); // expired sessions go at the next login
      sessions.set(sid, { who, until: now + SESSION_MS });
      res.setHeader('set-cookie', `ferry_console=${sid}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${SESSION_MS / 1000}`);
      res.statusCode = 303;
      res.setHeader('location', '/');
      return undefined;
    }

    return { loginPage, login };
  }

  return { credentials, principal, csrfFor, canAct, checkAction, loginRoutes };
}

export type ConsoleAuth = ReturnType<typeof consoleAuth>;
