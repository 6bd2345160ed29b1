/**
 * A small SVG line-chart writer: categorical x axis, linear or log y axis,
 * one polyline per series, a legend. No dependencies; the output is plain
 * text that diffs well and renders on GitHub.
 */

export interface Series {
  name: string;
  /** One value per x category; NaN or undefined leaves a gap. */
  values: Array<number | undefined>;
  /** Dashed line (e.g. a baseline). */
  dashed?: boolean;
}

export interface LineChart {
  title: string;
  xLabel: string;
  yLabel: string;
  categories: string[];
  series: Series[];
  logY?: boolean;
  width?: number;
  height?: number;
}

const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf'];

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

function niceTicks(min: number, max: number, log: boolean): number[] {
  if (log) {
    const lo = Math.floor(Math.log10(min));
    const hi = Math.ceil(Math.log10(max));
    const out: number[] = [];
    for (let e = lo; e <= hi; e++) {
      // 1-2-5 steps when the range is narrow enough to label them.
      for (const m of hi - lo <= 3 ? [1, 2, 5] : [1]) {
        const v = m * 10 ** e;
        if (e === hi && m > 1) break;
        if (m === 1 || (v > min / 2 && v < max * 2)) out.push(Number(v.toPrecision(6)));
      }
    }
    return out;
  }
  const span = max - min || 1;
  const step0 = 10 ** Math.floor(Math.log10(span / 5));
  const step = [1, 2, 5, 10].map((m) => m * step0).find((s) => span / s <= 6) ?? step0 * 10;
  const out: number[] = [];
  // From at or below the lowest value to at or above the highest, so every point lies inside the axis.
  for (let v = Math.floor(min / step) * step; ; v += step) {
    out.push(Number(v.toPrecision(12)));
    if (v >= max) break;
  }
  return out;
}

function label(v: number): string {
  if (v >= 1000) return `${Number((v / 1000).toPrecision(3))}k`;
  return String(Number(v.toPrecision(3)));
}

export function lineChart(c: LineChart): string {
  const W = c.width ?? 720;
  const H = c.height ?? 400;
  const m = { top: 40, right: 190, bottom: 56, left: 70 };
  const pw = W - m.left - m.right;
  const ph = H - m.top - m.bottom;
  const all = c.series.flatMap((s) => s.values).filter((v): v is number => v !== undefined && Number.isFinite(v) && (!c.logY || v > 0));
  const lo = all.length ? Math.min(...all) : 0;
  const hi = all.length ? Math.max(...all) : 1;
  const ticks = niceTicks(c.logY ? lo : Math.min(0, lo), hi, c.logY ?? false);
  const y0 = ticks[0] ?? 0;
  const y1 = ticks.at(-1) ?? 1;
  const yOf = (v: number) =>
    c.logY
      ? m.top + ph - ((Math.log10(v) - Math.log10(y0)) / (Math.log10(y1) - Math.log10(y0) || 1)) * ph
      : m.top + ph - ((v - y0) / (y1 - y0 || 1)) * ph;
  const n = c.categories.length;
  const xOf = (i: number) => m.left + (n <= 1 ? pw / 2 : (i / (n - 1)) * pw);
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12" role="img">`,
    `<title>${esc(c.title)}</title>`,
    `<rect width="${W}" height="${H}" fill="#fff"/>`,
    `<text x="${W / 2}" y="22" text-anchor="middle" font-size="15" font-weight="bold">${esc(c.title)}</text>`,
  ];
  for (const t of ticks) {
    const y = yOf(t).toFixed(1);
    out.push(`<line x1="${m.left}" x2="${m.left + pw}" y1="${y}" y2="${y}" stroke="#ddd"/>`);
    out.push(`<text x="${m.left - 6}" y="${y}" text-anchor="end" dominant-baseline="middle">${label(t)}</text>`);
  }
  for (const [i, cat] of c.categories.entries()) {
    const x = xOf(i).toFixed(1);
    out.push(`<line x1="${x}" x2="${x}" y1="${m.top + ph}" y2="${m.top + ph + 5}" stroke="#333"/>`);
    out.push(`<text x="${x}" y="${m.top + ph + 18}" text-anchor="middle">${esc(cat)}</text>`);
  }
  out.push(`<line x1="${m.left}" x2="${m.left}" y1="${m.top}" y2="${m.top + ph}" stroke="#333"/>`);
  out.push(`<line x1="${m.left}" x2="${m.left + pw}" y1="${m.top + ph}" y2="${m.top + ph}" stroke="#333"/>`);
  out.push(`<text x="${m.left + pw / 2}" y="${H - 12}" text-anchor="middle">${esc(c.xLabel)}</text>`);
  out.push(
    `<text transform="translate(18 ${m.top + ph / 2}) rotate(-90)" text-anchor="middle">${esc(c.yLabel)}${c.logY ? ' (log)' : ''}</text>`,
  );
  for (const [k, s] of c.series.entries()) {
    const color = COLORS[k % COLORS.length];
    const dash = s.dashed ? ' stroke-dasharray="6 4"' : '';
    let path = '';
    let pen = false;
    for (const [i, v] of s.values.entries()) {
      if (v === undefined || !Number.isFinite(v) || (c.logY && v <= 0)) {
        pen = false;
        continue;
      }
      path += `${pen ? 'L' : 'M'}${xOf(i).toFixed(1)} ${yOf(v).toFixed(1)} `;
      pen = true;
      out.push(`<circle cx="${xOf(i).toFixed(1)}" cy="${yOf(v).toFixed(1)}" r="3" fill="${color}"/>`);
    }
    if (path) out.push(`<path d="${path.trim()}" fill="none" stroke="${color}" stroke-width="2"${dash}/>`);
    const ly = m.top + 10 + k * 18;
    const lx = m.left + pw + 14;
    out.push(`<line x1="${lx}" x2="${lx + 22}" y1="${ly}" y2="${ly}" stroke="${color}" stroke-width="2"${dash}/>`);
    out.push(`<text x="${lx + 28}" y="${ly}" dominant-baseline="middle">${esc(s.name)}</text>`);
  }
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}
