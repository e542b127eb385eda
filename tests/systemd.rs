//! kubegate under systemd (docs/cli.md#kubegate-serve-and-kubegate-check-config;
//! docs/deploy.md):
//! - the notify protocol through a fake `NOTIFY_SOCKET` (a path, and an
//!   abstract `@name`): `READY=1` exactly once, only when the listener is
//!   bound and `/readyz` answers 200; `RELOADING=1` (with MONOTONIC_USEC)
//!   then `READY=1` around a SIGHUP reload; `STOPPING=1` on SIGTERM;
//! - scripts/kubegate.service: `systemd-analyze verify` where it exists,
//!   and a structural check that always runs (Type=notify, the hardening
//!   keys, an ExecStart whose subcommand and flags kubegate accepts);
//! - scripts/install.sh into a temporary DESTDIR: files and modes, the
//!   config never overwritten, no published token (a random one in a 0600
//!   file, its digest in the config, never printed), --prefix, --dry-run.
//!
//! Waits are deadlines on sockets and conditions, with a watchdog.

mod common;

use common::{first_line, temp_dir, KUBEGATE};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const UNIT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/kubegate.service");
const INSTALL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/install.sh");
const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config.example.toml");

/// Exits the test process if it outlives `secs` (dropping the sender
/// disarms it).
fn watchdog(secs: u64) -> crossbeam_channel::Sender<()> {
    let (tx, rx) = crossbeam_channel::bounded::<()>(0);
    std::thread::spawn(move || {
        if let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
            rx.recv_timeout(Duration::from_secs(secs))
        {
            eprintln!("watchdog: test still running after {secs} s");
            std::process::exit(101);
        }
    });
    tx
}

// ------------------------------------------------------------ notify

/// `kubegate serve` on the example config (listen on a free port, state in
/// a temp folder) with `NOTIFY_SOCKET` set; killed on drop.
struct Served {
    child: Child,
    dir: PathBuf,
}

