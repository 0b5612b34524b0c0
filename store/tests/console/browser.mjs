// Drives the operator console in headless Chromium for the Rust console
// test (MODE=test, the default), or measures a cold load of the list view
// (MODE=measure). The last stdout line is always one JSON object; the exit
// status is 0 only when every check passed.
//
// Env: CONSOLE_URL, ADMIN_TOKEN, UNKNOWN_LOG_REF, STALE_LOG_REF,
// SCREENSHOT_DIR, CHROMIUM (optional), MODE (optional).
import fs from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';

const MODE = process.env.MODE || 'test';
const BASE = (process.env.CONSOLE_URL || '').replace(/\/+$/, '');
const TOKEN = process.env.ADMIN_TOKEN || '';
const OPERATOR = 'Dana Operator';
const NOTE = 'Confirmed with the provider by phone';
const TIMEOUT_MS = 15000;
// A hung browser must fail the Rust test, not stall it.
const WHOLE_RUN_MS = 180000;
let step = 'setup';

// Before the browser starts, so it can exit at once.
function need(name) {
  if (process.env[name]) return process.env[name];
  process.stderr.write(`console browser test FAILED at step setup: ${name} is not set\n`);
  process.stdout.write(`${JSON.stringify({ ok: false, failed: 'setup', error: `${name} is not set` })}\n`);
  return process.exit(1);
}

let browser = null;
async function finish(result) {
  if (browser) await browser.close().catch(() => {});
  if (!result.ok) process.stderr.write(`console browser test FAILED at step ${result.failed}: ${result.error}\n`);
  process.stdout.write(`${JSON.stringify(result)}\n`);
  process.exit(result.ok ? 0 : 1);
}

function assert(cond, message) {
  if (!cond) throw new Error(message);
}

// Node's fetch, with no cookie jar: what a request from outside any session sees.
async function bare(method, urlPath, { headers = {}, body } = {}) {
  const res = await fetch(BASE + urlPath, { method, headers, body, redirect: 'manual' });
  await res.arrayBuffer();
  return res.status;
}

// A fetch from inside the page, so the browser sends the session cookie.
function inPage(page, method, urlPath, { headers = {}, body } = {}) {
  return page.evaluate(async ([m, u, hd, b]) => {
    const res = await fetch(u, { method: m, headers: hd, body: b, credentials: 'same-origin' });
    const text = await res.text();
    let json = null;
    try { json = JSON.parse(text); } catch (_) { /* not JSON */ }
    return { status: res.status, json, text: text.slice(0, 300) };
  }, [method, urlPath, headers, body === undefined ? undefined : JSON.stringify(body)]);
}

async function launch() {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-background-networking', '--disable-dev-shm-usage'],
  });
}

// Every page is watched for CSP violations and script errors: either means
// the page is broken under the server's policy even if the DOM looks right.
function watch(page, problems) {
  page.setDefaultTimeout(TIMEOUT_MS);
  page.on('console', (msg) => {
    if (msg.type() === 'error' && /Content Security Policy|Refused to/i.test(msg.text())) problems.push(`CSP: ${msg.text()}`);
  });
  page.on('pageerror', (err) => problems.push(`script error: ${err.message}`));
  return page;
}

async function login(page, token) {
  await page.goto(`${BASE}/console/login`);
  await page.fill('#login-name', OPERATOR);
  await page.fill('#login-token', token);
  await Promise.all([page.waitForNavigation(), page.click('#login-submit')]);
}

const LIST_READY = '.record-row, #empty-state';

