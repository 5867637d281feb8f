// Subscriptions at risk: the queues under a slow-consumer policy (topic subscriptions),
// sorted by the broker's predicted seconds until a threshold fires, then by the least
// headroom left; and the streams whose readers lag, those with readers about to fall off
// retention first. Everything shown is each queue's `slow_consumer` and `stream` objects
// in /api/queues.

import { h, fmtNum, fmtRate, fmtBytes, fmtSecs, table, pill, link, go } from './dom.js';
import * as api from './api.js';

const COLUMNS = 'name,vhost,type,messages,message_bytes,consumers,oldest_message_age_seconds,discarded,slow_consumer,stream';

// The smallest share of a threshold still free (1 = nothing used, 0 = at the limit).
function headroomShare(sc, q) {
  const shares = [];
  if (sc.max_count) shares.push(sc.headroom_messages / sc.max_count);
  if (sc.max_depth) shares.push(sc.headroom_bytes / sc.max_depth);
  if (sc.max_age_seconds) shares.push(sc.headroom_age_seconds / sc.max_age_seconds);
  if (sc.min_rate && q.consumers) shares.push(Math.min(1, sc.consume_rate / sc.min_rate));
  return shares.length ? Math.min(...shares) : 1;
}

export function atRisk(queues) {
  const rows = queues.filter(q => q.slow_consumer).map(q => ({ ...q, share: headroomShare(q.slow_consumer, q) }));
  rows.sort((a, b) => {
    const pa = a.slow_consumer.predicted_seconds, pb = b.slow_consumer.predicted_seconds;
    if (pa !== null && pb !== null && pa !== pb) return pa - pb;
    if ((pa === null) !== (pb === null)) return pa === null ? 1 : -1;
    return a.share - b.share;
  });
  return rows;
}

function limits(sc) {
  return [sc.max_count && 'count ' + fmtNum(sc.max_count), sc.max_depth && 'depth ' + fmtBytes(sc.max_depth),
    sc.max_age_seconds && 'age ' + fmtSecs(sc.max_age_seconds), sc.min_rate && 'rate ≥ ' + fmtRate(sc.min_rate)]
    .filter(Boolean).join(', ');
}

function view(rows, total) {
  return h('div', {},
    h('p', { class: 'muted' }, `${rows.length} of ${total} queues have a slow-consumer policy; the closest to a threshold first.`),
    table([
      ['queue', q => h('a', { href: link('queues', q.vhost, q.name) }, q.name)],
      ['vhost', q => q.vhost],
      ['predicted', q => {
        const sc = q.slow_consumer;
        if (sc.predicted_seconds === null) return h('span', { class: 'muted' }, 'not growing');
        // A ring at its threshold discards its oldest as each message arrives.
        if (sc.policy === 'cycle' && sc.predicted_seconds === 0) return pill('cycling at ' + sc.predicted_threshold, 'warn');
        return pill(fmtSecs(sc.predicted_seconds) + ' → ' + sc.predicted_threshold, sc.predicted_seconds < 60 ? 'bad' : 'warn');
      }, { num: true }],
      ['headroom', q => (q.share * 100).toFixed(0) + '%', { num: true }],
      ['messages', q => fmtNum(q.messages), { num: true }],
      ['depth', q => fmtBytes(q.message_bytes), { num: true }],
      ['oldest', q => fmtSecs(q.oldest_message_age_seconds), { num: true }],
      ['consumed / arriving', q => fmtRate(q.slow_consumer.consume_rate) + ' / ' + fmtRate(q.slow_consumer.arrival_rate), { num: true }],
      ['policy', q => pill(q.slow_consumer.policy, q.slow_consumer.policy === 'delete' ? 'bad' : 'warn')],
      ['thresholds', q => limits(q.slow_consumer)],
      ['discarded', q => fmtNum(q.discarded), { num: true }],
    ], rows.slice(0, 200), { onRow: q => go(link('queues', q.vhost, q.name)), empty: 'No queue has a slow-consumer policy.' }));
}

// Streams with readers: the ones with readers predicted to fall off retention first,
// then by the largest lag. A stream's slow reader holds no memory (the log is on disk):
// its risk is losing its position.
export function streamsAtRisk(queues) {
  return queues.filter(q => q.type === 'stream' && q.stream && q.stream.reader_count > 0)
    .sort((a, b) => (b.stream.readers_falling - a.stream.readers_falling) || (b.stream.max_lag_messages - a.stream.max_lag_messages));
}

function streamView(rows) {
  return h('div', { id: 'stream-risk' },
    h('h2', {}, 'Stream readers'),
    h('p', { class: 'muted' }, 'Streams by readers falling behind retention, then by the largest lag; open a stream for each reader.'),
    table([
      ['stream', q => h('a', { href: link('queues', q.vhost, q.name) }, q.name)],
      ['vhost', q => q.vhost],
      ['readers', q => fmtNum(q.stream.reader_count), { num: true }],
      ['falling behind retention', q => q.stream.readers_falling ? pill(fmtNum(q.stream.readers_falling), 'bad') : '0', { num: true }],
      ['largest lag', q => fmtNum(q.stream.max_lag_messages), { num: true }],
      ['log', q => fmtNum(q.stream.committed_offset - q.stream.first_offset) + ' · ' + fmtBytes(q.stream.disk_bytes), { num: true }],
      ['retention', q => [q.stream.max_length_bytes && fmtBytes(q.stream.max_length_bytes), q.stream.max_age_seconds && fmtSecs(q.stream.max_age_seconds)].filter(Boolean).join(' or ') || 'none'],
    ], rows.slice(0, 200), { onRow: q => go(link('queues', q.vhost, q.name)), empty: 'No stream has readers.' }));
}

export const riskPage = {
  title: 'Subscriptions at risk',
  async render(main) {
    const body = h('div', { id: 'risk' }, h('p', { class: 'muted' }, 'Loading…'));
    main.append(h('h1', {}, 'Subscriptions at risk'), body);
    return {
      async refresh() {
        const queues = await api.get('queues?' + api.q({ columns: COLUMNS }));
        const streams = streamsAtRisk(queues);
        body.replaceChildren(view(atRisk(queues), queues.length), ...(streams.length ? [streamView(streams)] : []));
      },
    };
  },
};
