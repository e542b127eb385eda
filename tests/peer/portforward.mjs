// The JavaScript client's v4 port-forward (@kubernetes/client-node
// `PortForward`) against a sim: run by tests/sim_portforward.rs with
// PEER_CLIENTS (the folder scripts/peer-clients.sh installs into),
// KUBECONFIG, POD, PORT, BYTES. Sends BYTES deterministic bytes to an echo
// server and checks they come back; with BYTES=0 waits for the error
// channel's text instead. Prints one line `ok …` and exits 0, or fails.
import { PassThrough, Writable } from 'node:stream';
import { pathToFileURL } from 'node:url';

const base = process.env.PEER_CLIENTS;
const k8s = await import(
  pathToFileURL(`${base}/node/node_modules/@kubernetes/client-node/dist/index.js`).href
);
const kc = new k8s.KubeConfig();
kc.loadFromFile(process.env.KUBECONFIG);
// The client refuses a plain-HTTP server unless TLS checks are off (the
// plain sim has no TLS to check).
kc.loadFromOptions({
  clusters: kc.clusters.map((c) =>
    c.server.startsWith('http:') ? { ...c, skipTLSVerify: true } : c,
  ),
  users: kc.users,
  contexts: kc.contexts,
  currentContext: kc.currentContext,
});
const n = Number(process.env.BYTES);
const port = Number(process.env.PORT);
const data = Buffer.alloc(n);
for (let i = 0; i < n; i++) data[i] = (i * 7 + 3) % 251;

setTimeout(() => {
  console.error('timed out');
  process.exit(2);
}, 20000);

const got = [];
let total = 0;
let errText = '';
let ws;
function finish(line) {
  console.log(line);
  if (ws) ws.close();
  process.exit(0);
}
const output = new Writable({
  write(chunk, _enc, cb) {
    got.push(chunk);
    total += chunk.length;
    if (n > 0 && total >= n) {
      const all = Buffer.concat(got);
      if (all.length !== n || !all.equals(data)) {
        console.error(`bytes differ: ${all.length} of ${n}`);
        process.exit(1);
      }
      finish(`ok ${n}`);
    }
    cb();
  },
});
const errors = new Writable({
  write(chunk, _enc, cb) {
    errText += chunk.toString();
    if (n === 0 && errText.includes('error forwarding port')) finish(`ok ${errText}`);
    cb();
  },
});
const input = new PassThrough();
const pf = new k8s.PortForward(kc);
ws = await pf.portForward('default', process.env.POD, [port], output, errors, input);
if (n > 0) {
  for (let off = 0; off < n; off += 65536) input.write(data.subarray(off, off + 65536));
}
