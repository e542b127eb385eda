// The user step of the device flow, done as a browser would, through
// oidc-provider's own pages (tests/peer/oidc/provider.mjs):
//
//   node approve.mjs VERIFICATION_URI USER_CODE LOGIN approve|deny
//
// It opens the verification page, submits the user code (with the page's
// hidden xsrf input and the cookies it set), confirms (or, for `deny`,
// presses the page's Abort button: the device gets access_denied), signs
// in as LOGIN on the login form (devInteractions takes any name) and
// consents on the consent form, following every redirect by hand with a
// cookie jar. Prints `ok approved` or `ok denied` on stdout; anything
// unexpected exits 1 with the page it stopped at on stderr.
//
// An https provider under a private CA: its CA is given to this script's
// node in NODE_EXTRA_CA_CERTS (tests/common/oidc_provider.rs does).
//
// Forms rather than the provider's interaction API: the test then goes
// through exactly what a person's browser goes through.

const [uri, userCode, login, decision] = process.argv.slice(2);
if (!uri || !userCode || !login || !['approve', 'deny'].includes(decision)) {
  console.error('usage: approve.mjs VERIFICATION_URI USER_CODE LOGIN approve|deny');
  process.exit(2);
}

const jar = new Map();
function keepCookies(res) {
  for (const c of res.headers.getSetCookie()) {
    const [pair] = c.split(';');
    const eq = pair.indexOf('=');
    const name = pair.slice(0, eq).trim();
    const value = pair.slice(eq + 1).trim();
    if (value === '' || /expires=Thu, 01 Jan 1970/i.test(c)) jar.delete(name);
    else jar.set(name, value);
  }
}
function cookieHeader() {
  return [...jar].map(([k, v]) => `${k}=${v}`).join('; ');
}

// One request; redirects followed (GET), cookies kept. The last page.
async function go(url, form) {
  let method = form ? 'POST' : 'GET';
  let body = form ? new URLSearchParams(form).toString() : undefined;
  for (let hops = 0; hops < 20; hops += 1) {
    const headers = { cookie: cookieHeader() };
    if (body) headers['content-type'] = 'application/x-www-form-urlencoded';
    const res = await fetch(url, {
      method, body, headers, redirect: 'manual', signal: AbortSignal.timeout(10000),
    });
    keepCookies(res);
    if (res.status >= 300 && res.status < 400) {
      url = new URL(res.headers.get('location'), url).toString();
      method = 'GET';
      body = undefined;
      continue;
    }
    return { url, status: res.status, html: await res.text() };
  }
  throw new Error(`too many redirects at ${url}`);
}

function hidden(html, name) {
  const m = html.match(new RegExp(`name="${name}" value="([^"]*)"`));
  return m ? m[1] : undefined;
}
function action(html) {
  const m = html.match(/<form[^>]*action="([^"]+)"/);
  return m ? m[1].replace(/&amp;/g, '&') : undefined;
}
function fail(what, page) {
  console.error(`approve.mjs: ${what} (HTTP ${page.status} at ${page.url}):\n${page.html}`);
  process.exit(1);
}

let page = await go(uri);
const xsrf = hidden(page.html, 'xsrf');
if (!xsrf) fail('no xsrf input on the verification page', page);
const deviceUrl = new URL(action(page.html) ?? uri, page.url).toString();
page = await go(deviceUrl, { xsrf, user_code: userCode });
const xsrf2 = hidden(page.html, 'xsrf');
if (!page.html.includes('op.deviceConfirmForm') || !xsrf2) fail('no confirm form', page);
const confirm = { xsrf: xsrf2, user_code: hidden(page.html, 'user_code') ?? userCode };
if (decision === 'deny') confirm.abort = 'yes';
else confirm.confirm = 'yes';
page = await go(deviceUrl, confirm);
if (decision === 'deny') {
  if (page.status >= 400) fail('abort refused', page);
  console.log('ok denied');
  process.exit(0);
}
for (let step = 0; step < 4; step += 1) {
  const prompt = hidden(page.html, 'prompt');
  const target = action(page.html);
  if (prompt === 'login' && target) {
    page = await go(new URL(target, page.url).toString(), { prompt, login, password: 'x' });
  } else if (prompt === 'consent' && target) {
    page = await go(new URL(target, page.url).toString(), { prompt });
  } else {
    break;
  }
}
if (page.status !== 200 || !/success/i.test(page.html)) fail('no success page', page);
console.log('ok approved');
