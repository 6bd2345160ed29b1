import { describeRelayBeforeLeases, describeRelease } from '../cli/relay-instances.js';
import { minuteCharts } from './charts.js';
import { ago, Html, html, qs } from './html.js';
import { inboxInstancesSection, waitingKeysAdvice } from './inbox-instances.js';
import type { ConsoleContext, PageModule, Req } from './page-kit.js';
import type { ConsoleSnapshot } from './snapshot.js';
import type { StreamsConsole } from './streams.js';

// GET /: the overview, and its fragment (?fragment=1) the page refreshes itself with.
export function overviewPages(c: ConsoleContext & { snapshotView: ConsoleSnapshot['view'] }, streams: StreamsConsole): PageModule {
  const { o, pace, paced } = c;
  const { layout, eventLink, keyLink } = c.kit;

  async function overviewFragment(all: boolean): Promise<Html> {
    const snap = await c.snapshotView();
    if (!snap)
      return html`<p class="note" id="reading">Reading the numbers: the exact counts run over every pending row and take seconds at a million rows. This page fills in by itself.</p>`;
    const { status, parked, jobTable, lag, minutes, lastMinute } = snap;
    const stamp = html`<p class="note" id="asof" data-age-ms="${Date.now() - snap.at}">Numbers as of ${new Date(snap.at).toISOString()} (read for every viewer once per ${(paced(snap.tookMs) / 1000).toFixed(paced(snap.tookMs) < 10_000 ? 1 : 0)} s: the refresh interval, or ${pace}× the last read's ${snap.tookMs} ms).</p>`;
    if (!status) return html`<p class="advice">Cannot read the status: ${snap.error ?? 'not read yet'}</p>${stamp}`;
    const advice: Html[] = [];
    if (snap.error) advice.push(html`<p class="advice">The last status read failed (these numbers are older): ${snap.error}</p>`);
    if (status.dead > 0)
      advice.push(
        html`<p class="advice">${status.dead} dead event(s) block their keys: open <a href="/blocked">Blocked keys</a>, fix the cause (<a href="/streams">ferry doctor</a>), then retry or discard them.</p>`,
      );
    if (status.unownedLanesWithBacklog.length > 0)
      advice.push(
        html`<p class="advice">Lanes ${status.unownedLanesWithBacklog.join(', ')} have pending events and no live relay: start ferry relay.</p>`,
      );
    const overdue = status.lanes.filter((l) => l.overdue);
    if (overdue.length > 0)
      advice.push(
        html`<p class="advice">${overdue.length} lane lease(s) overdue (owner frozen, cut off or stuck): a live relay takes them on its next poll; check that relay.</p>`,
      );
    if (status.oldestPendingSeconds > 60)
      advice.push(
        html`<p class="advice">The oldest pending event is ${ago(status.oldestPendingSeconds)} old: are the relays running and NATS reachable?</p>`,
      );
    for (const p of parked.filter((x) => x.failed > 0))
      advice.push(
        html`<p class="advice">Consumer ${p.consumer} has ${p.failed} failed parked event(s) holding their keys: <a href="/parked${qs({ consumer: p.consumer })}">retry or discard them</a>.</p>`,
      );
    advice.push(...waitingKeysAdvice(status.inbox));
    if (lag.error) advice.push(html`<p class="advice">NATS: ${lag.error}</p>`);
    const card = (label: string, value: string | number, bad = false) =>
      html`<div class="card${bad ? new Html(' bad') : ''}" data-card="${label}"><b>${value}</b>${label}</div>`;
    return html`${advice}
<div class="cards">${card('pending', status.pending)}${card('oldest pending', ago(status.oldestPendingSeconds), status.oldestPendingSeconds > 60)}${card('dead', status.dead, status.dead > 0)}${card('blocked keys', status.blockedKeys, status.blockedKeys > 0)}${card('published, last full minute', lastMinute?.published ?? '–')}${card('relays', status.instances.length, status.instances.length === 0 && status.pending > 0)}</div>
${minuteCharts(minutes)}
<h2>Relays</h2>
${
  status.instances.length === 0
    ? html`<p class="note">No live relay instance.</p>`
    : html`<table><tr><th>instance</th><th>release</th><th>where</th><th>since</th><th>lanes</th></tr>${status.instances.map(
        (i) =>
          html`<tr><td class="mono">${i.instance}</td><td${i.belowFloor ? new Html(' class="bad"') : ''}>${describeRelease(i)}${i.belowFloor ? ': below the relay floor, stop it' : ''}</td><td>${i.relayPid === null ? `backend pid ${i.pid}` : `pid ${i.relayPid} on ${i.host ?? '?'}`}</td><td>${i.since ?? '-'}</td><td>${i.lanes.join(', ') || '(none)'}</td></tr>`,
      )}</table>`
}${status.mixedReleases === null ? '' : html`<p class="note">Relays run different releases: ${status.mixedReleases}. Upgrades stop, migrate, start (docs/operations.md).</p>`}${status.relaysBeforeLeases.map(
  (r) => html`<p class="note">A relay from before lane leases holds lanes by advisory lock: ${describeRelayBeforeLeases(r)}. Stop it.</p>`,
)}
${inboxInstancesSection(status.inbox)}
<h2>Lanes</h2>
<table><tr><th>lane</th><th>pending</th><th>dead</th><th>oldest pending</th><th>owner</th><th>lease age</th><th>epoch</th></tr>${status.lanes.map(
      (l) =>
        html`<tr class="${l.overdue || (l.pending > 0 && l.owner === null) ? 'bad' : ''}"><td class="n">${l.lane}</td><td class="n">${l.pending}</td><td class="n${l.dead > 0 ? new Html(' bad') : ''}">${l.dead}</td><td>${ago(l.oldestPendingSeconds)}</td><td class="mono">${l.owner ?? '-'}</td><td>${l.leaseAgeSeconds === null ? '-' : ago(l.leaseAgeSeconds)}${l.overdue ? ' OVERDUE' : ''}</td><td class="n">${l.epoch}</td></tr>`,
    )}</table>
<h2>Blocked keys</h2>
${
  status.blocked.length === 0
    ? html`<p class="note">None.</p>`
    : html`<table><tr><th>key</th><th>head</th><th>state</th><th>reason</th><th>waiting behind</th></tr>${status.blocked.map(
        (b) =>
          html`<tr class="bad"><td>${keyLink(b.key)}</td><td>${eventLink(b.id)} v${b.version}</td><td>${b.state === 'dead' ? 'dead' : `backing off, attempt ${b.attempts}, next ${b.nextAttemptAt}`}</td><td>${b.reason ?? ''}</td><td class="n">${b.waiting}</td></tr>`,
      )}</table>${status.blockedKeys > status.blocked.length ? html`<p><a href="/blocked">All ${status.blockedKeys} blocked keys</a></p>` : ''}`
}
<h2>Parked events per consumer</h2>
${
  jobTable === null
    ? html`<p class="note">No inbox parking lot in schema ${o.bossSchema} (--boss-schema).</p>`
    : parked.length === 0
      ? html`<p class="note">None.</p>`
      : html`<table><tr><th>consumer</th><th>parked</th><th>failed (holding their keys)</th></tr>${parked.map(
          (p) =>
            html`<tr class="${p.failed > 0 ? 'bad' : ''}"><td><a href="/parked${qs({ consumer: p.consumer })}">${p.consumer}</a></td><td class="n">${p.live}</td><td class="n">${p.failed}</td></tr>`,
        )}</table>`
}
<h2>Consumers (JetStream)</h2>
${streams.consumersSection(lag, all)}${stamp}`;
  }

  async function overview(r: Req): Promise<string> {
    const all = r.url.searchParams.get('all') === '1';
    if (r.url.searchParams.get('fragment') === '1') return (await overviewFragment(all)).value;
    return layout(
      r,
      'Overview',
      '/',
      html`<div id="live" data-refresh="/${qs({ fragment: '1', ...(all ? { all: '1' } : {}) })}" data-interval="${o.refreshMs}">${await overviewFragment(all)}</div>`,
    );
  }

  return { get: { '/': overview } };
}
