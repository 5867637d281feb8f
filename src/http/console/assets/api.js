// The management API, as a script would call it: HTTP basic auth on every request, the
// credentials kept in this tab's sessionStorage only (gone when the tab closes), never a
// cookie. X-Requested-With asks the broker not to answer 401 with a browser login dialog.

const KEY = 'sluice.auth';
let onLoggedOut = () => {};

export function setLogoutHandler(fn) { onLoggedOut = fn; }
export function credentials() { return sessionStorage.getItem(KEY); }
export function userName() {
  const c = credentials();
  if (!c) return null;
  try { return new TextDecoder().decode(Uint8Array.from(atob(c), ch => ch.charCodeAt(0))).split(':')[0]; }
  catch { return null; }
}

function encode(user, password) {
  const bytes = new TextEncoder().encode(user + ':' + password);
  return btoa(String.fromCharCode(...bytes));
}

export class ApiError extends Error {
  constructor(status, reason) { super(reason); this.status = status; }
}

async function call(method, path, body, headers, auth) {
  const init = { method, headers: { 'X-Requested-With': 'XMLHttpRequest', ...headers }, cache: 'no-store', credentials: 'omit' };
  init.headers.Authorization = 'Basic ' + auth;
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
  }
  const r = await fetch(path.startsWith('/') ? path : '/api/' + path, init);
  const text = await r.text();
  if (r.ok && !(r.headers.get('Content-Type') || '').includes('json')) return text;
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = text; }
  if (!r.ok) {
    const reason = (data && (data.reason || data.error)) || r.statusText || ('HTTP ' + r.status);
    throw new ApiError(r.status, typeof reason === 'string' ? reason : JSON.stringify(reason));
  }
  return data;
}

// Logs in: whoami with these credentials; kept only when it answers.
export async function login(user, password) {
  const auth = encode(user, password);
  const me = await call('GET', 'whoami', undefined, {}, auth);
  sessionStorage.setItem(KEY, auth);
  return me;
}

export function logout() { sessionStorage.removeItem(KEY); }

export async function api(method, path, body, headers = {}) {
  const auth = credentials();
  if (!auth) { onLoggedOut(); throw new ApiError(401, 'not logged in'); }
  try {
    return await call(method, path, body, headers, auth);
  } catch (e) {
    // The password changed or the user was deleted: back to the login page (a 401 for
    // a missing tag keeps the session).
    if (e.status === 401 && /user name or password|credentials needed/.test(e.message)) { logout(); onLoggedOut(); }
    throw e;
  }
}

export const get = path => api('GET', path);
export const put = (path, body) => api('PUT', path, body ?? {});
export const post = (path, body) => api('POST', path, body ?? {});
export const del = (path, headers) => api('DELETE', path, undefined, headers);

// One path segment (the vhost "/" is %2F).
export const seg = encodeURIComponent;
export const q = params => Object.entries(params)
  .filter(([, v]) => v !== undefined && v !== null && v !== '')
  .map(([k, v]) => seg(k) + '=' + seg(v)).join('&');
