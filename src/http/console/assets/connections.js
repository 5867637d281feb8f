// Connections and channels: who is connected (client-provided name, user, peer, TLS),
// their traffic, which publishers are held and why, and closing a connection with a
// reason (RabbitMQ's DELETE /api/connections/{name} with X-Reason); the federation
// links (/api/federation-links), when any are configured.

import { h, fmtNum, fmtRate, fmtBytes, table, pill, kv, act, link, go } from './dom.js';
import { latestNode } from './overview.js';
import * as api from './api.js';

const DEFAULT_REASON = 'Closed from the sluice console';
let lastOctets = new Map();   // connection name → { t, recv, send }

// Bytes per second read and written since the last look.
function traffic(conns) {
  const t = Date.now(), next = new Map();
  for (const c of conns) {
    const prev = lastOctets.get(c.name);
    if (prev && t > prev.t) {
      c.recv_rate = (c.recv_oct - prev.recv) * 1000 / (t - prev.t);
      c.send_rate = (c.send_oct - prev.send) * 1000 / (t - prev.t);
    }
    next.set(c.name, { t, recv: c.recv_oct, send: c.send_oct });
  }
  lastOctets = next;
}

// Why a publisher is held: the alarms first (they block every publisher), then its
// vhost's store quota, then the capacity of a queue it publishes to (channel.flow).
export function cause(flowBlocked, held, vhost) {
  const node = latestNode() || {};
  if (node.mem_alarm) return 'memory alarm';
  if (node.disk_free_alarm) return 'disk alarm';
  if ((node.store_quotas || []).some(q => q.alarm && q.vhost === vhost)) return 'store quota';
  if (flowBlocked) return 'queue capacity';
  if (held) return 'not read (flow control)';
  return null;
}

function stateCell(c, channels) {
  const flow = channels.some(ch => ch.connection_details.name === c.name && ch.flow_blocked);
  const why = (flow || c.held) ? cause(flow, c.held, c.vhost) : null;
  return h('span', {}, pill(c.state, c.state === 'running' ? 'ok' : ''), ' ',
    why ? pill((c.held ? 'held: ' : 'flow: ') + why, 'bad') : '');
}

function closeButton(name, reasonInput) {
  return h('button', { class: 'danger close-connection', onclick: async () => {
    if (!confirm('Close connection ' + name + '?')) return;
    const reason = reasonInput.value || DEFAULT_REASON;
    await act('close ' + name, () => {
      // The reason travels in an HTTP header, which a browser refuses outside Latin-1;
      // the broker sends it in connection.close as given.
      if (/[^\x20-\x7e]/.test(reason)) throw new Error('the reason must be printable ASCII (it is sent in the X-Reason header)');
      return api.del('connections/' + api.seg(name), { 'X-Reason': reason });
    });
  } }, 'Close');
}

const clientName = c => (c.client_properties || {}).connection_name || '';

