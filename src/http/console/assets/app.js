// The console's shell: hash routing, the login page, the navigation, the alarm banners
// (memory, disk and each vhost's store quota, from /api/nodes, which asks the shards
// nothing) and the refresh loop: every 5 s the
// node, then what the page shows. Polling runs only while the tab is visible, so a
// console left in a background tab asks the broker nothing.

import { h, toast, fmtBytes } from './dom.js';
import * as api from './api.js';
import { overviewPage, feedNode } from './overview.js';
import { riskPage } from './risk.js';
import { queuesPage, queuePage } from './queues.js';
import { connectionsPage, connectionPage } from './connections.js';
import { exchangesPage, exchangePage } from './exchanges.js';
import { adminPage } from './admin.js';

export const INTERVAL_MS = 5000;

const NAV = [
  ['#/', 'Overview'], ['#/risk', 'Subscriptions at risk'], ['#/queues', 'Queues'],
  ['#/connections', 'Connections'], ['#/exchanges', 'Exchanges'], ['#/admin', 'Admin'],
];

// [pattern segments, page]; a ':x' segment is a parameter.
const ROUTES = [
  [[], overviewPage], [['risk'], riskPage], [['queues'], queuesPage],
  [['queues', ':vhost', ':name'], queuePage], [['connections'], connectionsPage],
  [['connections', ':name'], connectionPage], [['exchanges'], exchangesPage],
  [['exchanges', ':vhost', ':name'], exchangePage], [['admin'], adminPage],
];

let current = null;   // { page, live, key }
let timer = null;

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [path, query = ''] = raw.split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  return { parts, query: new URLSearchParams(query) };
}

function match(parts) {
  for (const [pattern, page] of ROUTES) {
    if (pattern.length !== parts.length) continue;
    const params = {};
    if (pattern.every((p, i) => p.startsWith(':') ? (params[p.slice(1)] = parts[i], true) : p === parts[i])) {
      return { page, params };
    }
  }
  return null;
}


function renderNav(here) {
  const nav = document.getElementById('nav');
  nav.replaceChildren(...NAV.map(([href, text]) =>
    h('a', { href, class: href === here ? 'here' : null }, text)));
  const who = document.getElementById('who');
  const user = api.userName();
  who.replaceChildren(user ? h('span', {}, user, h('button', { class: 'plain', id: 'logout', onclick: () => { api.logout(); showLogin(); } }, 'Log out')) : '');
}

function stop() {
  if (current && current.live && current.live.stop) current.live.stop();
  current = null;
}

function showLogin(reason) {
  stop();
  document.getElementById('banners').replaceChildren();
  renderNav(null);
  document.getElementById('nav').replaceChildren();
  const user = h('input', { name: 'user', id: 'login-user', autocomplete: 'username', required: true });
  const password = h('input', { name: 'password', id: 'login-password', type: 'password', autocomplete: 'current-password' });
  const message = h('p', { class: 'muted', id: 'login-message' }, reason || 'Log in with a broker user (the management API\'s basic auth).');
  const form = h('form', { class: 'stack card login', id: 'login' },
    h('h1', {}, 'sluice console'), message,
    h('label', {}, 'User', user), h('label', {}, 'Password', password),
    h('button', { type: 'submit', id: 'login-submit' }, 'Log in'));
  form.addEventListener('submit', async e => {
    e.preventDefault();
    try {
      await api.login(user.value, password.value);
      // Opening the page asked for (or the overview) routes once, by hashchange or here.
      if (!location.hash || location.hash === '#/login') location.hash = '#/';
      else route();
    } catch (err) {
      message.textContent = 'Login failed: ' + err.message;
      message.className = 'error';
    }
  });
  document.getElementById('main').replaceChildren(form);
  user.focus();
}

async function route() {
  if (!api.credentials()) return showLogin();
  const { parts, query } = parseHash();
  const found = match(parts);
  stop();
  const main = document.getElementById('main');
  if (!found) {
    main.replaceChildren(h('h1', {}, 'Not found'), h('p', {}, h('a', { href: '#/' }, 'Overview')));
    return;
  }
  renderNav('#/' + (parts[0] || ''));
  // Each visit renders into a container of its own: a page still loading when the
  // next one is opened fills a container that is no longer shown.
  const view = h('div');
  main.replaceChildren(view);
  const me = { page: found.page };
  current = me;
  try {
    me.live = await found.page.render(view, found.params, query);
  } catch (e) {
    view.append(h('p', { class: 'error' }, 'Could not show this page: ' + e.message));
  }
  document.title = (found.page.title ? found.page.title + ' · ' : '') + 'sluice console';
  if (current === me) refresh(true);
}

// One refresh loop: a refresh started for an older page or tick does not schedule.
let generation = 0;

async function refresh(first) {
  clearTimeout(timer);
  const mine = ++generation;
  if (!api.credentials() || document.hidden) return;
  try {
    const nodes = await api.get('nodes');
    feedNode(nodes);
    banners(Array.isArray(nodes) ? nodes[0] : null);
  } catch (e) {
    if (!api.credentials()) return;
    if (!first) toast('node: ' + e.message, true);
  }
  if (mine !== generation) return;
  if (current && current.live && current.live.refresh) {
    try { await current.live.refresh(); } catch (e) { if (api.credentials()) toast(e.message, true); }
  }
  if (mine === generation) timer = setTimeout(refresh, INTERVAL_MS);
}

function banners(node) {
  const out = [];
  if (!node) return;
  if (node.mem_alarm) out.push(h('div', { class: 'banner', id: 'memory-alarm' }, 'Memory alarm: publishers are blocked until message memory falls below the high watermark.'));
  if (node.disk_free_alarm) out.push(h('div', { class: 'banner', id: 'disk-alarm' }, 'Disk alarm: free disk space is below its limit; publishers are blocked.'));
  for (const quota of node.store_quotas || []) {
    if (quota.alarm) out.push(h('div', { class: 'banner', id: 'store-quota-' + quota.vhost },
      `Store quota: the store (${fmtBytes(node.store_size)}) is above vhost '${quota.vhost}'s overfull size ${fmtBytes(quota.overfull_size)}; its publishers are blocked until it is below ${fmtBytes(quota.underfull_size)}.`));
  }
  const err = document.getElementById('script-error');
  document.getElementById('banners').replaceChildren(...out, ...(err ? [err] : []));
}

// A script error is shown, not swallowed (and the browser tests look for it).
function scriptError(text) {
  const banners = document.getElementById('banners');
  if (!document.getElementById('script-error')) banners.append(h('div', { class: 'banner warn', id: 'script-error' }, 'Console error: ' + text));
}
window.addEventListener('error', e => scriptError(e.message));
window.addEventListener('unhandledrejection', e => scriptError(String(e.reason && e.reason.message || e.reason)));

api.setLogoutHandler(() => showLogin('Your session ended; log in again.'));
window.addEventListener('hashchange', route);
document.addEventListener('visibilitychange', () => { if (!document.hidden) refresh(); });
route();
