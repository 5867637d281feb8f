// Admin: users and their tags, virtual hosts, permissions, vhost and user limits,
// policies, and definitions export and import. Each change is the API call a script
// would make; the API decides who may make it (most need the administrator tag).

import { h, table, act, values, field, parseJson, toast } from './dom.js';
import * as api from './api.js';

const TAGS = ['administrator', 'monitoring', 'policymaker', 'management'];
const tagList = t => Array.isArray(t) ? t.join(', ') : (t || '');

// A section: a title, a live part reloaded by `load`, and forms under it.
function section(id, title, load, ...forms) {
  const body = h('div', { id: id + '-list' }, h('p', { class: 'muted' }, 'Loading…'));
  const reload = async () => {
    try { body.replaceChildren(await load(reload)); } catch (e) {
      body.replaceChildren(h('p', { class: 'error' }, e.status === 404
        ? title + ': this broker does not serve this part of the API yet (404).' : title + ': ' + e.message));
    }
  };
  return { el: h('section', { id, class: 'card' }, h('h2', {}, title), body, ...forms.map(f => f(reload))), reload };
}

function form(id, fields, label, submit) {
  return reload => {
    const f = h('form', { class: 'inline', id }, fields(), h('button', { type: 'submit' }, label));
    f.addEventListener('submit', async e => {
      e.preventDefault();
      if (await act(label, () => submit(values(f)))) { reload(); f.reset(); }
    });
    return f;
  };
}

const delButton = (what, path, reload) => h('button', { class: 'plain', onclick: async () => {
  if (confirm('Delete ' + what + '?') && await act('delete ' + what, () => api.del(path))) reload();
} }, 'Delete');

const users = section('users', 'Users', async reload => table([
  ['name', u => u.name], ['tags', u => tagList(u.tags)],
  ['', u => delButton('user ' + u.name, 'users/' + api.seg(u.name), reload)]], await api.get('users')),
form('add-user', () => [field('name', h('input', { name: 'name', required: true })),
  field('password', h('input', { name: 'password', type: 'password' })),
  field('tags', h('input', { name: 'tags', list: 'tag-names', placeholder: 'administrator, monitoring…' })),
  h('datalist', { id: 'tag-names' }, TAGS.map(t => h('option', { value: t })))],
'Add or update user', v => api.put('users/' + api.seg(v.name), { password: v.password, tags: v.tags })));

const vhosts = section('vhosts', 'Virtual hosts', async reload => table([
  ['name', v => v.name], ['description', v => v.description || ''], ['tags', v => tagList(v.tags)],
  ['', v => v.name === '/' ? '' : delButton('vhost ' + v.name, 'vhosts/' + api.seg(v.name), reload)]], await api.get('vhosts')),
form('add-vhost', () => [field('name', h('input', { name: 'name', required: true })), field('description', h('input', { name: 'description' }))],
  'Add virtual host', v => api.put('vhosts/' + api.seg(v.name), { description: v.description })));

const permissions = section('permissions', 'Permissions', async reload => table([
  ['user', p => p.user], ['vhost', p => p.vhost], ['configure', p => p.configure], ['write', p => p.write], ['read', p => p.read],
  ['', p => delButton(`permissions of ${p.user} on ${p.vhost}`, `permissions/${api.seg(p.vhost)}/${api.seg(p.user)}`, reload)]],
await api.get('permissions')),
form('set-permission', () => [field('user', h('input', { name: 'user', required: true })), field('vhost', h('input', { name: 'vhost', value: '/' })),
  field('configure', h('input', { name: 'configure', value: '.*' })), field('write', h('input', { name: 'write', value: '.*' })),
  field('read', h('input', { name: 'read', value: '.*' }))],
'Set permissions', v => api.put(`permissions/${api.seg(v.vhost)}/${api.seg(v.user)}`, { configure: v.configure, write: v.write, read: v.read })));

