// idemkit operator console. Plain DOM, no framework: the page runs under a
// strict CSP (no inline script or style), and every record field (key,
// tenant, operation, body...) is attacker-controlled, so text only ever
// reaches the page through textContent or attribute values, never as markup.
'use strict';
(() => {
  const metaContent = (name) => (document.querySelector(`meta[name="${name}"]`) || {}).content || '';
  const CSRF = metaContent('csrf-token');
  const view = document.getElementById('view');
  const appError = document.getElementById('app-error');
  const PAGE_SIZE = 50;
  const REFRESH_MS = 10000;
  // The newest audit entries a view reads (the detail view asks for its
  // record's only).
  const AUDIT_LIMIT = 500;
  const VIEWS = [['attention', 'Needs attention'], ['all', 'All records'], ['unknown', 'Unknown'],
    ['running', 'Running'], ['completed', 'Completed'], ['released', 'Released']];
  const OUTCOMES = ['execute', 'replay', 'in_flight', 'mismatch', 'uncertain', 'response_expired'];

  // DOM helpers
  function setAttrs(el, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v == null || v === false) continue;
      if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    setAttrs(el, attrs);
    el.append(...kids.flat(2).filter((k) => k != null && k !== false).map((k) => (k instanceof Node ? k : String(k))));
    return el;
  }
  function svg(tag, attrs, ...kids) {
    const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
    setAttrs(el, attrs);
    el.append(...kids);
    return el;
  }
  const dash = () => h('span', { class: 'muted' }, '—');
  // Control and bidi characters in a key could make it read as something
  // else; show such values escaped so the operator sees what is stored.
  const SUSPICIOUS = /[\u0000-\u001f\u007f-\u009f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]/g;
  function code(value, cls) {
    if (value == null || value === '') return dash();
    const s = String(value);
    if (s.search(SUSPICIOUS) >= 0) {
      const shown = s.replace(/\\/g, '\\\\').replace(SUSPICIOUS, (c) => `\\u{${c.charCodeAt(0).toString(16)}}`);
      return h('code', { class: `${cls || ''} escaped`, title: 'Shown escaped: contains control or direction characters' }, shown);
    }
    return h('code', { class: cls, title: s }, s);
  }
  function badge(state) {
    return h('span', { class: `badge badge-${/^[a-z_]+$/.test(state) ? state : 'other'}` }, state);
  }
  // Tables scroll sideways on their own rather than widening the page.
  function table(attrs, cols, rows) {
    return h('div', { class: 'table-wrap' }, h('table', attrs,
      h('thead', null, h('tr', null, cols.map((t) => h('th', { scope: 'col' }, t)))), h('tbody', null, rows)));
  }

  // Formatting
  const pad = (n) => String(n).padStart(2, '0');
  function fmtTime(ms) {
    if (ms == null) return '—';
    const d = new Date(ms);
    if (Number.isNaN(d.getTime())) return String(ms);
    const off = -d.getTimezoneOffset();
    const a = Math.abs(off);
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())} ${off < 0 ? '-' : '+'}${pad(Math.floor(a / 60))}:${pad(a % 60)}`;
  }
  function fmtClock(ms) {
    const d = new Date(ms);
    return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }
  function fmtAge(ms) {
    if (ms == null || !Number.isFinite(ms)) return '—';
    const s = Math.max(0, ms) / 1000;
    if (s < 60) return `${Math.floor(s)} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min`;
    if (s < 172800) return `${Math.floor(s / 3600)} h`;
    return `${Math.floor(s / 86400)} d`;
  }
  // Windows are configured values: show them exactly when a unit fits.
  function fmtSpan(ms) {
    if (ms == null) return '—';
    for (const [u, n] of [[86400000, 'd'], [3600000, 'h'], [60000, 'min'], [1000, 's']]) {
      if (ms >= u) return `${ms % u === 0 ? ms / u : +(ms / u).toFixed(1)} ${n}`;
    }
    return `${ms} ms`;
  }
  // Ages come from the server's clock (now = since_ms + age_ms), not the browser's.
  function relative(at, now) {
    if (at == null || now == null) return '';
    const d = now - at;
    return d >= 0 ? `${fmtAge(d)} ago` : `in ${fmtAge(-d)}`;
  }
  function timeWithAge(at, now) {
    if (at == null) return dash();
    const rel = relative(at, now);
    return h('span', null, h('time', { datetime: new Date(at).toISOString() }, fmtTime(at)), rel ? h('span', { class: 'muted' }, ` (${rel})`) : null);
  }

  // API
  class ApiError extends Error {
    constructor(status, message, body) { super(message); this.status = status; this.body = body; }
  }
  let leaving = false;
  function toLogin() {
    leaving = true;
    clearTimeout(timer);
    location.assign('/console/login');
  }
  async function api(path, method = 'GET', body) {
    const headers = { Accept: 'application/json' };
    if (method !== 'GET') { headers['X-CSRF-Token'] = CSRF; headers['Content-Type'] = 'application/json'; }
    let res;
    try {
      res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: 'same-origin', cache: 'no-store' });
    } catch (e) {
      throw new ApiError(0, `The console server did not answer (${e.message}).`, null);
    }
    if (res.status === 401) { toLogin(); throw new ApiError(401, 'Your session ended.', null); }
    if (res.status === 204) return null;
    let data = null;
    try { data = await res.json(); } catch (_) { /* a proxy's HTML error page, say */ }
    if (!res.ok) throw new ApiError(res.status, (data && typeof data.error === 'string' && data.error) || `HTTP ${res.status}`, data);
    if (data === null) throw new ApiError(res.status, 'The server answered something that is not JSON.', null);
    return data;
  }
  const enc = encodeURIComponent;
  // A 401 already sent the browser to the login page; saying more would flash.
  const errorFor = (e, prefix) => (e.status === 401 || leaving ? null : h('p', { class: 'error', role: 'alert' }, prefix + e.message));

  function showAppError(message) {
    appError.textContent = message;
    appError.hidden = !message;
  }

  // Routing
  let gen = 0; // bumped on every navigation so late answers for an old view are dropped
  let timer = null;
  let lastListHash = '#/';
  let flash = null; // a message that survives the re-render after a resolve

  function go(hash) {
    if (location.hash === hash || (hash === '#/' && !location.hash)) route();
    else location.hash = hash;
  }
  function route() {
    if (leaving) return;
    const g = ++gen;
    clearTimeout(timer);
    showAppError('');
    const raw = location.hash.replace(/^#/, '') || '/';
    const qi = raw.indexOf('?');
    const path = qi < 0 ? raw : raw.slice(0, qi);
    const params = new URLSearchParams(qi < 0 ? '' : raw.slice(qi + 1));
    let current = '';
    if (path.startsWith('/record/')) {
      renderDetail(decodeURIComponent(path.slice(8)), g);
    } else if (path === '/audit') {
      current = 'audit';
      renderAudit(g);
    } else {
      lastListHash = location.hash || '#/';
      const q = params.toString();
      current = q === '' ? 'attention' : q === 'view=all' ? 'all' : '';
      renderList(params, g);
    }
    for (const a of document.querySelectorAll('[data-nav]')) {
      if (a.dataset.nav === current) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
  }

  // List
  const seen = { operations: new Set(), tenants: new Set() };

  function listHash(f) {
    const q = new URLSearchParams();
    if (f.view && f.view !== 'attention') q.set('view', f.view);
    for (const k of ['operation', 'tenant', 'q', 'after']) if (f[k]) q.set(k, f[k]);
    const s = q.toString();
    return `#/${s ? `?${s}` : ''}`;
  }

  function renderList(params, g) {
    const f = { view: params.get('view') || 'attention' };
    for (const k of ['operation', 'tenant', 'q', 'after']) f[k] = params.get(k) || '';

    const viewSel = h('select', { id: 'filter-view', name: 'view' },
      VIEWS.map(([v, label]) => h('option', { value: v, selected: v === f.view }, label)));
    if (!VIEWS.some(([v]) => v === f.view)) viewSel.append(h('option', { value: f.view, selected: true }, f.view));
    const opIn = h('input', { id: 'filter-operation', name: 'operation', list: 'operations-seen', autocomplete: 'off', placeholder: 'any', value: f.operation });
    const tenantIn = h('input', { id: 'filter-tenant', name: 'tenant', list: 'tenants-seen', autocomplete: 'off', placeholder: 'any', value: f.tenant });
    const searchIn = h('input', { id: 'search', name: 'q', type: 'search', autocomplete: 'off', placeholder: 'log ref or idempotency key', value: f.q });
    const opList = h('datalist', { id: 'operations-seen' });
    const tenantList = h('datalist', { id: 'tenants-seen' });
    const apply = () => go(listHash({ view: viewSel.value, operation: opIn.value.trim(), tenant: tenantIn.value.trim(), q: searchIn.value.trim() }));
    const form = h('form', { class: 'filters', role: 'search', onsubmit: (e) => { e.preventDefault(); apply(); } },
      h('label', null, 'State ', viewSel),
      h('label', null, 'Operation ', opIn), opList,
      h('label', null, 'Tenant ', tenantIn), tenantList,
      h('label', { class: 'grow' }, 'Search ', searchIn),
      h('button', { id: 'search-go', type: 'submit' }, 'Search'),
      h('button', { type: 'button', class: 'secondary', onclick: () => go('#/') }, 'Clear'));
    viewSel.addEventListener('change', apply);

    const status = h('p', { class: 'muted small', 'aria-live': 'polite' });
    const charts = h('section', { class: 'charts', 'aria-label': 'Activity' });
    const results = h('div', { id: 'list-results' }, h('p', { class: 'muted' }, 'Loading…'));
    view.replaceChildren(h('h2', { tabindex: '-1' }, (VIEWS.find(([v]) => v === f.view) || [0, f.view])[1]), form, charts, status, results);

    const fillSeen = (set, list, values) => {
      for (const v of values || []) if (typeof v === 'string') set.add(v);
      list.replaceChildren(...[...set].sort().map((v) => h('option', { value: v })));
    };
    fillSeen(seen.operations, opList);
    fillSeen(seen.tenants, tenantList);

    const refresh = async () => {
      if (document.hidden) { timer = setTimeout(refresh, REFRESH_MS); return; }
      const qs = new URLSearchParams({ view: f.view, limit: String(PAGE_SIZE) });
      for (const k of ['operation', 'tenant', 'q', 'after']) if (f[k]) qs.set(k, f[k]);
      const [rec, met] = await Promise.allSettled([api(`/console/api/records?${qs}`), api('/console/api/metrics')]);
      if (g !== gen) return;
      if (rec.status === 'fulfilled') {
        const data = rec.value;
        fillSeen(seen.operations, opList, data.operations);
        fillSeen(seen.tenants, tenantList, data.tenants);
        results.replaceChildren(recordTable(data.records || [], f), pager(f, data.next));
        status.textContent = `Updated ${fmtClock(Date.now())} · refreshes every ${REFRESH_MS / 1000} s`;
      } else {
        const err = errorFor(rec.reason, 'Could not load records: ');
        if (err) results.replaceChildren(err);
      }
      if (met.status === 'fulfilled') charts.replaceChildren(...drawCharts(met.value));
      else charts.replaceChildren(errorFor(met.reason, 'Could not load metrics: ') || '');
      timer = setTimeout(refresh, REFRESH_MS);
    };
    refresh();
  }

  function recordTable(records, f) {
    if (!records.length) {
      const what = f.view === 'attention' && !f.operation && !f.tenant && !f.q
        ? 'Nothing needs attention: no Unknown records, no Running records past their lease.'
        : 'No records match these filters.';
      return h('p', { id: 'empty-state', class: 'empty' }, what);
    }
    return table({ id: 'records' }, ['State', 'Age', 'Tenant', 'Operation', 'Log ref', 'Attempt', 'Steps', 'Told'], records.map(recordRow));
  }

  function recordRow(r) {
    const href = `#/record/${enc(r.id)}`;
    const stateCell = h('td', null, badge(r.state));
    if (r.lease && r.lease.expired && r.state === 'running') stateCell.append(' ', h('span', { class: 'badge badge-expired' }, 'lease expired'));
    if (r.reason) stateCell.append(h('div', { class: 'muted small' }, r.reason));
    const tr = h('tr', { class: 'record-row', 'data-log-ref': r.log_ref, 'data-id': r.id, 'data-state': r.state },
      stateCell,
      h('td', { class: 'num', title: `since ${fmtTime(r.since_ms)}` }, fmtAge(r.age_ms)),
      h('td', null, code(r.tenant)),
      h('td', null, code(r.operation)),
      h('td', null, h('a', { href }, code(r.log_ref))),
      h('td', { class: 'num' }, String(r.attempt ?? '—')),
      h('td', null, stepsCompact(r.steps)),
      h('td', null, told(r.told)));
    tr.addEventListener('click', (e) => { if (!e.target.closest('a') && !String(getSelection())) location.hash = href; });
    return tr;
  }

  function stepsCompact(steps) {
    if (!steps || !steps.length) return dash();
    return h('ul', { class: 'steps' }, steps.map((s) => h('li', { class: `step step-${/^[a-z]+$/.test(s.state) ? s.state : 'other'}`, title: s.state },
      h('span', { class: 'step-mark' }, s.state === 'done' ? '✓' : s.state === 'failed' ? '✗' : '…'), ' ',
      s.name, ' ', code(s.provider_key, 'clip'), s.provider_ref ? [' → ', code(s.provider_ref, 'clip')] : null)));
  }

  function told(t) {
    if (!t) return dash();
    return h('span', { title: t.detail || '' }, h('b', null, String(t.status)), ' ', t.problem || '');
  }

  function pager(f, next) {
    const nav = h('div', { class: 'pager' });
    if (f.after) nav.append(h('button', { type: 'button', class: 'secondary', onclick: () => go(listHash({ ...f, after: '' })) }, 'First page'));
    if (next) nav.append(h('button', { id: 'next-page', type: 'button', onclick: () => go(listHash({ ...f, after: next })) }, 'Next page'));
    return nav;
  }

  // Charts
  function drawCharts(m) {
    const samples = (m.samples || []).slice().sort((a, b) => a.at_ms - b.at_ms);
    const every = m.interval_ms ? fmtSpan(m.interval_ms) : 'interval';
    // Claims are counters since start: chart what each interval added. A
    // drop means the server restarted, and then the value itself is the delta.
    const claims = OUTCOMES.map((o) => ({
      name: o,
      points: samples.slice(1).map((s, i) => {
        const cur = (s.claims || {})[o] || 0;
        const prev = (samples[i].claims || {})[o] || 0;
        return [s.at_ms, cur >= prev ? cur - prev : cur];
      }),
    }));
    const gauges = ['unknown', 'unresolved'].map((k) => ({ name: k, points: samples.map((s) => [s.at_ms, s[k] || 0]) }));
    return [
      chartBox('chart-claims', `Claims per ${every}`, claims, samples.length >= 2),
      chartBox('chart-unknown', 'Unknown and unresolved records', gauges, samples.length >= 2),
    ];
  }

  function niceMax(v) {
    if (v <= 1) return 1;
    const p = 10 ** Math.floor(Math.log10(v));
    return [1, 2, 5, 10].map((k) => k * p).find((x) => x >= v);
  }

  function chartBox(id, title, series, ready) {
    const W = 480, H = 140, L = 34, R = 8, T = 8, B = 18;
    const el = svg('svg', { id, class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': title });
    el.append(svg('title', null, title), svg('rect', { class: 'frame', x: L, y: T, width: W - L - R, height: H - T - B }));
    const legend = h('ul', { class: 'legend' });
    if (!ready) {
      el.append(svg('text', { class: 'collecting', x: (W + L) / 2, y: H / 2, 'text-anchor': 'middle' }, 'collecting…'));
    } else {
      const all = series.flatMap((s) => s.points);
      const t0 = Math.min(...all.map((p) => p[0]));
      const t1 = Math.max(...all.map((p) => p[0]));
      const vmax = niceMax(Math.max(0, ...all.map((p) => p[1])));
      const x = (t) => (L + ((t - t0) / (t1 - t0 || 1)) * (W - L - R)).toFixed(1);
      const y = (v) => (T + (1 - v / vmax) * (H - T - B)).toFixed(1);
      el.append(
        svg('text', { class: 'axis', x: L - 4, y: T + 8, 'text-anchor': 'end' }, String(vmax)),
        svg('text', { class: 'axis', x: L - 4, y: H - B, 'text-anchor': 'end' }, '0'),
        svg('text', { class: 'axis', x: L, y: H - 4 }, fmtClock(t0)),
        svg('text', { class: 'axis', x: W - R, y: H - 4, 'text-anchor': 'end' }, fmtClock(t1)));
      for (const s of series) {
        if (s.points.length) el.append(svg('polyline', { class: `line s-${s.name}`, points: s.points.map(([t, v]) => `${x(t)},${y(v)}`).join(' ') }));
      }
    }
    for (const s of series) {
      const last = s.points.length ? s.points[s.points.length - 1][1] : null;
      legend.append(h('li', null, h('span', { class: `swatch s-${s.name}` }), s.name.replace('_', ' '), last == null ? '' : ` ${last}`));
    }
    return h('figure', { class: 'chart-box' }, h('figcaption', null, title), el, legend);
  }

  // Detail
  async function renderDetail(id, g) {
    view.replaceChildren(h('p', { class: 'muted' }, 'Loading…'));
    const [rec, aud] = await Promise.allSettled([api(`/console/api/records/${enc(id)}`), api(`/console/api/audit?limit=${AUDIT_LIMIT}&record=${enc(id)}`)]);
    if (g !== gen) return;
    const back = h('p', null, h('a', { href: lastListHash }, '← Back to the list'));
    if (rec.status === 'rejected') {
      const e = rec.reason;
      const err = errorFor(e, e.status === 404 ? 'This record no longer exists: ' : 'Could not load the record: ');
      view.replaceChildren(back, err || '');
      return;
    }
    const r = rec.value;
    const now = r.age_ms != null && r.since_ms != null ? r.since_ms + r.age_ms : null;
    const stateDd = h('dd', { id: 'detail-state' }, badge(r.state));
    if (r.reason) stateDd.append(' ', r.reason);
    const rows = [
      ['Log ref', code(r.log_ref)], ['Idempotency key', code(r.key, 'wrap')], ['Tenant', code(r.tenant)],
      ['Operation', code(r.operation)], ['State', stateDd], ['Attempt', String(r.attempt ?? '—')],
      ['Created', timeWithAge(r.created_at_ms, now)], ['Updated', timeWithAge(r.updated_at_ms, now)],
      ['In this state since', timeWithAge(r.since_ms, now)], ['Lease', lease(r.lease, now)],
      ['Windows', r.windows ? `replay ${fmtSpan(r.windows.replay_ms)}, record ${fmtSpan(r.windows.record_ms)}` : dash()],
      ['Completed', timeWithAge(r.completed_at_ms, now)], ['Replays until', timeWithAge(r.replay_until_ms, now)],
      ['Kept until', timeWithAge(r.keep_until_ms, now)], ['Effect', code(r.effect)],
      ['Fingerprint', code(r.fingerprint, 'wrap')], ['A retry is told now', told(r.told)],
    ];
    const dl = h('dl', { class: 'fields' }, rows.map(([k, v]) => [h('dt', null, k), v instanceof Node && v.tagName === 'DD' ? v : h('dd', null, v)]));
    const section = h('section', { id: 'record-detail' }, back,
      h('h2', { tabindex: '-1' }, 'Record ', h('code', { id: 'detail-log-ref' }, r.log_ref)));
    if (flash && flash.id === id) {
      section.append(h('p', { id: 'resolve-result', class: 'ok', role: 'status' }, flash.text));
      flash = null;
    }
    if (r.told && r.told.detail) dl.append(h('dt', null, 'Detail'), h('dd', null, r.told.detail));
    section.append(dl, h('h3', null, 'Steps'), stepsTable(r.steps), h('h3', null, 'Stored response'), responseBlock(id, r.response));
    if (r.state === 'unknown' || (r.state === 'running' && r.lease && r.lease.expired)) section.append(resolveForm(id, r));
    section.append(h('h3', null, 'Operator actions'), recordAudit(aud, r.log_ref));
    view.replaceChildren(section);
  }

  function lease(l, now) {
    if (!l) return h('span', { class: 'muted' }, 'none');
    return h('span', null, 'held by ', code(l.owner), ', expires ', timeWithAge(l.expires_at_ms, now),
      l.expired ? [' ', h('span', { class: 'badge badge-expired' }, 'expired')] : null);
  }

  function stepsTable(steps) {
    if (!steps || !steps.length) return h('p', { class: 'muted' }, 'No steps recorded.');
    return table({ id: 'steps' }, ['Name', 'State', 'Provider key', 'Provider ref', 'Started', 'Done'],
      steps.map((s) => h('tr', null, h('td', null, s.name), h('td', null, badge(s.state)),
        h('td', null, code(s.provider_key, 'wrap')), h('td', null, code(s.provider_ref)),
        h('td', { class: 'nowrap' }, fmtTime(s.started_at_ms)), h('td', { class: 'nowrap' }, fmtTime(s.done_at_ms)))));
  }

  function responseBlock(id, resp) {
    if (!resp) return h('p', { class: 'muted' }, 'No stored response.');
    const box = h('div', { class: 'response' },
      h('dl', { class: 'fields' }, h('dt', null, 'Status'), h('dd', null, String(resp.status)),
        h('dt', null, 'Resource ref'), h('dd', null, code(resp.resource_ref))));
    const headers = resp.headers || [];
    box.append(headers.length
      ? table({ id: 'response-headers' }, ['Header', 'Value'], headers.map(([k, v]) => h('tr', null, h('td', null, code(k)), h('td', null, code(v, 'wrap')))))
      : h('p', { class: 'muted' }, 'No stored headers.'));
    // The body may hold personal data: fetched only when asked for.
    const btn = h('button', { id: 'show-body', type: 'button', class: 'secondary' }, `Show body (${resp.body_bytes ?? '?'} bytes)`);
    btn.addEventListener('click', async () => {
      btn.disabled = true;
      btn.textContent = 'Loading body…';
      try {
        const b = await api(`/console/api/records/${enc(id)}/body`);
        const pre = h('pre', { id: 'body-text', class: 'body' });
        if (typeof b.body === 'string') pre.textContent = b.body;
        else pre.textContent = String(b.body_hex || '').replace(/(.{2})/g, '$1 ').replace(/((?:.. ){32})/g, '$1\n').trim();
        btn.replaceWith(...(typeof b.body === 'string' ? [] : [h('p', { class: 'muted small' }, 'Not UTF-8: shown as hex bytes.')]), pre);
      } catch (e) {
        btn.disabled = false;
        btn.textContent = `Show body (${resp.body_bytes ?? '?'} bytes)`;
        const err = errorFor(e, 'Could not load the body: ');
        if (err) btn.after(err);
      }
    });
    box.append(btn);
    return box;
  }

  function resolveForm(id, r) {
    const applied = h('input', { type: 'radio', name: 'applied', id: 'resolve-applied', value: 'applied' });
    const notApplied = h('input', { type: 'radio', name: 'applied', id: 'resolve-not-applied', value: 'not-applied' });
    const status = h('input', { id: 'resolve-status', type: 'number', min: 100, max: 599, step: 1, value: 200, required: true });
    const body = h('textarea', { id: 'resolve-body', rows: 4, spellcheck: 'false' });
    const ref = h('input', { id: 'resolve-resource-ref', type: 'text', autocomplete: 'off' });
    const note = h('textarea', { id: 'resolve-note', rows: 2, required: true });
    const appliedFields = h('div', { id: 'resolve-applied-fields', class: 'applied-fields', hidden: true },
      h('label', null, 'Status a retry is answered with ', status),
      h('label', null, 'Body a retry is answered with (UTF-8 text)', body),
      h('label', null, 'Resource ref (optional)', ref));
    const hint = h('p', { id: 'resolve-hint', class: 'muted small' });
    const error = h('p', { id: 'resolve-error', class: 'error', role: 'alert', hidden: true });
    const submit = h('button', { id: 'resolve-submit', type: 'submit', disabled: true }, 'Resolve');
    const cancel = h('button', { id: 'resolve-cancel', type: 'button', class: 'secondary', hidden: true }, 'Cancel');
    let confirming = false;
    let stale = false;

    const choice = () => (applied.checked ? 'applied' : notApplied.checked ? 'not applied' : null);
    // Whatever is edited after the first click must be confirmed again.
    const reset = () => {
      confirming = false;
      submit.classList.remove('confirm');
      cancel.hidden = true;
      appliedFields.hidden = !applied.checked;
      const c = choice();
      const missing = !c ? 'Choose whether the effect happened.' : !note.value.trim() ? 'Write a note for the audit log.' : '';
      hint.textContent = missing;
      submit.disabled = stale || !!missing;
      submit.textContent = c ? `Mark as ${c}…` : 'Resolve';
    };
    const showError = (msg) => { error.replaceChildren(msg); error.hidden = false; };

    const form = h('form', { id: 'resolve-form', class: 'resolve', novalidate: true },
      h('h3', null, 'Resolve'),
      h('p', { class: 'muted' }, 'Check with the provider (log ref and provider keys above) whether the effect happened, then record it. Applied: retries of this key are answered with the response below. Not applied: the next retry runs the operation again.'),
      h('fieldset', null, h('legend', null, 'Did the effect happen?'),
        h('label', { class: 'inline' }, applied, ' Applied'), h('label', { class: 'inline' }, notApplied, ' Not applied')),
      appliedFields,
      h('label', null, 'Note for the audit log (required)', note),
      hint, error, h('div', { class: 'actions' }, submit, ' ', cancel));
    form.addEventListener('input', () => { if (!stale) { error.hidden = true; reset(); } });
    cancel.addEventListener('click', reset);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      if (submit.disabled) return;
      const isApplied = applied.checked;
      const statusCode = Number(status.value);
      if (isApplied && !(Number.isInteger(statusCode) && statusCode >= 100 && statusCode <= 599)) {
        showError('The status must be a whole number from 100 to 599.');
        return;
      }
      if (!confirming) {
        confirming = true;
        submit.classList.add('confirm');
        submit.textContent = `Confirm: mark as ${choice()}`;
        cancel.hidden = false;
        hint.textContent = isApplied ? `Retries will be answered ${statusCode}. This cannot be undone here.` : 'The next retry will run the operation again. This cannot be undone here.';
        submit.focus();
        return;
      }
      const payload = { applied: isApplied, note: note.value.trim(), version: r.version };
      if (isApplied) {
        payload.status = statusCode;
        payload.body = body.value;
        if (ref.value.trim()) payload.resource_ref = ref.value.trim();
      }
      submit.disabled = true;
      cancel.hidden = true;
      submit.textContent = 'Resolving…';
      try {
        const out = await api(`/console/api/records/${enc(id)}/resolve`, 'POST', payload);
        flash = { id, text: `Resolved ${out.log_ref}: ${out.from} → ${out.state}.` };
        route();
      } catch (err) {
        if (err.status === 401) return;
        if (err.status === 409 && err.body && err.body.changed) {
          // The decision was made on a stale view: never resend it as is.
          stale = true;
          reset();
          showError(`This record changed since this page loaded, so nothing was done (${err.message}). Reload it, look again, then decide.`);
          error.append(' ', h('button', { id: 'resolve-reload', type: 'button', onclick: () => route() }, 'Reload record'));
        } else {
          reset();
          showError(`Not resolved: ${err.message}`);
        }
      }
    });
    reset();
    return form;
  }

  function recordAudit(aud, logRef) {
    const box = h('div', { id: 'record-audit' });
    if (aud.status === 'rejected') {
      box.append(errorFor(aud.reason, 'Could not load the audit log: ') || '');
      return box;
    }
    const entries = (aud.value.entries || []).filter((e) => e.log_ref === logRef);
    box.append(entries.length ? auditTable(entries, null) : h('p', { class: 'muted' }, 'No operator action recorded for this record.'));
    return box;
  }

  // Audit
  async function renderAudit(g) {
    view.replaceChildren(h('h2', { tabindex: '-1' }, 'Audit log'), h('p', { class: 'muted' }, 'Loading…'));
    let data;
    try {
      data = await api(`/console/api/audit?limit=${AUDIT_LIMIT}`);
    } catch (e) {
      if (g === gen) view.replaceChildren(h('h2', null, 'Audit log'), errorFor(e, 'Could not load the audit log: ') || '');
      return;
    }
    if (g !== gen) return;
    const entries = data.entries || [];
    view.replaceChildren(h('h2', { tabindex: '-1' }, 'Audit log'),
      h('p', { class: 'muted' }, `Operator actions, newest first (up to ${AUDIT_LIMIT}).`),
      entries.length ? auditTable(entries, 'audit-log') : h('p', { id: 'empty-state', class: 'empty' }, 'No operator action yet.'));
  }

  function auditTable(entries, id) {
    return table({ id }, ['Time', 'Operator', 'Peer', 'Log ref', 'Tenant', 'Operation', 'Change', 'Answer', 'Note'],
      entries.map((e) => h('tr', { class: 'audit-row', 'data-log-ref': e.log_ref },
        h('td', { class: 'nowrap' }, fmtTime(e.at_ms)), h('td', null, e.operator), h('td', null, code(e.peer)),
        h('td', null, h('a', { href: listHash({ view: 'all', q: e.log_ref }), title: 'Find this record' }, code(e.log_ref))),
        h('td', null, code(e.tenant)), h('td', null, code(e.operation)),
        h('td', { class: 'nowrap' }, badge(e.from), ' → ', badge(e.to)),
        h('td', null, e.applied ? `applied${e.status != null ? `, ${e.status}` : ''}` : 'not applied',
          e.resource_ref ? [', ', code(e.resource_ref)] : null),
        h('td', { class: 'note' }, e.note))));
  }

  // Shell
  document.getElementById('operator').textContent = metaContent('operator');
  const logout = document.getElementById('logout');
  logout.addEventListener('click', async () => {
    logout.disabled = true;
    try {
      await api('/console/logout', 'POST', {});
    } catch (e) {
      if (e.status !== 401) { showAppError(`Logout failed: ${e.message}`); logout.disabled = false; return; }
    }
    toLogin();
  });
  window.addEventListener('hashchange', route);
  route();
})();
