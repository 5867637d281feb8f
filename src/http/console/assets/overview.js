// Overview: the node, live message rates, memory and disk against their limits, each
// shard's busy fraction, totals and listeners. Samples are kept here for ten minutes:
// memory and disk from /api/nodes, which the shell asks on every tick of every page (it
// asks the shards nothing), the rates and each shard's figures from /api/overview, asked
// only while this page is shown (counts and totals: no view of each queue is built).

import { h, fmtNum, fmtRate, fmtBytes, fmtSecs, table, meter } from './dom.js';
import { History, lineChart } from './chart.js';
import * as api from './api.js';

const rates = new History();     // publish, deliver, ack per second
const memory = new History();    // message memory
const disk = new History();      // disk free
const busy = new History();      // busy fraction per shard (columns by shard)
let lastCpu = null;              // { t, seconds: [..] }
let latest = { overview: null, node: null };

// The node as /api/nodes shows it (every tick, on every page).
export function feedNode(nodes) {
  const node = Array.isArray(nodes) ? nodes[0] : null;
  if (!node) return;
  const t = Date.now();
  memory.push(t, node.mem_used);
  disk.push(t, node.disk_free);
  latest.node = node;
}

// The node's last sample (its alarms, for the banners and the flow causes).
export const latestNode = () => latest.node;

function feedOverview(overview) {
  const ms = overview.message_stats || {};
  const rate = f => (ms[f + '_details'] || {}).rate || 0;
  rates.push(Date.now(), rate('publish'), rate('deliver_get'), rate('ack'));
  latest.overview = overview;
}

// Each shard's figures from /api/overview's shard_details: { shard, connections,
// channels, queues, publish_inbox_depth, cpu_seconds, … }; the busy fraction is the
// growth of cpu_seconds over the wall time between two samples.
let shardRows = [];

function feedShards(details) {
  shardRows = details || [];
  const t = Date.now(), seconds = shardRows.map(f => f.cpu_seconds || 0);
  if (lastCpu && t > lastCpu.t) {
    const dt = (t - lastCpu.t) / 1000;
    busy.push(t, ...seconds.map((s, i) => Math.max(0, Math.min(1, (s - (lastCpu.seconds[i] || 0)) / dt))));
  }
  lastCpu = { t, seconds };
}

const pct = v => (v * 100).toFixed(0) + '%';

function view() {
  const { overview: o, node } = latest;
  if (!o) return h('p', { class: 'muted' }, 'Waiting for the first sample…');
  const totals = o.object_totals || {};
  const qt = o.queue_totals || {};
  const shards = o.shards || 1;
  const busySeries = [];
  for (let i = 0; i < shards; i++) busySeries.push({ name: 'shard ' + i, points: busy.series(i) });
  const stat = (label, value, id) => h('div', { class: 'stat', id }, h('b', {}, value), label);
  return h('div', {},
    h('div', { class: 'card' },
      h('div', { class: 'stats' },
        stat('node', o.node, 'ov-node'), stat('version', o.product_name + ' ' + o.product_version),
        stat('uptime', fmtSecs(o.uptime_seconds)), stat('shards', shards),
        stat('connections', fmtNum(totals.connections), 'ov-connections'),
        stat('channels', fmtNum(totals.channels), 'ov-channels'),
        stat('queues', fmtNum(totals.queues), 'ov-queues'),
        stat('consumers', fmtNum(totals.consumers), 'ov-consumers'),
        stat('exchanges', fmtNum(totals.exchanges)),
        stat('messages', fmtNum(qt.messages), 'ov-messages'),
        stat('ready / unacked', fmtNum(qt.messages_ready) + ' / ' + fmtNum(qt.messages_unacknowledged)))),
    h('div', { class: 'grid' },
      h('div', { class: 'card', id: 'chart-rates' }, h('h3', {}, 'Messages per second'),
        lineChart([{ name: 'published', points: rates.series(0) }, { name: 'delivered', points: rates.series(1) },
          { name: 'acked', points: rates.series(2) }], { fmt: fmtRate, title: 'message rates' })),
      h('div', { class: 'card', id: 'chart-memory' }, h('h3', {}, 'Message memory against the high watermark'),
        lineChart([{ name: 'used', points: memory.series(0) }], { limit: node && node.mem_limit, limitName: 'watermark', fmt: fmtBytes, bytes: true, title: 'memory' }),
        node ? meter(node.mem_used, node.mem_limit) : null),
      h('div', { class: 'card', id: 'chart-disk' }, h('h3', {}, 'Disk free against its limit'),
        lineChart([{ name: 'free', points: disk.series(0) }], { limit: node && node.disk_free_limit, limitName: 'limit', fmt: fmtBytes, bytes: true, title: 'disk' }),
        h('p', { class: 'muted' }, 'store ', fmtBytes(o.store_bytes), ' · RSS ', fmtBytes(o.rss_bytes))),
      h('div', { class: 'card', id: 'chart-busy' }, h('h3', {}, 'Shard busy fraction (CPU of its event loop)'),
        lineChart(busySeries, { fmt: pct, pct: true, title: 'shards busy' }))),
    shardRows.length ? h('h2', {}, 'Shards') : null,
    shardRows.length ? table([['shard', r => r.i, { num: true }], ['connections', r => fmtNum(r.f.connections), { num: true }],
      ['channels', r => fmtNum(r.f.channels), { num: true }], ['home queues', r => fmtNum(r.f.queues), { num: true }],
      ['publish inbox (batches)', r => fmtNum(r.f.publish_inbox_depth), { num: true }],
      ['busy', r => { const s = busy.series(r.i); return s.length ? pct(s[s.length - 1][1]) : '–'; }, { num: true }]],
    shardRows.map((f, i) => ({ i, f }))) : null,
    h('h2', {}, 'Listeners'),
    table([['protocol', l => l.protocol], ['address', l => l.ip_address], ['port', l => l.port, { num: true }]], o.listeners || []),
    node ? h('h2', {}, 'Node') : null,
    node ? table([['figure', r => r[0]], ['used', r => r[1]], ['limit', r => r[2]], ['', r => r[3]]], [
      ['message memory', fmtBytes(node.mem_used), fmtBytes(node.mem_limit), meter(node.mem_used, node.mem_limit)],
      ['file descriptors', fmtNum(node.fd_used), fmtNum(node.fd_total), meter(node.fd_used, node.fd_total)],
      ['sockets', fmtNum(node.sockets_used), fmtNum(node.sockets_total), meter(node.sockets_used, node.sockets_total)],
      ['threads', fmtNum(node.proc_used), fmtNum(node.proc_total), ''],
    ]) : null);
}

export const overviewPage = {
  title: 'Overview',
  async render(main) {
    const body = h('div', { id: 'overview' }, view());
    main.append(h('h1', {}, 'Overview'), body);
    return {
      async refresh() {
        const overview = await api.get('overview');
        feedOverview(overview);
        feedShards(overview.shard_details);
        body.replaceChildren(view());
      },
    };
  },
};
