//! `kubegate-soak`: the driver behind `scripts/soak.sh` (docs/RELIABILITY.md).
//!
//! The script starts a `kubegate sim` and a daemon (mode kubeconfig, pointed
//! at that sim) and hands both to this program, which:
//! - starts N watch sessions whose app prints numbered lines continuously
//!   (after a `go` on its stdin, so the first line is 0), and keeps one io
//!   client per session that disconnects and reconnects with `lastSeq`;
//! - runs M interactive exec streams in a loop, each echoing numbered lines
//!   back in lockstep and exiting 7 after the last;
//! - injects the sim's faults on a seeded schedule through `/sim/faults`;
//! - samples the daemon's RSS, threads and open fds after warm-up, in the
//!   middle and at the end (every client held connected meanwhile);
//! - stops every session, checks no session pod is left, prints the table
//!   and exits 1 when a bar fails (2 on a usage or set-up error).
//!
//! Every line and every echo is checked in order, so a lost, repeated or
//! reordered byte is seen; an exec's end must be its `exit` frame with code
//! 7, or (when a fault cut it) an `error` frame with a code: never a
//! made-up exit code.
//!
//! Modules: `args` (the command line), `wire` (plain HTTP and WebSocket
//! clients), `state` (what the workers share), `sessions`, `execs`,
//! `faults`, `samples`, `setup` (the sim's side), `run` (one soak, phase
//! by phase), `report` (the table and its bars), `error` ([`SoakError`]).

mod args;
mod error;
mod execs;
mod faults;
mod report;
mod run;
mod samples;
mod sessions;
mod setup;
mod state;
mod wire;

use error::SoakError;
use std::process::ExitCode;
use std::time::Duration;

/// Padding after each line number, so rings and sockets carry real bytes.
const PAD: usize = 90;
/// The session app: waits for `go`, then prints `N xxx…` lines, five every
/// quarter second. `read -t` is bash's sleep without a fork; at EOF on
/// stdin it would return at once, so it falls back to `sleep`.
const APP: &str = r#"read -r go
pad=$(printf '%090d' 0)
i=0
while :; do
  for k in 1 2 3 4 5; do echo "$i $pad"; i=$((i+1)); done
  read -r -t 0.25 _; rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -le 128 ]; then sleep 0.25; fi
done
"#;
const APP_NAME: &str = "seq";
/// The exec command: echoes `$1` lines back, then exits 7.
const EXEC_SCRIPT: &str =
    r#"i=0; while [ "$i" -lt "$1" ] && read -r l; do echo "$l"; i=$((i+1)); done; exit 7"#;
const EXEC_EXIT: i32 = 7;
/// Exit code of a killed container (SIGKILL).
const KILLED_EXIT: i64 = 137;
/// Longest wait for one awaited frame before a stream counts as stalled.
const STALL: Duration = Duration::from_secs(30);
/// A session whose output has not moved for this long at the end is down.
const QUIET_DOWN: Duration = Duration::from_secs(10);
/// Read timeout of client sockets: how often loops look at their flags
/// (200 ms).
const TICK: Duration = Duration::from_millis(200);
/// Drift bar, percent.
const DRIFT_BAR: f64 = 5.0;

fn main() -> ExitCode {
    let args = match args::parse_args(std::env::args_os().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("kubegate-soak: {e}\n{}", args::USAGE);
            return ExitCode::from(2);
        }
    };
    match run::run(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("kubegate-soak: {e}");
            ExitCode::from(2)
        }
    }
}
