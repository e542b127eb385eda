"""The Python client's v4 port-forward (`kubernetes.stream.portforward`)
against a sim: run by tests/sim_portforward.rs with PEER_CLIENTS (the
folder scripts/peer-clients.sh installs into), KUBECONFIG, POD, PORT,
BYTES. Sends BYTES deterministic bytes to an echo server and checks they
come back; with BYTES=0 waits for the port's error text instead. Prints
one line `ok ...` and exits 0, or fails."""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.environ["PEER_CLIENTS"], "python"))

from kubernetes import client, config  # noqa: E402
from kubernetes.stream import portforward  # noqa: E402

config.load_kube_config(os.environ["KUBECONFIG"])
api = client.CoreV1Api()
port = int(os.environ["PORT"])
n = int(os.environ["BYTES"])
data = bytes((i * 7 + 3) % 251 for i in range(n))
threading.Timer(20, lambda: os._exit(2)).start()

pf = portforward(
    api.connect_get_namespaced_pod_portforward,
    os.environ["POD"],
    "default",
    ports=str(port),
)
if n == 0:
    deadline = time.time() + 15
    while time.time() < deadline:
        err = pf.error(port)
        if err:
            print("ok " + err)
            os._exit(0)
        time.sleep(0.05)
    sys.exit("no error text")
sock = pf.socket(port)
sock.setblocking(True)
threading.Thread(target=lambda: sock.sendall(data), daemon=True).start()
got = bytearray()
while len(got) < n:
    b = sock.recv(65536)
    if not b:
        break
    got += b
if bytes(got) != data:
    sys.exit("bytes differ: %d of %d" % (len(got), n))
print("ok %d" % n)
sock.close()
os._exit(0)