const limitRows = (list, key) => list.flatMap(l => Object.entries(l.value || {}).map(([name, value]) => ({ subject: l[key], name, value })));
const limits = section('limits', 'Limits', async reload => {
  const [vl, ul] = await Promise.all([api.get('vhost-limits'), api.get('user-limits').catch(() => [])]);
  const cols = kind => [[kind, r => r.subject], ['limit', r => r.name], ['value', r => r.value, { num: true }],
    ['', r => delButton(`${r.name} of ${r.subject}`, `${kind}-limits/${api.seg(r.subject)}/${api.seg(r.name)}`, reload)]];
  return h('div', {}, h('h3', {}, 'Virtual hosts'), table(cols('vhost'), limitRows(vl, 'vhost')),
    h('h3', {}, 'Users'), table(cols('user'), limitRows(ul, 'user')));
},
form('set-limit', () => [field('for', h('select', { name: 'kind' }, h('option', { value: 'vhost' }, 'vhost'), h('option', { value: 'user' }, 'user'))),
  field('name', h('input', { name: 'subject', required: true })),
  field('limit', h('select', { name: 'limit' }, ['max-connections', 'max-queues', 'max-channels'].map(l => h('option', { value: l }, l)))),
  field('value', h('input', { name: 'value', type: 'number', required: true }))],
'Set limit', v => api.put(`${v.kind}-limits/${api.seg(v.subject)}/${api.seg(v.limit)}`, { value: Number(v.value) })));

const policies = section('policies', 'Policies', async reload => table([
  ['name', p => p.name], ['vhost', p => p.vhost], ['pattern', p => p.pattern], ['apply to', p => p['apply-to']],
  ['priority', p => p.priority, { num: true }], ['definition', p => JSON.stringify(p.definition)],
  ['', p => delButton('policy ' + p.name, `policies/${api.seg(p.vhost)}/${api.seg(p.name)}`, reload)]], await api.get('policies')),
form('set-policy', () => [field('vhost', h('input', { name: 'vhost', value: '/' })), field('name', h('input', { name: 'name', required: true })),
  field('pattern', h('input', { name: 'pattern', required: true, value: '.*' })),
  field('apply to', h('select', { name: 'apply' }, ['queues', 'exchanges', 'all'].map(a => h('option', { value: a }, a)))),
  field('priority', h('input', { name: 'priority', type: 'number', value: 0 })),
  field('definition (JSON)', h('input', { name: 'definition', size: 40, placeholder: '{"max-length": 1000}' }))],
'Set policy', v => api.put(`policies/${api.seg(v.vhost)}/${api.seg(v.name)}`, { pattern: v.pattern, 'apply-to': v.apply,
  priority: Number(v.priority), definition: parseJson(v.definition, 'definition') })));

function definitions() {
  const exportButton = h('button', { id: 'export-definitions', onclick: () => act('export definitions', async () => {
    const defs = await api.get('definitions');
    const url = URL.createObjectURL(new Blob([JSON.stringify(defs, null, 2)], { type: 'application/json' }));
    const a = h('a', { href: url, download: 'sluice-definitions.json' });
    document.body.append(a); a.click(); a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  }) }, 'Export definitions');
  const file = h('input', { type: 'file', accept: 'application/json,.json' });
  const text = h('textarea', { id: 'import-text', placeholder: 'definitions JSON (or choose a file)' });
  file.addEventListener('change', async () => { if (file.files[0]) text.value = await file.files[0].text(); });
  const importButton = h('button', { id: 'import-definitions', onclick: async () => {
    let body;
    try { body = parseJson(text.value, 'definitions'); } catch (e) { toast(e.message, true); return; }
    if (await act('import definitions', () => api.post('definitions', body))) { text.value = ''; reloadAll(); }
  } }, 'Import definitions');
  return h('section', { class: 'card', id: 'definitions' }, h('h2', {}, 'Definitions'),
    h('p', { class: 'muted' }, 'Users, vhosts, permissions, limits, policies, exchanges, queues and bindings as one JSON document (RabbitMQ\'s format).'),
    exportButton, h('h3', {}, 'Import'), file, text, importButton);
}

const SECTIONS = [users, vhosts, permissions, limits, policies];
const reloadAll = () => SECTIONS.forEach(s => s.reload());

export const adminPage = {
  title: 'Admin',
  async render(main) {
    main.append(h('h1', {}, 'Admin'), h('div', { class: 'grid' }, SECTIONS.map(s => s.el), definitions()));
    reloadAll();
    // Changes show at once (each form reloads its section); nothing here polls.
    return {};
  },
};
