// Exchanges and bindings: the paged list, declaring and deleting an exchange, its
// bindings from and to it, binding and unbinding, and publishing to it.

import { h, fmtNum, fmtRate, table, act, values, field, parseJson, kv, link, go } from './dom.js';
import * as api from './api.js';

const exName = n => n === '' ? '(default exchange)' : n;
const exPath = (vhost, name) => `exchanges/${api.seg(vhost)}/${api.seg(name === '' ? 'amq.default' : name)}`;

// A form publishing one message through `exchange` (the default exchange when '').
export function publishForm(vhost, exchange, routingKey) {
  const form = h('form', { class: 'stack publish-form' },
    field('routing key', h('input', { name: 'routing_key', value: routingKey || '' })),
    field('persistent', h('input', { name: 'persistent', type: 'checkbox' })),
    field('headers (JSON)', h('input', { name: 'headers', placeholder: '{"k": "v"}' })),
    field('payload', h('textarea', { name: 'payload' })),
    h('button', { type: 'submit' }, 'Publish'));
  form.addEventListener('submit', async e => {
    e.preventDefault();
    const v = values(form);
    await act('publish', async () => {
      const properties = { delivery_mode: v.persistent ? 2 : 1 };
      const headers = parseJson(v.headers, 'headers');
      if (Object.keys(headers).length) properties.headers = headers;
      const r = await api.post(exPath(vhost, exchange) + '/publish',
        { properties, routing_key: v.routing_key, payload: v.payload, payload_encoding: 'string' });
      if (!r.routed) throw new Error('published, but routed to no queue');
    });
  });
  return form;
}

export const exchangesPage = {
  title: 'Exchanges',
  async render(main) {
    const list = h('div', { id: 'exchange-list' });
    const filter = h('input', { placeholder: 'filter by name' });
    const state = { page: 1, name: '' };
    let loads = 0;
    const load = async () => {
      const seq = ++loads;
      const page = await api.get('exchanges?' + api.q({ page: state.page, page_size: 100, name: state.name }));
      // A newer load (the filter changed meanwhile) answers instead.
      if (seq !== loads) return;
      list.replaceChildren(h('div', { class: 'pager' },
        h('button', { class: 'plain', disabled: state.page <= 1, onclick: () => { state.page--; load(); } }, '‹'),
        `page ${page.page} of ${Math.max(1, page.page_count)} · ${fmtNum(page.filtered_count)} exchanges`,
        h('button', { class: 'plain', disabled: state.page >= page.page_count, onclick: () => { state.page++; load(); } }, '›')),
      table([
        ['name', x => h('a', { href: link('exchanges', x.vhost, x.name) }, exName(x.name))], ['vhost', x => x.vhost],
        ['type', x => x.type], ['durable', x => x.durable ? 'yes' : 'no'], ['internal', x => x.internal ? 'yes' : 'no'],
        ['in', x => fmtRate(((x.message_stats || {}).publish_in_details || {}).rate || 0), { num: true }],
        ['out', x => fmtRate(((x.message_stats || {}).publish_out_details || {}).rate || 0), { num: true }],
      ], page.items, { onRow: x => go(link('exchanges', x.vhost, x.name)) }));
    };
    let debounce;
    filter.addEventListener('input', () => { clearTimeout(debounce); debounce = setTimeout(() => { state.name = filter.value; state.page = 1; load(); }, 250); });
    const vhosts = await api.get('vhosts').catch(() => [{ name: '/' }]);
    const form = h('form', { class: 'inline', id: 'declare-exchange' },
      field('vhost', h('select', { name: 'vhost' }, vhosts.map(v => h('option', { value: v.name }, v.name)))),
      field('name', h('input', { name: 'name', required: true })),
      field('type', h('select', { name: 'type' }, ['direct', 'fanout', 'topic', 'headers'].map(t => h('option', { value: t }, t)))),
      field('durable', h('input', { name: 'durable', type: 'checkbox', checked: true })),
      field('auto-delete', h('input', { name: 'auto_delete', type: 'checkbox' })),
      field('internal', h('input', { name: 'internal', type: 'checkbox' })),
      field('arguments (JSON)', h('input', { name: 'arguments' })),
      h('button', { type: 'submit' }, 'Declare exchange'));
    form.addEventListener('submit', async e => {
      e.preventDefault();
      const v = values(form);
      if (await act('declare exchange ' + v.name, () => api.put(exPath(v.vhost, v.name), { type: v.type, durable: v.durable,
        auto_delete: v.auto_delete, internal: v.internal, arguments: parseJson(v.arguments, 'arguments') }))) load();
    });
    main.append(h('h1', {}, 'Exchanges'), h('div', { class: 'pager' }, filter), list, h('h2', {}, 'Declare an exchange'), form);
    return { refresh: load };
  },
};

