// Queues: the paged list (the API's page, page_size, name, use_regex, sort and
// sort_reverse, so 10,000 queues cost one page), declaring one; a queue's page with its
// charts, consumers, bindings, arguments, effective policy, flow state, a stream's log and
// readers with their lag, and purge, delete, get and publish.

import { h, fmtNum, fmtRate, fmtBytes, fmtSecs, table, pill, kv, act, values, field, parseJson, link, go } from './dom.js';
import { History, lineChart } from './chart.js';
import { publishForm } from './exchanges.js';
import * as api from './api.js';

const COLUMNS = 'name,vhost,type,durable,auto_delete,exclusive,messages,messages_ready,messages_unacknowledged,message_bytes,consumers,message_stats,flow,slow_consumer,home_shard,policy';
const rate = (q, f) => ((q.message_stats || {})[f + '_details'] || {}).rate || 0;

export function flowCell(f) {
  if (!f) return h('span', { class: 'muted' }, '–');
  return f.blocked ? pill(`blocked (${fmtNum(f.blocked_publishers)} publishers)`, 'bad') : pill('flowing', 'ok');
}

function declareForm(vhosts, onDone) {
  const form = h('form', { class: 'inline', id: 'declare-queue' },
    field('vhost', h('select', { name: 'vhost' }, vhosts.map(v => h('option', { value: v.name }, v.name)))),
    field('name', h('input', { name: 'name', required: true })),
    field('durable', h('input', { name: 'durable', type: 'checkbox', checked: true })),
    field('auto-delete', h('input', { name: 'auto_delete', type: 'checkbox' })),
    field('arguments (JSON)', h('input', { name: 'arguments', placeholder: '{"x-max-length": 1000}' })),
    h('button', { type: 'submit' }, 'Declare queue'));
  form.addEventListener('submit', async e => {
    e.preventDefault();
    const v = values(form);
    if (await act('declare queue ' + v.name, async () => api.put(`queues/${api.seg(v.vhost)}/${api.seg(v.name)}`,
      { durable: v.durable, auto_delete: v.auto_delete, arguments: parseJson(v.arguments, 'arguments') }))) onDone();
  });
  return form;
}

export const queuesPage = {
  title: 'Queues',
  async render(main, _params, query) {
    const state = { page: Number(query.get('page')) || 1, size: 50, name: query.get('name') || '', regex: false, sort: 'name', reverse: false };
    const list = h('div', { id: 'queue-list' });
    const filter = h('input', { id: 'queue-filter', placeholder: 'filter by name', value: state.name });
    const regex = h('input', { type: 'checkbox' });
    const size = h('select', {}, [20, 50, 100, 500].map(n => h('option', { value: n, selected: n === state.size }, n)));
    let loads = 0;
    const load = async () => {
      const seq = ++loads;
      const page = await api.get('queues?' + api.q({ page: state.page, page_size: state.size, name: state.name,
        use_regex: state.regex ? 'true' : '', sort: state.sort, sort_reverse: state.reverse ? 'true' : '', columns: COLUMNS }));
      // A newer load (the filter changed meanwhile) answers instead.
      if (seq !== loads) return;
      if (page.page_count && state.page > page.page_count) { state.page = page.page_count; return load(); }
      const pager = h('div', { class: 'pager' },
        h('button', { class: 'plain', disabled: state.page <= 1, onclick: () => { state.page--; load(); } }, '‹'),
        `page ${page.page} of ${Math.max(1, page.page_count)} · ${fmtNum(page.filtered_count)} of ${fmtNum(page.total_count)} queues`,
        h('button', { class: 'plain', disabled: state.page >= page.page_count, onclick: () => { state.page++; load(); } }, '›'));
      list.replaceChildren(pager, table([
        ['name', r => h('a', { href: link('queues', r.vhost, r.name) }, r.name), { sort: 'name' }],
        ['vhost', r => r.vhost, { sort: 'vhost' }],
        ['messages', r => fmtNum(r.messages), { num: true, sort: 'messages' }],
        ['ready', r => fmtNum(r.messages_ready), { num: true, sort: 'messages_ready' }],
        ['unacked', r => fmtNum(r.messages_unacknowledged), { num: true, sort: 'messages_unacknowledged' }],
        ['bytes', r => fmtBytes(r.message_bytes), { num: true, sort: 'message_bytes' }],
        ['consumers', r => fmtNum(r.consumers), { num: true, sort: 'consumers' }],
        ['in', r => fmtRate(rate(r, 'publish')), { num: true, sort: 'message_stats.publish_details.rate' }],
        ['out', r => fmtRate(rate(r, 'deliver_get')), { num: true, sort: 'message_stats.deliver_get_details.rate' }],
        ['flow', r => flowCell(r.flow)],
        ['slow consumer', r => r.slow_consumer ? r.slow_consumer.policy : (r.type === 'stream' ? h('span', { class: 'muted' }, 'stream') : '')],
        ['shard', r => r.home_shard, { num: true, sort: 'home_shard' }],
      ], page.items, {
        sorted: state.sort, reverse: state.reverse,
        onSort: key => { state.reverse = state.sort === key ? !state.reverse : false; state.sort = key; load(); },
        onRow: r => go(link('queues', r.vhost, r.name)),
      }));
    };
    let debounce;
    filter.addEventListener('input', () => { clearTimeout(debounce); debounce = setTimeout(() => { state.name = filter.value; state.page = 1; load(); }, 250); });
    regex.addEventListener('change', () => { state.regex = regex.checked; load(); });
    size.addEventListener('change', () => { state.size = Number(size.value); state.page = 1; load(); });
    const vhosts = await api.get('vhosts').catch(() => [{ name: '/' }]);
    main.append(h('h1', {}, 'Queues'),
      h('div', { class: 'pager' }, filter, h('label', {}, regex, ' regex'), h('label', {}, 'per page ', size)),
      list, h('h2', {}, 'Declare a queue'), declareForm(vhosts, load));
    return { refresh: load };
  },
};