export const connectionsPage = {
  title: 'Connections',
  async render(main) {
    const reason = h('input', { id: 'close-reason', size: 40, value: DEFAULT_REASON });
    const conns = h('div', { id: 'connection-list' }), chans = h('div', { id: 'channel-list' });
    const links = h('div', { id: 'federation-links' });
    main.append(h('h1', {}, 'Connections'),
      h('div', { class: 'pager' }, h('label', {}, 'Reason given to a closed connection ', reason)), conns,
      h('h2', {}, 'Channels'), chans, links);
    return {
      async refresh() {
        const [list, channels, federation] = await Promise.all([api.get('connections'), api.get('channels'),
          api.get('federation-links').catch(() => [])]);
        links.replaceChildren(...(federation.length ? [h('h2', {}, 'Federation links'), table([
          ['exchange', l => l.exchange], ['vhost', l => l.vhost], ['upstream', l => l.upstream],
          ['status', l => pill(l.status, l.status === 'running' ? 'ok' : l.status === 'error' ? 'bad' : 'warn')],
          ['uri', l => l.uri], ['forwarded', l => fmtNum(l.forwarded), { num: true }], ['dropped', l => fmtNum(l.dropped), { num: true }],
          ['reconnects', l => fmtNum(l.reconnects), { num: true }], ['bindings', l => fmtNum(l.bindings), { num: true }],
          ['error', l => l.error || ''],
        ], federation)] : []));
        traffic(list);
        conns.replaceChildren(table([
          ['name', c => h('a', { href: link('connections', c.name) }, c.name)],
          ['client name', clientName],
          ['user', c => c.user], ['vhost', c => c.vhost],
          ['TLS', c => c.ssl ? 'yes' : 'no'],
          ['state', c => stateCell(c, channels)],
          ['channels', c => c.channels, { num: true }],
          ['in', c => c.recv_rate === undefined ? '–' : fmtBytes(c.recv_rate) + '/s', { num: true }],
          ['out', c => c.send_rate === undefined ? '–' : fmtBytes(c.send_rate) + '/s', { num: true }],
          ['shard', c => c.home_shard, { num: true }],
          ['', c => closeButton(c.name, reason)],
        ], list, { onRow: c => go(link('connections', c.name)), empty: 'No connections.' }));
        chans.replaceChildren(channelTable(channels));
      },
    };
  },
};

function channelTable(channels) {
  const rate = (c, f) => ((c.message_stats || {})[f + '_details'] || {}).rate || 0;
  return table([
    ['channel', c => c.name], ['user', c => c.user], ['vhost', c => c.vhost],
    ['state', c => c.flow_blocked ? pill('flow: ' + cause(true, false, c.vhost), 'bad') : pill(c.state, 'ok')],
    ['confirm', c => c.confirm ? 'yes' : 'no'], ['prefetch', c => c.prefetch_count, { num: true }],
    ['consumers', c => c.consumer_count, { num: true }], ['unacked', c => fmtNum(c.messages_unacknowledged), { num: true }],
    ['publish', c => fmtRate(rate(c, 'publish')), { num: true }], ['deliver', c => fmtRate(rate(c, 'deliver_get')), { num: true }],
    ['ack', c => fmtRate(rate(c, 'ack')), { num: true }],
  ], channels, { empty: 'No channels.' });
}

export const connectionPage = {
  title: 'Connection',
  async render(main, { name }) {
    const reason = h('input', { id: 'close-reason', size: 40, value: DEFAULT_REASON });
    const live = h('div', { id: 'connection-live' });
    main.append(h('h1', {}, 'Connection ', name),
      h('div', { class: 'pager' }, h('label', {}, 'Reason ', reason), closeButton(name, reason)), live);
    return {
      async refresh() {
        let c;
        try { c = await api.get('connections/' + api.seg(name)); } catch (e) {
          if (e.status === 404) { live.replaceChildren(h('p', { class: 'muted' }, 'This connection is closed.')); return; }
          throw e;
        }
        const channels = (await api.get('channels')).filter(ch => ch.connection_details.name === name);
        live.replaceChildren(
          kv({ 'client name': clientName(c), user: c.user, vhost: c.vhost, peer: c.peer_host + ':' + c.peer_port,
            local: c.host + ':' + c.port, TLS: c.ssl ? 'yes' : 'no', state: c.state, held: c.held ? 'yes: ' + cause(false, true, c.vhost) : 'no',
            'auth mechanism': c.auth_mechanism, heartbeat: c.timeout + ' s', 'frame max': c.frame_max,
            'bytes read': fmtBytes(c.recv_oct), 'bytes written': fmtBytes(c.send_oct), 'send pending': fmtBytes(c.send_pend),
            'home shard': c.home_shard, 'connected at': new Date(c.connected_at).toISOString() }),
          h('h2', {}, 'Channels'), channelTable(channels),
          h('h2', {}, 'Client properties'), kv(c.client_properties));
      },
    };
  },
};