async function runTests() {
  const unknownRef = need('UNKNOWN_LOG_REF');
  const staleRef = need('STALE_LOG_REF');
  const shots = need('SCREENSHOT_DIR');
  fs.mkdirSync(shots, { recursive: true });
  await launch();
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const problems = [];
  const page = watch(await context.newPage(), problems);
  const checks = [];
  const ids = {};

  const steps = [
    ['login_page_without_token', async () => {
      await page.goto(`${BASE}/console`);
      await page.waitForSelector('#login-token');
      const api = await bare('GET', '/console/api/records');
      assert(api === 401, `GET /console/api/records without a session answered ${api}, expected 401`);
      const js = await bare('GET', '/console/assets/console.js');
      assert(js === 401, `GET /console/assets/console.js without a session answered ${js}, expected 401`);
    }],
    ['wrong_token_refused', async () => {
      await login(page, `wrong-${TOKEN.length}-${Date.now()}`);
      await page.waitForSelector('#login-token');
      const error = ((await page.textContent('.login-error')) || '').trim();
      assert(error, 'the login page shows no .login-error text after a wrong token');
      assert(!(await page.$('#view')), 'a wrong token reached the app');
    }],
    ['login', async () => {
      await login(page, TOKEN);
      await page.waitForSelector(LIST_READY);
      const shown = (await page.textContent('#operator')) || '';
      assert(shown.includes(OPERATOR), `the header names ${JSON.stringify(shown)}, expected ${OPERATOR}`);
      const cookies = await context.cookies(); // a fresh context: every cookie is the console's
      assert(cookies.length > 0, 'no cookie was set by the login');
      for (const c of cookies) {
        assert(c.httpOnly === true, `cookie ${c.name} is not httpOnly`);
        assert(c.sameSite === 'Strict', `cookie ${c.name} has sameSite ${c.sameSite}, expected Strict`);
      }
    }],
    ['unknown_listed', async () => {
      const row = await page.waitForSelector(`.record-row[data-log-ref=${JSON.stringify(unknownRef)}]`);
      const state = ((await row.$eval('.badge', (b) => b.textContent)) || '').trim();
      assert(state === 'unknown', `the row of ${unknownRef} shows state ${JSON.stringify(state)}`);
      ids.unknown = await row.getAttribute('data-id');
      assert(ids.unknown, 'the row has no data-id');
      await page.screenshot({ path: path.join(shots, 'list.png'), fullPage: true });
    }],
    ['detail', async () => {
      await page.click(`.record-row[data-log-ref=${JSON.stringify(unknownRef)}] td.num`);
      await page.waitForSelector('#record-detail');
      const ref = (await page.textContent('#detail-log-ref')) || '';
      assert(ref.trim() === unknownRef, `the detail view shows log ref ${JSON.stringify(ref)}`);
      if (await page.$('#show-body')) {
        assert(!(await page.$('#body-text')), 'the body is shown before #show-body was clicked');
      }
      await page.waitForSelector('#resolve-form');
      await page.screenshot({ path: path.join(shots, 'detail.png'), fullPage: true });
    }],
    ['stale_refused', async () => {
      const found = await inPage(page, 'GET', `/console/api/records?view=all&q=${encodeURIComponent(staleRef)}`);
      const rec = found.json && (found.json.records || []).find((r) => r.log_ref === staleRef);
      assert(rec, `the records API does not find ${staleRef} (status ${found.status})`);
      ids.stale = rec.id;
      const stale = watch(await context.newPage(), problems);
      await stale.goto(`${BASE}/console#/record/${encodeURIComponent(rec.id)}`);
      await stale.waitForSelector('#resolve-form');
      const behind = await bare('POST', `/records/${encodeURIComponent(staleRef)}/resolve`, {
        headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json' },
        body: JSON.stringify({ applied: false, by: 'someone else' }),
      });
      assert(behind === 200, `the admin API resolve answered ${behind}, expected 200`);
      await stale.check('#resolve-not-applied');
      await stale.fill('#resolve-note', 'stale attempt');
      await stale.click('#resolve-submit');
      await stale.waitForFunction(() => /^Confirm/.test(document.querySelector('#resolve-submit').textContent));
      await stale.click('#resolve-submit');
      await stale.waitForFunction(() => /changed since/.test((document.querySelector('#resolve-error') || {}).textContent || ''));
      const now = await inPage(stale, 'GET', `/console/api/records/${encodeURIComponent(rec.id)}`);
      assert(now.status === 200 && now.json.state === 'released', `after the stale attempt the record is ${now.status} ${now.json && now.json.state}, expected released`);
      await stale.close();
    }],
    ['forged_csrf_refused', async () => {
      const url = `/console/api/records/${encodeURIComponent(ids.unknown)}`;
      const before = await inPage(page, 'GET', url);
      assert(before.status === 200, `GET ${url} answered ${before.status}`);
      const body = { applied: true, status: 200, body: 'forged', note: 'forged', version: before.json.version };
      const forged = await inPage(page, 'POST', `${url}/resolve`, { headers: { 'Content-Type': 'application/json', 'X-CSRF-Token': 'forged' }, body });
      assert(forged.status === 403, `a forged CSRF token answered ${forged.status}, expected 403`);
      const missing = await inPage(page, 'POST', `${url}/resolve`, { headers: { 'Content-Type': 'application/json' }, body });
      assert(missing.status === 403, `no CSRF token answered ${missing.status}, expected 403`);
      const after = await inPage(page, 'GET', url);
      assert(after.json && after.json.state === 'unknown', `after the forged attempts the record is ${after.json && after.json.state}`);
      const outside = await bare('POST', `${url}/resolve`, { headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
      assert(outside === 401, `a resolve without a session answered ${outside}, expected 401`);
    }],
    ['resolve_applied', async () => {
      // The page still shows the detail loaded in step `detail`: its version
      // must still be current, since nothing above was allowed to change it.
      await page.check('#resolve-applied');
      await page.fill('#resolve-status', '201');
      await page.fill('#resolve-body', '{"id":"bk_operator","status":"confirmed"}');
      await page.fill('#resolve-resource-ref', 'bk_operator');
      await page.fill('#resolve-note', NOTE);
      await page.click('#resolve-submit');
      await page.waitForFunction(() => /^Confirm/.test(document.querySelector('#resolve-submit').textContent));
      await page.click('#resolve-submit');
      await page.waitForFunction(() => {
        const ok = document.querySelector('#resolve-result');
        const err = document.querySelector('#resolve-error');
        return (ok && /Resolved/.test(ok.textContent)) || (err && !err.hidden && err.textContent);
      });
      const err = await page.$eval('#resolve-error', (e) => (e.hidden ? '' : e.textContent)).catch(() => '');
      assert(!err, `the resolve was refused: ${err}`);
      const state = (await page.textContent('#detail-state')) || '';
      assert(/completed/.test(state), `after resolving, the detail shows state ${JSON.stringify(state)}`);
    }],
    ['audit_shows_action', async () => {
      await page.evaluate(() => { location.hash = '#/audit'; });
      await page.waitForSelector('#audit-log');
      const hit = await page.waitForFunction(([ref, who, note]) => [...document.querySelectorAll('#audit-log .audit-row')]
        .some((r) => r.textContent.includes(ref) && r.textContent.includes(who) && r.textContent.includes(note)),
      [unknownRef, OPERATOR, NOTE], { timeout: 5000 }).catch(() => null);
      assert(hit, `no audit row holds ${unknownRef}, ${OPERATOR} and the note`);
    }],
  ];

  for (const [name, run] of steps) {
    step = name;
    try {
      await run();
      assert(!problems.length, problems.join('; '));
    } catch (e) {
      return finish({ ok: false, failed: name, error: String(e && e.message ? e.message : e).split('\n')[0], checks });
    }
    checks.push(name);
  }
  return finish({ ok: true, checks, unknown_id: ids.unknown });
}

async function measureOnce() {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  page.setDefaultTimeout(TIMEOUT_MS);
  await login(page, TOKEN);
  await page.waitForSelector(LIST_READY);
  // Watches from inside the page, from its first instant, so the time does
  // not include the driver's polling.
  await page.addInitScript(() => {
    const mark = () => {
      if (window.__listRendered == null && document.querySelector('.record-row, #empty-state')) window.__listRendered = performance.now();
    };
    new MutationObserver(mark).observe(document, { childList: true, subtree: true });
  });
  const cdp = await context.newCDPSession(page);
  await cdp.send('Network.enable');
  await cdp.send('Network.setCacheDisabled', { cacheDisabled: true });
  let bytes = 0;
  let requests = 0;
  const open = new Set();
  cdp.on('Network.requestWillBeSent', (e) => { if (!e.request.url.startsWith('data:')) { requests += 1; open.add(e.requestId); } });
  cdp.on('Network.loadingFinished', (e) => { bytes += e.encodedDataLength; open.delete(e.requestId); });
  cdp.on('Network.loadingFailed', (e) => open.delete(e.requestId));
  await page.reload({ waitUntil: 'load' });
  await page.waitForSelector(LIST_READY);
  const t = await page.evaluate(() => window.__listRendered ?? performance.now());
  const quietBy = Date.now() + 5000;
  while (open.size && Date.now() < quietBy) await new Promise((r) => setTimeout(r, 20));
  const fcp = await page.evaluate(() => new Promise((resolve) => {
    const e = performance.getEntriesByName('first-contentful-paint')[0];
    if (e) return resolve(e.startTime);
    new PerformanceObserver((l) => resolve(l.getEntries()[0].startTime)).observe({ type: 'paint', buffered: true });
    setTimeout(() => resolve(null), 3000);
  }));
  await context.close();
  return { bytes_transferred: bytes, requests, first_contentful_paint_ms: fcp, list_rendered_ms: t };
}

async function runMeasure() {
  await launch();
  const runs = [];
  const count = Math.max(1, Number(process.env.RUNS) || 5);
  for (let i = 0; i < count; i++) {
    step = `measure run ${i + 1}`;
    try {
      runs.push(await measureOnce());
    } catch (e) {
      return finish({ ok: false, failed: `measure run ${i + 1}`, error: String(e.message || e).split('\n')[0] });
    }
  }
  const out = { ok: true, runs: runs.length };
  const min = {};
  const max = {};
  for (const k of Object.keys(runs[0])) {
    const v = runs.map((r) => r[k]).filter((x) => x != null).sort((a, b) => a - b);
    const round = (x) => (x == null ? null : Math.round(x * 10) / 10);
    out[k] = round(v.length ? v[Math.floor(v.length / 2)] : null);
    min[k] = round(v[0]);
    max[k] = round(v[v.length - 1]);
  }
  return finish({ ...out, min, max });
}

need('CONSOLE_URL');
need('ADMIN_TOKEN');
setTimeout(() => finish({ ok: false, failed: step, error: `the run took over ${WHOLE_RUN_MS / 1000} s` }), WHOLE_RUN_MS).unref();
(MODE === 'measure' ? runMeasure() : MODE === 'test' ? runTests() : finish({ ok: false, failed: 'setup', error: `MODE ${MODE}: expected test or measure` }))
  .catch((e) => finish({ ok: false, failed: 'driver', error: String(e && e.stack ? e.stack : e) }));
