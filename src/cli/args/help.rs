//! The client commands' help texts (`kubegate COMMAND --help`, starting
//! `usage: kubegate `) and synopses (printed under a usage error); the
//! common flags' lines are written once, in [`COMMON_HELP`].

/// The common flags' lines of every client command's help.
const COMMON_HELP: &str =
    "      --server URL         the daemon (env KUBEGATE_SERVER, default http://127.0.0.1:7443)
      --token T            the bearer token (env KUBEGATE_TOKEN; none given:
                           the one `kubegate login` stored for the server)
      --token-file F       read the token from F (surrounding whitespace trimmed)
      --ca-file F          trust the CA certificates in PEM file F (https servers)
  -h, --help               this help
";

pub const EXEC_SYNOPSIS: &str = "usage: kubegate exec [-i] [-t] [-c CONTAINER] --workspace PROJECT/UID DEPLOYMENT -- CMD [ARGS...]
       (kubegate exec --help for more)";

pub fn exec_help() -> String {
    format!(
        "usage: kubegate exec [-i] [-t] [-c CONTAINER] --workspace PROJECT/UID DEPLOYMENT -- CMD [ARGS...]

Runs CMD in a container of a pod of DEPLOYMENT (a Deployment of the
workspace) through the kubegate daemon, and exits with CMD's exit code.

options:
  -i, --stdin              send our stdin to CMD (without it CMD's stdin is
                           closed at once)
  -t, --tty                allocate a terminal for CMD; with -i and a terminal
                           on our stdin, the local terminal goes to raw mode
                           (restored on exit) and window size changes follow.
                           Ignored, with a warning, when stdin is not a terminal
  -c, --container NAME     the container (default: the pod's only or default one)
  -w, --workspace P/UID    the workspace (env KUBEGATE_WORKSPACE)
{COMMON_HELP}
exit codes: CMD's exit code; 255 for kubegate's own errors (usage, connection,
refusals), printed as `kubegate: CODE: message` (docs/cli.md).
"
    )
}

pub const WORKSPACES_SYNOPSIS: &str =
    "usage: kubegate workspaces [--output table|json] [--server URL] [--token T | --token-file F] [--ca-file F]
       (kubegate workspaces --help for more)";

pub fn workspaces_help() -> String {
    format!(
        "usage: kubegate workspaces [--output table|json] [--server URL] [--token T | --token-file F] [--ca-file F]

Lists the workspaces the token may exec into and the labelled Deployments in
each: WORKSPACE  DEPLOYMENT  CONTAINERS  READY (ready/desired replicas).

options:
  -o, --output FORMAT      table (default) or json (the daemon's answer as is)
{COMMON_HELP}
exit codes: 0 success; 2 usage or configuration error; 1 any other failure.
"
    )
}

pub const SESSIONS_SYNOPSIS: &str =
    "usage: kubegate sessions [list [--output table|json] | stop ID | resume ID]
       (kubegate sessions --help for more)";

pub fn sessions_help() -> String {
    format!(
        "usage: kubegate sessions [list [--output table|json] | stop ID | resume ID]

Lists the token's watch sessions (the default: ID  STATUS  APPS  CREATED
ENDPOINTS), stops one (its pod is deleted), or resumes a suspended one.

options:
  -o, --output FORMAT      list: table (default) or json (the daemon's answer as is)
{COMMON_HELP}
exit codes: 0 success; 2 usage or configuration error; 1 any other failure
(an unknown session: NOT_FOUND; a session in the wrong state: NOT_SUSPENDED).
"
    )
}

pub const ATTACH_SYNOPSIS: &str = "usage: kubegate attach [--from-start] SESSION APP
       (kubegate attach --help for more)";

pub fn attach_help() -> String {
    format!(
        "usage: kubegate attach [--from-start] SESSION APP

Joins APP of watch session SESSION: its output on our stdout (its stderr
on our stderr), our stdin to the app. Without --from-start only what came
since the last attach from this machine is replayed (the last seq seen is
kept in $XDG_STATE_HOME/kubegate/attach.json).

With a terminal on stdin and a tty app, the terminal goes to raw mode and
follows window size changes; Ctrl-] detaches (the session keeps running).
Otherwise Ctrl-C (SIGINT) or SIGTERM detaches.

options:
      --from-start         replay everything the daemon still buffers
{COMMON_HELP}
exit codes: 0 detached; 1 the session ended (its status is printed);
255 kubegate's own errors (usage, connection, refusals), printed as
`kubegate: CODE: message`.
"
    )
}

pub const PORT_FORWARD_SYNOPSIS: &str =
    "usage: kubegate port-forward [--address ADDR,...] SESSION [LOCAL:]REMOTE...
       kubegate port-forward --workspace P/UID [--address ADDR,...] DEPLOYMENT [LOCAL:]REMOTE...
       (kubegate port-forward --help for more)";

pub fn port_forward_help() -> String {
    format!(
        "usage: kubegate port-forward [--address ADDR,...] SESSION [LOCAL:]REMOTE...
       kubegate port-forward --workspace P/UID [--address ADDR,...] DEPLOYMENT [LOCAL:]REMOTE...

Listens on LOCAL (default: REMOTE; empty or 0, as in :5432, picks a free
port) and carries every connection it accepts, as TCP, to port REMOTE of
the session's pod (whichever pod the session has then) or of a pod of the
workspace's Deployment, each through its own tunnel of the daemon. Any TCP
works: databases, debuggers, HTTP with keep-alive, WebSockets. Prints
kubectl's lines (Forwarding from ..., Handling connection for ...). When
the target is gone (a suspended session), connections are closed and
stderr says so once; the listener stays and is served again once the
target is back. Ctrl-C or SIGTERM stops it.

options:
  -w, --workspace P/UID   forward to DEPLOYMENT of this workspace (not read
                          from KUBEGATE_WORKSPACE)
  --address ADDR,...      where to listen: localhost (the default: 127.0.0.1
                          and ::1) or IP addresses; repeatable
{COMMON_HELP}
The old form SESSION PORT LOCAL still works (a deprecation line).

exit codes: 0 stopped by a signal; 2 usage or configuration error; 1 any
other failure (an unknown session or Deployment, a local port in use).
"
    )
}

pub const DEV_SYNOPSIS: &str = "usage: kubegate dev [--stdin APP] [DIR]
       (kubegate dev --help for more)";

pub fn dev_help() -> String {
    format!(
        "usage: kubegate dev [--stdin APP] [DIR]

Runs the project in DIR (default: the current folder) as a watch session:
reads DIR/kubegate.toml ([[app]] tables: name, entry, command, ports, io,
runner; top-level image and env), uploads the folder (minus .git/ and
what .kubegateignore names) and starts the session; shows every app's
output prefixed with its name, pushes local file changes into the session
as they happen, sends the lines typed here to one app, and prints the
endpoints and their reachability as they come.

Ctrl-C stops the session and exits once it is stopped; a second Ctrl-C
within a second of the first suspends it instead (resume it with
`kubegate sessions resume ID`). SIGTERM stops at once; SIGHUP (the
terminal went away) suspends. Details: docs/dev.md.

options:
      --stdin APP          the app that gets the lines typed here (default:
                           the first tty app, else the first app)
{COMMON_HELP}
exit codes: 0 the session was stopped or suspended on request; 2 usage,
configuration or manifest error (nothing was started); 1 any other
failure (the folder over the bundle limits, a refusal, the session failing
or ending under us).
"
    )
}

pub const LOGIN_SYNOPSIS: &str =
    "usage: kubegate login [--browser] [--server URL] [--ca-file F] [--issuer-ca-file F]
       (kubegate login --help for more)";

pub fn login_help() -> String {
    "usage: kubegate login [--browser] [--server URL] [--ca-file F] [--issuer-ca-file F]

Signs in with the daemon's OpenID provider (the device authorization grant,
RFC 8628): prints a URL and a code to enter there, from any browser, then
waits until the sign-in is done and stores the tokens (0600, under
$XDG_STATE_HOME/kubegate/tokens/) for this daemon URL. Later commands
without --token use them and refresh them.

options:
      --browser            also open the URL with xdg-open
      --server URL         the daemon (env KUBEGATE_SERVER, default http://127.0.0.1:7443);
                           https, or http on loopback only
      --ca-file F          trust the CA certificates in PEM file F (the daemon)
      --issuer-ca-file F   trust only the CA certificates in PEM file F for the
                           issuer (its discovery, device and token endpoints),
                           instead of the web PKI roots: an issuer behind a
                           private CA; kept (absolute path) for every refresh
  -h, --help               this help

exit codes: 0 signed in; 2 usage or configuration error (a daemon URL that
cannot be trusted, no OIDC login configured, a CA file that cannot be
read); 3 the sign-in was denied; 4 the code expired before the sign-in;
1 any other failure (an issuer unreachable, or whose certificate is not
trusted).
"
    .to_string()
}

pub const LOGOUT_SYNOPSIS: &str = "usage: kubegate logout [--server URL]
       (kubegate logout --help for more)";

pub fn logout_help() -> String {
    "usage: kubegate logout [--server URL]

Removes the tokens `kubegate login` stored for the daemon URL.

options:
      --server URL         the daemon (env KUBEGATE_SERVER, default http://127.0.0.1:7443)
  -h, --help               this help

exit codes: 0 success (also when nothing was stored); 2 usage error; 1 a
token file that could not be removed.
"
    .to_string()
}

pub const WHOAMI_SYNOPSIS: &str =
    "usage: kubegate whoami [--output table|json] [--server URL] [--token T | --token-file F] [--ca-file F]
       (kubegate whoami --help for more)";

pub fn whoami_help() -> String {
    format!(
        "usage: kubegate whoami [--output table|json] [--server URL] [--token T | --token-file F] [--ca-file F]

Shows who the daemon takes the token for: the principal, how it signed in,
its groups and Kubernetes groups, its workspaces, when the token expires, and
the daemon URL. Never the token.

options:
  -o, --output FORMAT      table (default) or json (the daemon's answer as is)
{COMMON_HELP}
exit codes: 0 success; 2 usage or configuration error; 1 any other failure.
"
    )
}