function getForm(vhost, name, out) {
  const form = h('form', { class: 'inline', id: 'get-form' },
    field('ack mode', h('select', { name: 'ackmode' },
      h('option', { value: 'ack_requeue_true' }, 'nack, requeue'), h('option', { value: 'ack_requeue_false' }, 'ack (remove)'),
      h('option', { value: 'reject_requeue_true' }, 'reject, requeue'), h('option', { value: 'reject_requeue_false' }, 'reject (remove)'))),
    field('encoding', h('select', { name: 'encoding' }, h('option', { value: 'auto' }, 'auto'), h('option', { value: 'base64' }, 'base64'))),
    field('messages', h('input', { name: 'count', type: 'number', min: 1, value: 1 })),
    h('button', { type: 'submit' }, 'Get messages'));
  form.addEventListener('submit', async e => {
    e.preventDefault();
    const v = values(form);
    await act('get', async () => {
      const got = await api.post(`queues/${api.seg(vhost)}/${api.seg(name)}/get`, { ackmode: v.ackmode, encoding: v.encoding, count: Number(v.count), truncate: 50000 });
      out.replaceChildren(got.length ? got.map((m, i) => h('div', { class: 'card' },
        h('h3', {}, `message ${i + 1}`, m.redelivered ? ' (redelivered)' : ''),
        kv({ exchange: m.exchange, routing_key: m.routing_key, 'remaining in queue': m.message_count, payload_bytes: m.payload_bytes, encoding: m.payload_encoding }),
        h('h3', {}, 'properties'), kv(m.properties), h('pre', { class: 'payload' }, m.payload))) : h('p', { class: 'muted' }, 'The queue is empty.'));
    });
  });
  return form;
}

// A stream's log and its readers, each with its lag behind the committed end and the
// time until retention removes its position (null: not falling behind).
function streamSection(st) {
  const retention = [st.max_length_bytes && fmtBytes(st.max_length_bytes), st.max_age_seconds && fmtSecs(st.max_age_seconds)]
    .filter(Boolean).join(' or ') || 'none';
  return h('div', { id: 'stream' },
    h('h2', {}, 'Stream'),
    kv({ 'offsets': `${fmtNum(st.first_offset)} – ${fmtNum(st.committed_offset)}`, segments: st.segments,
      'on disk': fmtBytes(st.disk_bytes), 'tail cache': fmtBytes(st.tail_cache_bytes), retention,
      'publish rate': fmtRate(st.publish_rate), 'removed by retention': `${fmtNum(st.messages_removed)} messages in ${fmtNum(st.segments_removed)} segments`,
      'tracked consumers': st.tracked_consumers }),
    h('h3', {}, 'Readers'),
    table([
      ['tag', r => r.consumer_tag],
      ['connection', r => h('a', { href: link('connections', r.connection) }, r.connection)],
      ['offset', r => fmtNum(r.offset), { num: true }],
      ['behind', r => fmtNum(r.lag_messages) + ' · ' + fmtBytes(r.lag_bytes), { num: true }],
      ['to retention', r => r.seconds_to_retention === null ? h('span', { class: 'muted' }, 'not falling behind')
        : pill(fmtSecs(r.seconds_to_retention), r.seconds_to_retention < 60 ? 'bad' : 'warn'), { num: true }],
      ['rate', r => fmtRate(r.delivery_rate), { num: true }],
      ['credit', r => r.credit + ' of ' + r.prefetch_count, { num: true }],
      ['tracking', r => r.offset_tracking ? 'yes' : 'no'],
      ['from', r => r.reading_from_disk ? 'disk' : 'memory'],
    ], (st.readers || []).slice().sort((a, b) => b.lag_messages - a.lag_messages), { empty: 'No readers.' }));
}

