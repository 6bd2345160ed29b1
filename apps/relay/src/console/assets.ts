// The console's only stylesheet and script, served by Ferry itself (no CDN, no inline code: the
// Content-Security-Policy allows 'self' only).

export const CONSOLE_CSS = `
:root { color-scheme: light; --red: #b00020; --amber: #8a5a00; --green: #1b6e20; --line: #d9d9de; --muted: #666; }
* { box-sizing: border-box; }
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1d1d1f; background: #fafafa; }
header { background: #1d2733; color: #fff; padding: 8px 16px; display: flex; gap: 16px; align-items: center; flex-wrap: wrap; }
header a { color: #cfe3ff; text-decoration: none; }
header a.here { color: #fff; font-weight: 600; text-decoration: underline; }
header .who { margin-left: auto; color: #aab; font-size: 12px; }
main { padding: 12px 16px; }
h1 { font-size: 18px; margin: 4px 0 12px; } h2 { font-size: 15px; margin: 18px 0 6px; }
table { border-collapse: collapse; background: #fff; margin-bottom: 8px; }
th, td { border: 1px solid var(--line); padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f0f0f3; font-weight: 600; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.cards { display: flex; gap: 10px; flex-wrap: wrap; }
.card { background: #fff; border: 1px solid var(--line); padding: 8px 12px; min-width: 130px; }
.card b { display: block; font-size: 20px; }
.bad, .bad a { color: var(--red); } .warn { color: var(--amber); } .ok { color: var(--green); }
.card.bad { border-color: var(--red); }
p.advice { margin: 4px 0; padding: 6px 10px; border-left: 4px solid var(--red); background: #fff3f4; }
p.note { color: var(--muted); }
pre { background: #fff; border: 1px solid var(--line); padding: 8px; max-height: 480px; overflow: auto; white-space: pre-wrap; word-break: break-all; }
.ctl { color: var(--red); font-family: monospace; }
code, .mono { font-family: ui-monospace, monospace; font-size: 12px; }
form.inline { display: inline; }
form.filter { display: flex; gap: 8px; flex-wrap: wrap; align-items: end; background: #fff; border: 1px solid var(--line); padding: 8px; }
form.filter label { display: flex; flex-direction: column; font-size: 12px; color: var(--muted); }
button { cursor: pointer; }
button.danger { color: #fff; background: var(--red); border: 1px solid var(--red); padding: 3px 10px; }
.preview { background: #fff; border: 2px solid var(--amber); padding: 10px 14px; }
#stamp { color: #aab; font-size: 12px; }
.charts { display: flex; gap: 24px; flex-wrap: wrap; margin-top: 12px; }
.charts figure { margin: 0; } .charts figcaption { font-size: 12px; color: var(--muted); margin-bottom: 2px; }
svg.chart { display: block; background: #fff; border: 1px solid var(--line); }
svg.chart .slot { fill: transparent; } svg.chart g:hover .slot { fill: #eef2f8; }
svg.chart .bar { fill: #3b6ea8; } svg.chart .p99 { fill: #e3a33b; } svg.chart .p50 { fill: #8a5a00; }
.axis { display: flex; justify-content: space-between; width: 600px; font-size: 11px; color: var(--muted); }
#stamp.stale { color: #ff9e9e; }
`;

export const CONSOLE_JS = `'use strict';
// Live refresh of the element #live from its data-refresh URL (an HTML fragment the server
// escaped), every data-interval ms; #stamp shows when it last succeeded.
(function () {
  var live = document.getElementById('live');
  if (!live) return;
  var url = live.getAttribute('data-refresh');
  var every = Number(live.getAttribute('data-interval')) || 5000;
  var stamp = document.getElementById('stamp');
  function tick() {
    fetch(url, { credentials: 'same-origin', headers: { accept: 'text/html' } })
      .then(function (r) { if (!r.ok) throw new Error('HTTP ' + r.status); return r.text(); })
      .then(function (text) {
        live.innerHTML = text;
        live.setAttribute('data-refreshed', String(Date.now()));
        if (stamp) { stamp.textContent = 'updated ' + new Date().toLocaleTimeString(); stamp.className = ''; }
      })
      .catch(function (e) { if (stamp) { stamp.textContent = 'refresh failed: ' + e.message; stamp.className = 'stale'; } })
      .then(function () { setTimeout(tick, soon()); });
  }
  // While the first numbers are being read (#reading), look again after a second.
  function soon() { return document.getElementById('reading') ? Math.min(1000, every) : every; }
  setTimeout(tick, soon());
})();
`;
