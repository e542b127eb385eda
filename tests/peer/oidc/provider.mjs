// A real OpenID provider for the login tests: panva's oidc-provider
// (OpenID Certified; installed by scripts/oidc-provider.sh, found through
// OIDC_PROVIDER_DIR), on loopback, plain HTTP or (--tls-cert/--tls-key)
// HTTPS.
//
//   node provider.mjs keygen FILE KID
//       writes a private JWK set (one RS256 key, id KID) to FILE.
//   node provider.mjs [--port N] --jwks FILE [--client-id ID]
//                     [--id-token-ttl SECS] [--device-code-ttl SECS]
//                     [--groups a,b] [--tls-cert PEM --tls-key PEM]
//       serves an issuer at http://127.0.0.1:PORT (port 0: a free one),
//       or https://127.0.0.1:PORT with that certificate chain and key
//       (an issuer behind a private CA), and prints one ready line on
//       stdout once it accepts connections:
//       `oidc-provider listening on http(s)://127.0.0.1:PORT`.
//
// What it is set up for (tests/common/oidc_provider.rs):
// - the device authorization grant (features.deviceFlow) and refresh
//   tokens (offline_access; public clients get a rotated refresh token on
//   every refresh, and a reused one revokes the grant: the race the CLI's
//   lock prevents);
// - one static public client (token_endpoint_auth_method none, grant types
//   device_code and refresh_token);
// - accounts through findAccount: any login name N is an account with
//   sub N, email N@example.com, email_verified true, and the groups of
//   --groups (the `groups` scope and claim);
// - the user step through the provider's own pages (features.
//   devInteractions: a login form that takes any name, a consent form),
//   which tests/peer/oidc/approve.mjs fills in as a browser would;
// - signing keys from the JWK set file only (RS256), so a restart with
//   another file is a key rotation;
// - short token lifetimes on request (--id-token-ttl), so refresh can be
//   tested.
// Stops on SIGTERM/SIGINT or when stdin closes (its parent died).

import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { createServer as createTlsServer } from 'node:https';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

if (process.argv[2] === 'keygen') {
  const [file, kid] = process.argv.slice(3);
  if (!file || !kid) {
    console.error('usage: provider.mjs keygen FILE KID');
    process.exit(2);
  }
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const jwk = { ...privateKey.export({ format: 'jwk' }), kid, alg: 'RS256', use: 'sig' };
  writeFileSync(file, JSON.stringify({ keys: [jwk] }), { mode: 0o600 });
  process.exit(0);
}

const { values: opt } = parseArgs({
  options: {
    port: { type: 'string', default: '0' },
    jwks: { type: 'string' },
    'client-id': { type: 'string', default: 'kubegate' },
    'id-token-ttl': { type: 'string', default: '3600' },
    'device-code-ttl': { type: 'string', default: '600' },
    groups: { type: 'string', default: 'developers' },
    'tls-cert': { type: 'string' },
    'tls-key': { type: 'string' },
  },
});
if (!opt['tls-cert'] !== !opt['tls-key']) {
  console.error('provider.mjs: --tls-cert and --tls-key go together');
  process.exit(2);
}
const tls = Boolean(opt['tls-cert']);
if (!opt.jwks) {
  console.error('provider.mjs: --jwks FILE is required');
  process.exit(2);
}

const dir = process.env.OIDC_PROVIDER_DIR;
if (!dir) {
  console.error('provider.mjs: OIDC_PROVIDER_DIR is not set (scripts/oidc-provider.sh)');
  process.exit(2);
}
const require = createRequire(join(dir, 'package.json'));
const { default: Provider } = await import(require.resolve('oidc-provider'));

const jwks = JSON.parse(readFileSync(opt.jwks, 'utf8'));
const groups = opt.groups.split(',').filter(Boolean);
const idTokenTtl = Number(opt['id-token-ttl']);

const server = tls
  ? createTlsServer({ cert: readFileSync(opt['tls-cert']), key: readFileSync(opt['tls-key']) })
  : createServer();
await new Promise((resolve, reject) => {
  server.once('error', reject);
  server.listen(Number(opt.port), '127.0.0.1', resolve);
});
const { port } = server.address();
const issuer = `${tls ? 'https' : 'http'}://127.0.0.1:${port}`;

const provider = new Provider(issuer, {
  clients: [{
    client_id: opt['client-id'],
    token_endpoint_auth_method: 'none',
    grant_types: ['urn:ietf:params:oauth:grant-type:device_code', 'refresh_token'],
    response_types: [],
    redirect_uris: [],
    id_token_signed_response_alg: 'RS256',
  }],
  jwks,
  scopes: ['openid', 'offline_access', 'profile', 'email', 'groups'],
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name'],
    groups: ['groups'],
  },
  // Claims in the ID token itself (not only at userinfo): the daemon
  // reads the ID token only.
  conformIdTokenClaims: false,
  async findAccount(_ctx, id) {
    return {
      accountId: id,
      async claims() {
        return {
          sub: id, name: id, email: `${id}@example.com`, email_verified: true, groups,
        };
      },
    };
  },
  features: {
    deviceFlow: { enabled: true },
    devInteractions: { enabled: true },
    revocation: { enabled: true },
  },
  async issueRefreshToken(_ctx, client, code) {
    return client.grantTypeAllowed('refresh_token') && code.scopes.has('offline_access');
  },
  ttl: {
    IdToken: idTokenTtl,
    AccessToken: idTokenTtl,
    DeviceCode: Number(opt['device-code-ttl']),
    RefreshToken: 24 * 3600,
    Grant: 24 * 3600,
    Session: 3600,
    Interaction: 600,
  },
  cookies: { keys: [randomUUID()] },
  pkce: { required: () => false },
  // Error pages as JSON (approve.mjs prints the page it stopped at).
  renderError(ctx, out) {
    ctx.type = 'json';
    ctx.body = out;
  },
});
// Counts what the tests assert on (`GET /test/stats`, loopback only
// like the whole server): token requests per grant type and their errors.
const stats = { token: {}, errors: {} };
provider.on('grant.success', (ctx) => {
  const g = ctx.oidc.params.grant_type;
  stats.token[g] = (stats.token[g] || 0) + 1;
});
provider.on('grant.error', (ctx, err) => {
  const e = err.error || 'server_error';
  stats.errors[e] = (stats.errors[e] || 0) + 1;
  console.error(`grant.error ${ctx.oidc?.params?.grant_type}: ${e}: ${err.error_description}`);
});
const callback = provider.callback();
server.on('request', (req, res) => {
  if (req.url === '/test/stats') {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify(stats));
    return;
  }
  callback(req, res);
});

const stop = () => server.close(() => process.exit(0)) && setTimeout(() => process.exit(0), 500);
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
process.stdin.on('end', stop);
process.stdin.resume();
process.stdout.write(`oidc-provider listening on ${issuer}\n`);