export const queuePage = {
  title: 'Queue',
  async render(main, { vhost, name }) {
    const path = `queues/${api.seg(vhost)}/${api.seg(name)}`;
    const hist = new History();
    const live = h('div', { id: 'queue-live' });
    const got = h('div', { id: 'got' });
    const actions = h('div', { class: 'pager' },
      h('button', { id: 'purge', onclick: async () => { if (confirm(`Purge every ready message of ${name}?`)) await act('purge', () => api.del(path + '/contents')); } }, 'Purge'),
      h('button', { id: 'delete-queue', class: 'danger', onclick: async () => { if (confirm(`Delete queue ${name}?`) && await act('delete', () => api.del(path))) go('#/queues'); } }, 'Delete'));
    main.append(h('h1', {}, 'Queue ', h('span', { id: 'queue-name' }, name), h('span', { class: 'muted' }, ' in vhost ' + vhost)),
      actions, live,
      h('details', {}, h('summary', {}, 'Get messages'), getForm(vhost, name, got), got),
      h('details', {}, h('summary', {}, 'Publish a message to this queue'), publishForm(vhost, '', name)));
    const refresh = async () => {
      const [q, bindings, consumers] = await Promise.all([api.get(path), api.get(path + '/bindings'), api.get('consumers')]);
      hist.push(Date.now(), q.messages, rate(q, 'publish'), rate(q, 'deliver_get'), rate(q, 'ack'));
      const mine = consumers.filter(c => c.queue && c.queue.vhost === vhost && c.queue.name === name);
      const sc = q.slow_consumer;
      live.replaceChildren(
        h('div', { class: 'card' }, h('div', { class: 'stats' },
          ...[['messages', fmtNum(q.messages), 'q-messages'], ['ready', fmtNum(q.messages_ready)], ['unacked', fmtNum(q.messages_unacknowledged)],
            ['bytes', fmtBytes(q.message_bytes)], ['consumers', fmtNum(q.consumers), 'q-consumers'], ['oldest', fmtSecs(q.oldest_message_age_seconds)],
            ['home shard', q.home_shard], ['discarded', fmtNum(q.discarded)], ['expired', fmtNum(q.expired)],
            ['policy', q.policy || 'none', 'q-policy'], ['durable', q.durable ? 'yes' : 'no'], ['exclusive', q.exclusive ? 'yes' : 'no'], ['auto-delete', q.auto_delete ? 'yes' : 'no']]
            .map(([l, v, id]) => h('div', { class: 'stat', id }, h('b', {}, String(v)), l)))),
        h('div', { class: 'grid' },
          h('div', { class: 'card' }, h('h3', {}, 'Messages in the queue'), lineChart([{ name: 'messages', points: hist.series(0) }], { fmt: fmtNum })),
          h('div', { class: 'card' }, h('h3', {}, 'Messages per second'), lineChart([{ name: 'in', points: hist.series(1) },
            { name: 'delivered', points: hist.series(2) }, { name: 'acked', points: hist.series(3) }], { fmt: fmtRate }))),
        ...(q.stream ? [streamSection(q.stream)] : []),
        h('h2', {}, 'Flow control'),
        q.flow ? kv({ state: q.flow.blocked ? 'blocked: its publishers are stopped' : 'flowing', capacity: fmtBytes(q.flow.capacity),
          'resume below': fmtBytes(q.flow.resume_capacity), 'blocked publishers': q.flow.blocked_publishers }) : h('p', { class: 'muted' }, 'No capacity set.'),
        h('h2', {}, 'Slow-consumer policy'),
        sc ? kv({ policy: sc.policy, 'max count': sc.max_count, 'max depth': sc.max_depth && fmtBytes(sc.max_depth),
          'max age': sc.max_age_seconds && fmtSecs(sc.max_age_seconds), 'min rate': sc.min_rate, 'arrival rate': fmtRate(sc.arrival_rate),
          'consume rate': fmtRate(sc.consume_rate), predicted: sc.predicted_seconds === null ? 'not growing' : fmtSecs(sc.predicted_seconds) + ' to ' + sc.predicted_threshold,
          'headroom (messages)': sc.headroom_messages, 'headroom (bytes)': sc.headroom_bytes, 'headroom (age s)': sc.headroom_age_seconds })
          : h('p', { class: 'muted' }, 'None (not a topic subscription, or no thresholds).'),
        h('h2', {}, 'Consumers'),
        table([['tag', c => c.consumer_tag], ['channel', c => h('a', { href: link('connections', c.channel_details.connection_name) }, c.channel_details.name)],
          ['ack', c => c.ack_required ? 'manual' : 'no-ack'], ['prefetch', c => c.prefetch_count, { num: true }],
          ['unacked', c => fmtNum(c.messages_unacknowledged), { num: true }]], mine),
        h('h2', {}, 'Bindings'),
        table([['from', b => b.source === '' ? '(default exchange)' : h('a', { href: link('exchanges', b.vhost, b.source) }, b.source)],
          ['routing key', b => b.routing_key], ['arguments', b => JSON.stringify(b.arguments || {})]], bindings),
        h('h2', {}, 'Arguments'), kv(q.arguments),
        h('h2', {}, 'Policy'), q.policy ? kv({ policy: q.policy, ...(q.effective_policy_definition || {}) }) : h('p', { class: 'muted' }, 'None.'));
    };
    return { refresh };
  },
};
