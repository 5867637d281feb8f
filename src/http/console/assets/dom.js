// DOM building and formatting. Every text a broker or a client chose (queue names,
// client properties, reasons) goes in as a text node, never as markup.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  return fill(el, attrs, children);
}

const SVG = 'http://www.w3.org/2000/svg';
export function s(tag, attrs, ...children) {
  return fill(document.createElementNS(SVG, tag), attrs, children);
}

function fill(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'value' && 'value' in el) el.value = v;
    else if (k === 'checked') el.checked = !!v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// A table: columns are [header, cell(row), {num, sort}]; rows are objects.
export function table(columns, rows, opts = {}) {
  const head = h('tr', {}, columns.map(([title, , o = {}]) => {
    const th = h('th', { class: [o.num && 'num', o.sort && opts.onSort && 'sortable'].filter(Boolean).join(' ') },
      title, o.sort && opts.sorted === o.sort ? (opts.reverse ? ' ▼' : ' ▲') : '');
    if (o.sort && opts.onSort) th.addEventListener('click', () => opts.onSort(o.sort));
    return th;
  }));
  const body = rows.map(r => {
    const tr = h('tr', { class: opts.onRow ? 'link' : null },
      columns.map(([, cell, o = {}]) => h('td', { class: o.num ? 'num' : null }, cell(r))));
    if (opts.onRow) tr.addEventListener('click', e => { if (!e.target.closest('button,a,input')) opts.onRow(r); });
    return tr;
  });
  if (!rows.length) body.push(h('tr', {}, h('td', { colspan: columns.length, class: 'muted' }, opts.empty || 'None.')));
  return h('table', {}, h('thead', {}, head), h('tbody', {}, body));
}

export function fmtNum(n) {
  if (n === undefined || n === null) return '–';
  return Number(n).toLocaleString('en-US', { maximumFractionDigits: 0 });
}

export function fmtRate(r) {
  if (r === undefined || r === null) return '–';
  return (r >= 100 ? Math.round(r).toLocaleString('en-US') : r.toFixed(1)) + '/s';
}

export function fmtBytes(b) {
  if (b === undefined || b === null) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0, v = Number(b);
  while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i ? v.toFixed(v < 10 ? 1 : 0) : v) + ' ' + units[i];
}

export function fmtSecs(t) {
  if (t === undefined || t === null) return '–';
  if (t < 60) return t.toFixed(t < 10 ? 1 : 0) + ' s';
  if (t < 3600) return Math.floor(t / 60) + ' min ' + Math.floor(t % 60) + ' s';
  if (t < 86400) return Math.floor(t / 3600) + ' h ' + Math.floor((t % 3600) / 60) + ' min';
  return Math.floor(t / 86400) + ' d ' + Math.floor((t % 86400) / 3600) + ' h';
}

export function pill(text, kind) { return h('span', { class: 'pill ' + (kind || '') }, text); }

// A bar of used against limit (fraction 0..1).
export function meter(used, limit) {
  const f = limit ? Math.min(1, used / limit) : 0;
  const bar = h('div');
  bar.style.width = (f * 100).toFixed(1) + '%';
  return h('div', { class: 'meter ' + (f >= 1 ? 'bad' : f > 0.8 ? 'warn' : ''), title: (f * 100).toFixed(0) + '%' }, bar);
}

export function toast(text, error) {
  const box = document.getElementById('toast');
  const item = h('div', { class: error ? 'error' : '' }, text);
  box.append(item);
  setTimeout(() => item.remove(), error ? 8000 : 3500);
}

// Runs an action, telling the user how it went; returns whether it worked.
export async function act(label, fn) {
  try {
    await fn();
    toast(label + ': done');
    return true;
  } catch (e) {
    toast(label + ': ' + e.message, true);
    return false;
  }
}

// The values of a form's named fields.
export function values(form) {
  const out = {};
  for (const el of form.elements) {
    if (!el.name) continue;
    out[el.name] = el.type === 'checkbox' ? el.checked : el.value;
  }
  return out;
}

export function field(label, input) { return h('label', {}, label, input); }

// JSON text typed by the user into an object ({} when empty).
export function parseJson(text, what) {
  if (!text || !text.trim()) return {};
  try { return JSON.parse(text); } catch (e) { throw new Error(what + ' is not JSON: ' + e.message); }
}

export function kv(obj) {
  const entries = Object.entries(obj || {});
  if (!entries.length) return h('span', { class: 'muted' }, 'none');
  return h('table', {}, entries.map(([k, v]) =>
    h('tr', {}, h('th', {}, k), h('td', {}, typeof v === 'object' ? JSON.stringify(v) : String(v)))));
}

// A console address: '#/queues/%2F/name'.
export const link = (...parts) => '#/' + parts.map(encodeURIComponent).join('/');
export function go(hash) { location.hash = hash; }
