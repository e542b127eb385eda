"""The web app: HTTP on the pod's IP (POD_IP, which kubegate gives every
app), port 8080. Every answer reads message.txt again, so an edit shows at
the next request even where nothing restarts the app."""

import http.server
import os
import pathlib

HERE = pathlib.Path(__file__).resolve().parent


def message():
    try:
        return (HERE / "message.txt").read_text().strip()
    except OSError as e:
        return f"(no message: {e.strerror})"


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"{os.environ.get('GREETING', 'hello')} from web: {message()}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):
        print(f"{self.command} {self.path} from {self.client_address[0]}")


addr = (os.environ.get("POD_IP", "127.0.0.1"), 8080)
server = http.server.ThreadingHTTPServer(addr, Handler)
print(f"serving on http://{addr[0]}:{addr[1]} (message: {message()})")
server.serve_forever()