impl Served {
    fn start(notify_socket: &str) -> Served {
        let dir = temp_dir("systemd-notify");
        let example = std::fs::read_to_string(EXAMPLE).expect("read the example config");
        let text = example.replace("listen = \"127.0.0.1:7443\"", "listen = \"127.0.0.1:0\"");
        assert_ne!(text, example, "the example's listen line changed");
        let config = dir.join("kubegate.toml");
        std::fs::write(&config, text).expect("write config");
        let log = std::fs::File::create(dir.join("daemon.log")).expect("create log");
        let child = Command::new(KUBEGATE)
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .env("NOTIFY_SOCKET", notify_socket)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn kubegate serve");
        Served { child, dir }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    fn signal(&self, sig: i32) {
        common::unsafe_kill(self.child.id(), sig);
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if !std::thread::panicking() {
            // The embedded sim's processes die with the daemon.
            let dir = self.dir.clone();
            common::wait_for("no process left", Duration::from_secs(15), || {
                common::processes_under(&dir).is_empty().then_some(())
            });
        }
    }
}

/// The next datagram within `within`, as text; None on timeout.
fn recv(sock: &UnixDatagram, within: Duration) -> Option<String> {
    sock.set_read_timeout(Some(within)).expect("timeout");
    let mut buf = [0u8; 4096];
    match sock.recv(&mut buf) {
        Ok(n) => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
        Err(e)
            if e.kind() == std::io::ErrorKind::WouldBlock
                || e.kind() == std::io::ErrorKind::TimedOut =>
        {
            None
        }
        Err(e) => panic!("reading the notify socket: {e}"),
    }
}

/// One request with `Connection: close`; the status.
fn http_status(addr: &str, path: &str) -> u16 {
    let mut s = std::net::TcpStream::connect(addr)
        .unwrap_or_else(|e| panic!("connect {addr} right after READY=1: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .expect("write");
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    resp.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {resp:?}"))
}

/// Waits for READY=1 (nothing else may come first), then checks at once
/// that the front door is bound and ready; returns its `host:port`.
fn ready(served: &mut Served, sock: &UnixDatagram) -> String {
    let msg = recv(sock, Duration::from_secs(90));
    assert_eq!(
        msg.as_deref(),
        Some("READY=1"),
        "first notification; log:\n{}",
        served.log()
    );
    // The stdout line is printed before READY=1
    // (docs/cli.md#kubegate-serve-and-kubegate-check-config), so it is already in the pipe.
    let line = first_line(&mut served.child, Duration::from_secs(5)).expect("the listening line");
    let addr = line
        .trim()
        .strip_prefix("kubegate listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    assert_eq!(http_status(&addr, "/readyz"), 200, "/readyz at READY=1");
    addr
}

fn wait_exit(child: &mut Child, within: Duration) -> Option<i32> {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            return st.code();
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn ready_once_when_serving_reloading_around_sighup_stopping_on_sigterm() {
    let _dog = watchdog(240);
    let dir = temp_dir("notify-sock");
    let path = dir.join("notify.sock");
    let sock = UnixDatagram::bind(&path).expect("bind the notify socket");
    let mut served = Served::start(path.to_str().expect("utf-8 path"));
    let addr = ready(&mut served, &sock);

    // Still serving, and nothing else was announced meanwhile.
    assert_eq!(http_status(&addr, "/healthz"), 200);
    assert_eq!(
        recv(&sock, Duration::from_millis(200)),
        None,
        "a second message"
    );

    // SIGHUP: RELOADING=1 with the monotonic time, then READY=1.
    let before = monotonic_usec();
    served.signal(1);
    let msg = recv(&sock, Duration::from_secs(30)).expect("RELOADING=1");
    let after = monotonic_usec();
    let fields: BTreeMap<&str, &str> = msg.lines().filter_map(|l| l.split_once('=')).collect();
    assert_eq!(fields.get("RELOADING"), Some(&"1"), "{msg:?}");
    let usec: u64 = fields
        .get("MONOTONIC_USEC")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no MONOTONIC_USEC in {msg:?}"));
    assert!(
        (before..=after).contains(&usec),
        "{before} <= {usec} <= {after}"
    );
    assert_eq!(
        recv(&sock, Duration::from_secs(30)).as_deref(),
        Some("READY=1")
    );
    assert_eq!(
        http_status(&addr, "/readyz"),
        200,
        "serving after the reload"
    );

    // SIGTERM: STOPPING=1, then a clean exit.
    served.signal(15);
    assert_eq!(
        recv(&sock, Duration::from_secs(30)).as_deref(),
        Some("STOPPING=1")
    );
    assert_eq!(
        wait_exit(&mut served.child, Duration::from_secs(30)),
        Some(0),
        "log:\n{}",
        served.log()
    );
    assert_eq!(
        recv(&sock, Duration::from_millis(200)),
        None,
        "after STOPPING=1"
    );
}

/// CLOCK_MONOTONIC in microseconds, as systemd's MONOTONIC_USEC.
fn monotonic_usec() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(t.tv_sec * 1_000_000 + t.tv_nsec / 1_000).expect("positive")
}

#[test]
fn ready_reaches_an_abstract_notify_socket() {
    use std::os::linux::net::SocketAddrExt;
    let _dog = watchdog(240);
    let name = format!("kubegate-test-notify-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
        .expect("abstract address");
    let sock = UnixDatagram::bind_addr(&addr).expect("bind the abstract socket");
    let mut served = Served::start(&format!("@{name}"));
    ready(&mut served, &sock);
    served.signal(15);
    assert_eq!(
        recv(&sock, Duration::from_secs(30)).as_deref(),
        Some("STOPPING=1")
    );
    assert_eq!(
        wait_exit(&mut served.child, Duration::from_secs(30)),
        Some(0)
    );
}

// ------------------------------------------------------------ the unit

/// `[Section] Key=Value` lines, values in order (a key may repeat).
fn parse_unit(text: &str) -> BTreeMap<(String, String), Vec<String>> {
    let mut out: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut section = String::new();
    for raw in text.lines() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        assert!(!line.ends_with('\\'), "keep unit lines unwrapped: {line}");
        if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = s.to_string();
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("not Key=Value: {line}"));
        out.entry((section.clone(), k.trim().to_string()))
            .or_default()
            .push(v.trim().to_string());
    }
    out
}

fn seconds(v: &str) -> u64 {
    let v = v.trim();
    let n = v.strip_suffix('s').unwrap_or(v);
    n.parse()
        .unwrap_or_else(|_| panic!("{v:?}: write plain seconds"))
}

#[test]
fn the_unit_is_hardened_and_starts_a_real_command() {
    let text = std::fs::read_to_string(UNIT).expect("read scripts/kubegate.service");
    let unit = parse_unit(&text);
    let one = |k: &str| -> String {
        let v = unit
            .get(&("Service".to_string(), k.to_string()))
            .unwrap_or_else(|| panic!("[Service] {k}= is missing"));
        assert_eq!(v.len(), 1, "[Service] {k}= given {} times", v.len());
        v[0].clone()
    };
    for (k, want) in [
        ("Type", "notify"),
        ("DynamicUser", "yes"),
        ("StateDirectory", "kubegate"),
        ("ConfigurationDirectory", "kubegate"),
        ("LogsDirectory", "kubegate"),
        ("ExecReload", "/bin/kill -HUP $MAINPID"),
        ("Restart", "on-failure"),
        ("RestartPreventExitStatus", "2"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"),
        ("NoNewPrivileges", "yes"),
        ("ProtectKernelTunables", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectKernelLogs", "yes"),
        ("ProtectControlGroups", "yes"),
        ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6"),
        ("LockPersonality", "yes"),
        ("MemoryDenyWriteExecute", "yes"),
        ("SystemCallFilter", "@system-service"),
        ("SystemCallArchitectures", "native"),
        ("CapabilityBoundingSet", ""),
        ("AmbientCapabilities", ""),
        ("UMask", "0077"),
    ] {
        assert_eq!(one(k), want, "[Service] {k}=");
    }
    assert_eq!(
        unit.get(&("Install".to_string(), "WantedBy".to_string())),
        Some(&vec!["multi-user.target".to_string()])
    );

    // Stop bound above the daemon's own (the config default).
    let defaults = kubegate::config::Config::parse("[cluster]\nmode = \"sim\"\n", Path::new("/"))
        .expect("the minimal config");
    let grace = defaults.server.shutdown_grace_secs;
    let stop = seconds(&one("TimeoutStopSec"));
    assert!(
        stop > grace,
        "TimeoutStopSec={stop} must exceed shutdown_grace_secs={grace}"
    );
    let nofile: u64 = one("LimitNOFILE").parse().expect("LimitNOFILE: one number");
    assert!(nofile >= 65536, "LimitNOFILE={nofile}");

    // ExecStart: the installed binary, `serve`, and flags kubegate accepts.
    let exec = one("ExecStart");
    let argv: Vec<&str> = exec.split_whitespace().collect();
    assert_eq!(argv[0], "/usr/local/bin/kubegate", "{exec}");
    assert_eq!(argv[1], "serve", "{exec}");
    assert_eq!(
        argv[2..],
        ["--config", "/etc/kubegate/config.toml"],
        "{exec}"
    );
    let help = Command::new(KUBEGATE)
        .arg("--help")
        .output()
        .expect("kubegate --help");
    let usage = String::from_utf8_lossy(&help.stdout);
    assert!(
        usage.contains(&format!("kubegate serve {}", "--config FILE")),
        "kubegate --help does not show `serve --config FILE`:\n{usage}"
    );
    // The same flags parse (check-config shares serve's), on the config
    // install.sh writes.
    let dest = temp_dir("unit-check");
    let out = install(&dest, &[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    let staged = format!("{}{}", dest.display(), argv[3]);
    let check = Command::new(KUBEGATE)
        .arg("check-config")
        .arg(argv[2])
        .arg(&staged)
        .output()
        .expect("kubegate check-config");
    assert_eq!(
        (
            check.status.code(),
            String::from_utf8_lossy(&check.stdout).trim()
        ),
        (Some(0), "config ok"),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
}

#[test]
fn systemd_analyze_verify_accepts_the_unit() {
    let _dog = watchdog(120);
    let found = Command::new("systemd-analyze")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        println!("SKIPPED: systemd-analyze is not installed here; the structural check (the_unit_is_hardened_and_starts_a_real_command) still ran");
        return;
    }
    // verify checks that ExecStart's binary exists: point it at this build.
    let dir = temp_dir("unit-verify");
    let text = std::fs::read_to_string(UNIT).expect("read the unit");
    let text = text.replace(
        "ExecStart=/usr/local/bin/kubegate ",
        &format!("ExecStart={KUBEGATE} "),
    );
    let path = dir.join("kubegate.service");
    std::fs::write(&path, text).expect("write the unit");
    let mut c = Command::new("systemd-analyze");
    c.arg("verify").arg(&path);
    let out = common::run_with_timeout(c, None, Duration::from_secs(90));
    let said = format!("{}{}", out.stdout_str(), out.stderr_str());
    // Anything about our unit (unknown keys, bad values) is a failure; lines
    // about the host's own units are not ours to judge.
    let ours: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("kubegate.service"))
        .collect();
    assert!(
        out.code == Some(0) && ours.is_empty(),
        "systemd-analyze verify ({:?}):\n{said}",
        out.code
    );
}

// ------------------------------------------------------------ install.sh

fn install(destdir: &Path, args: &[&str]) -> common::Output {
    let mut c = Command::new(INSTALL);
    c.env("DESTDIR", destdir)
        .arg("--binary")
        .arg(KUBEGATE)
        .args(args);
    common::run_with_timeout(c, None, Duration::from_secs(120))
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn install_sh_stages_the_service_and_never_overwrites_the_config() {
    let _dog = watchdog(240);
    let dest = temp_dir("install");
    let out = install(&dest, &[]);
    assert_eq!(
        out.code,
        Some(0),
        "{}\n{}",
        out.stdout_str(),
        out.stderr_str()
    );
    assert!(
        out.stdout_str().contains("not running systemctl"),
        "{}",
        out.stdout_str()
    );
    let bin = dest.join("usr/local/bin/kubegate");
    let unit = dest.join("etc/systemd/system/kubegate.service");
    let conf_dir = dest.join("etc/kubegate");
    let config = conf_dir.join("config.toml");
    assert_eq!(mode(&bin), 0o755);
    assert_eq!(mode(&unit), 0o644);
    assert_eq!(mode(&conf_dir), 0o755);
    assert_eq!(mode(&config), 0o644);
    assert_eq!(
        std::fs::read(&bin).expect("binary"),
        std::fs::read(KUBEGATE).expect("built binary")
    );
    assert_eq!(
        std::fs::read_to_string(&unit).expect("unit"),
        std::fs::read_to_string(UNIT).expect("source unit"),
        "the default prefix installs the unit as it is"
    );
    // The example, with state and audit log where the sandbox lets it write.
    let text = std::fs::read_to_string(&config).expect("config");
    assert!(
        text.contains("\nstate_dir = \"/var/lib/kubegate\"\n"),
        "{text}"
    );
    assert!(
        text.contains("\naudit_log = \"/var/log/kubegate/audit.jsonl\"\n"),
        "{text}"
    );
    let c = kubegate::config::Config::parse(&text, Path::new("/etc/kubegate"))
        .expect("the installed config is valid");
    assert_eq!(c.server.state_dir, Path::new("/var/lib/kubegate"));

    // No published token: one principal whose random token is in a 0600
    // file beside the config (its digest only in the config); the output
    // names the file, never the token.
    let token_file = conf_dir.join("admin.token");
    assert_eq!(mode(&token_file), 0o600);
    let token = std::fs::read_to_string(&token_file).expect("token file");
    let token = token.trim();
    assert!(
        token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit()),
        "not 32 random bytes in hex: {} characters",
        token.len()
    );
    assert!(
        !text.contains(kubegate::config::DEMO_TOKEN_SHA256),
        "{text}"
    );
    assert!(!text.contains("kubegate-demo-token"), "{text}");
    assert_eq!(c.demo_token_principal(), None);
    assert_eq!(c.principals.len(), 1);
    assert_eq!(c.principals[0].name, "admin");
    assert_eq!(
        c.principals[0].token_sha256,
        common::daemon::token_digest(token)
    );
    let said = out.stdout_str();
    assert!(!said.contains(token), "install.sh printed the token");
    assert!(
        said.contains(&token_file.display().to_string()),
        "the token file's path is not shown: {said}"
    );
    // A config removed and installed again matches the token file kept.
    std::fs::remove_file(&config).expect("remove config");
    let out = install(&dest, &[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    assert!(
        !out.stdout_str().contains(token),
        "install.sh printed the token"
    );
    let again = std::fs::read_to_string(&config).expect("config");
    assert_eq!(again, text, "the reinstalled config differs");
    assert_eq!(mode(&token_file), 0o600);

    // Again, with the config edited: kept as it is; the rest unchanged.
    let edited = format!("{text}\n# my edit\n");
    std::fs::write(&config, &edited).expect("edit");
    let out = install(&dest, &[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    let said = out.stdout_str();
    assert!(
        said.contains(&format!("kept       {}", config.display())),
        "{said}"
    );
    assert!(
        said.contains(&format!("unchanged  {}", bin.display())),
        "{said}"
    );
    assert!(
        said.contains(&format!("unchanged  {}", unit.display())),
        "{said}"
    );
    assert_eq!(std::fs::read_to_string(&config).expect("config"), edited);
    assert_eq!(
        std::fs::read_to_string(&token_file)
            .expect("token file")
            .trim(),
        token,
        "the token file changed"
    );

    // Another prefix: the unit follows the binary.
    let out = install(&dest, &["--prefix", "/opt/kubegate"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    assert_eq!(mode(&dest.join("opt/kubegate/bin/kubegate")), 0o755);
    let unit_text = std::fs::read_to_string(&unit).expect("unit");
    assert!(
        unit_text.contains(
            "\nExecStart=/opt/kubegate/bin/kubegate serve --config /etc/kubegate/config.toml\n"
        ),
        "{unit_text}"
    );

    // --dry-run changes nothing.
    let dry = temp_dir("install-dry");
    let out = install(&dry, &["--dry-run"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    assert!(
        out.stdout_str().contains("would install"),
        "{}",
        out.stdout_str()
    );
    assert_eq!(
        std::fs::read_dir(&dry).expect("read dir").count(),
        0,
        "--dry-run created files"
    );

    // Usage errors exit 2 with a message.
    let out = install(&dry, &["--bogus"]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr_str().contains("unknown option --bogus"),
        "{}",
        out.stderr_str()
    );
    let out = install(&dry, &["--prefix", "relative"]);
    assert_eq!(out.code, Some(2));
}