function unbind(b) {
  const kind = b.destination_type === 'exchange' ? 'e' : 'q';
  return act('unbind', () => api.del(`bindings/${api.seg(b.vhost)}/e/${api.seg(b.source)}/${kind}/${api.seg(b.destination)}/${api.seg(b.properties_key)}`));
}

export const exchangePage = {
  title: 'Exchange',
  async render(main, { vhost, name }) {
    const path = exPath(vhost, name);
    const live = h('div', { id: 'exchange-live' });
    const form = h('form', { class: 'inline', id: 'bind-form' },
      field('to', h('select', { name: 'kind' }, h('option', { value: 'q' }, 'queue'), h('option', { value: 'e' }, 'exchange'))),
      field('destination', h('input', { name: 'destination', required: true })),
      field('routing key', h('input', { name: 'routing_key' })),
      field('arguments (JSON)', h('input', { name: 'arguments' })),
      h('button', { type: 'submit' }, 'Bind'));
    const rows = [];
    const refresh = async () => {
      const [x, from, to] = await Promise.all([api.get(path), api.get(path + '/bindings/source'), api.get(path + '/bindings/destination')]);
      rows.length = 0;
      const cols = [['from', b => exName(b.source)], ['to', b => b.destination_type === 'queue'
        ? h('a', { href: link('queues', b.vhost, b.destination) }, b.destination) : h('a', { href: link('exchanges', b.vhost, b.destination) }, b.destination)],
      ['type', b => b.destination_type], ['routing key', b => b.routing_key], ['arguments', b => JSON.stringify(b.arguments || {})],
      ['', b => h('button', { class: 'plain', onclick: async () => { if (await unbind(b)) refresh(); } }, 'Unbind')]];
      live.replaceChildren(kv({ type: x.type, durable: x.durable, auto_delete: x.auto_delete, internal: x.internal, policy: x.policy || '' }),
        h('h2', {}, 'Arguments'), kv(x.arguments),
        h('h2', {}, 'Bindings from this exchange'), table(cols, from),
        h('h2', {}, 'Bindings to this exchange'), table(cols, to));
    };
    form.addEventListener('submit', async e => {
      e.preventDefault();
      const v = values(form);
      if (await act('bind', () => api.post(`bindings/${api.seg(vhost)}/e/${api.seg(name)}/${v.kind}/${api.seg(v.destination)}`,
        { routing_key: v.routing_key, arguments: parseJson(v.arguments, 'arguments') }))) refresh();
    });
    // h() leaves out the parts that do not apply (null); DOM append would print them.
    main.append(h('div', {}, h('h1', {}, 'Exchange ', exName(name), h('span', { class: 'muted' }, ' in vhost ' + vhost)),
      name === '' || name.startsWith('amq.') ? null : h('button', { class: 'danger', id: 'delete-exchange', onclick: async () => {
        if (confirm('Delete exchange ' + name + '?') && await act('delete', () => api.del(path))) go('#/exchanges');
      } }, 'Delete'),
      live, name === '' ? null : h('div', {}, h('h2', {}, 'Add a binding'), form),
      h('h2', {}, 'Publish a message'), publishForm(vhost, name, '')));
    return { refresh };
  },
};
