// Time-series charts drawn as SVG: series over the last `span` seconds, a round-number
// value axis starting at zero, minute ticks on the time axis, an optional limit line.

import { s, h } from './dom.js';

// A "nice" step (1, 2 or 5 times a power of ten) giving about `count` ticks up to max.
export function niceStep(max, count = 4) {
  if (!(max > 0)) return 1;
  const raw = max / count;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  const m = raw / p;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

// A ring of samples: [time ms, value…], at most `span` seconds old.
export class History {
  constructor(span = 600) { this.span = span; this.rows = []; }
  push(t, ...values) {
    this.rows.push([t, ...values]);
    const oldest = t - this.span * 1000;
    while (this.rows.length && this.rows[0][0] < oldest) this.rows.shift();
  }
  series(i) { return this.rows.map(r => [r[0], r[i + 1]]).filter(p => p[1] !== null && p[1] !== undefined); }
}

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

// The value axis: a step and a top that are round numbers (for bytes, round in the
// binary unit the values reach: 2 GiB, not 2.1 GB), and each tick's label.
function axis(max, bytes, pct) {
  let unit = 1, name = '';
  if (bytes) {
    let i = 0;
    while (i < UNITS.length - 1 && max >= 1024 ** (i + 1)) i++;
    unit = 1024 ** i; name = ' ' + UNITS[i];
  }
  const step = niceStep(max / unit || 1) * unit;
  const top = Math.max(step, Math.ceil((max || 1) / step - 1e-9) * step);
  const digits = step / unit < 1 ? Math.min(3, Math.ceil(-Math.log10(step / unit))) : 0;
  const label = pct ? v => (v * 100).toFixed(Math.max(0, digits - 2)) + '%'
    : v => (v / unit).toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits }) + name;
  return { step, top, label };
}

// series: [{name, points: [[t, v]]}]; opts: {span, limit, limitName, fmt (the legend's
// values), bytes or pct (the axis), now, height}.
export function lineChart(series, opts = {}) {
  const W = 560, H = opts.height || 180, L = 64, R = 12, T = 10, B = 24;
  const span = (opts.span || 600) * 1000;
  const now = opts.now || Date.now();
  const t0 = now - span;
  const fmt = opts.fmt || (v => String(v));
  let max = 0;
  for (const sr of series) for (const [, v] of sr.points) max = Math.max(max, v);
  if (opts.limit) max = Math.max(max, opts.limit);
  const { step, top, label } = axis(max, opts.bytes, opts.pct);
  const x = t => L + ((t - t0) / span) * (W - L - R);
  const y = v => T + (1 - v / top) * (H - T - B);
  const svg = s('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': opts.title || 'chart' });
  for (let v = 0; v <= top + step / 2; v += step) {
    svg.append(s('line', { class: 'grid', x1: L, x2: W - R, y1: y(v), y2: y(v) }),
      s('text', { x: L - 6, y: y(v) + 4, 'text-anchor': 'end' }, label(v)));
  }
  const minutes = span / 60000;
  const every = minutes > 6 ? 2 : 1;
  for (let m = 0; m <= minutes; m += every) {
    const t = now - m * 60000;
    svg.append(s('line', { class: 'grid', x1: x(t), x2: x(t), y1: T, y2: H - B }),
      s('text', { x: x(t), y: H - 6, 'text-anchor': m === 0 ? 'end' : 'middle' }, m === 0 ? 'now' : `-${m} min`));
  }
  svg.append(s('line', { class: 'axis', x1: L, x2: W - R, y1: y(0), y2: y(0) }));
  if (opts.limit) svg.append(s('line', { class: 'limit', x1: L, x2: W - R, y1: y(opts.limit), y2: y(opts.limit) }));
  series.forEach((sr, i) => {
    const pts = sr.points.filter(([t]) => t >= t0);
    if (!pts.length) return;
    const d = pts.map(([t, v], j) => (j ? 'L' : 'M') + x(t).toFixed(1) + ' ' + y(v).toFixed(1)).join(' ');
    svg.append(s('path', { class: 'line s' + (i % 4), d }));
    if (pts.length === 1) svg.append(s('circle', { class: 's' + (i % 4), cx: x(pts[0][0]), cy: y(pts[0][1]), r: 2.5 }));
  });
  const legend = h('div', { class: 'legend' },
    series.map((sr, i) => h('span', {}, h('i', { class: 's' + (i % 4) }), sr.name,
      sr.points.length ? ' ' + fmt(sr.points[sr.points.length - 1][1]) : '')),
    opts.limit ? h('span', {}, h('i', { class: 'limit' }), (opts.limitName || 'limit') + ' ' + fmt(opts.limit)) : null);
  return h('div', { class: 'chart-box' }, svg, legend);
}
