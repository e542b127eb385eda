//! The settings of the parts the daemon drives, built from its
//! configuration here, so those parts never read the config file's types:
//! the exec gateway's [`Settings`] and [`Limits`] from `[exec]` and
//! `[cluster]` (`exec` depends on no `config`, and `config` on no `exec`:
//! the tests here check that the two agree where both hold a number).

use std::time::Duration;

use crate::config::{Config, ExecSection};
use crate::exec::gateway::Settings;
use crate::exec::record::Bounds;
use crate::exec::resolve::Ownership;
use crate::exec::validate::Limits;

/// A configured count or size as a `usize` (saturating: the config's
/// `u64`s are validated positive, and a 32-bit host caps them).
pub(super) fn size(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// The exec request limits of `[exec]`.
pub fn exec_limits(x: &ExecSection) -> Limits {
    Limits {
        max_command_args: size(x.max_command_args),
        max_arg_bytes: size(x.max_arg_bytes),
        max_command_bytes: size(x.max_command_bytes),
        default_output_bytes: size(x.default_output_bytes),
        max_output_bytes: size(x.max_output_bytes),
        max_stdin_frame_bytes: size(x.max_stdin_frame_bytes),
        output_channel_frames: size(x.output_channel_frames),
    }
}

/// The exec gateway's settings: `[exec]`, and `cluster.managed_by` for the
/// Deployments it may reach.
pub fn exec_settings(cfg: &Config) -> Settings {
    let x = &cfg.exec;
    Settings {
        limits: exec_limits(x),
        ownership: Ownership {
            managed_by: cfg.cluster.managed_by.clone(),
            uid_label: x.workspace_uid_label.clone(),
        },
        idle_timeout: Duration::from_secs(x.idle_timeout_secs),
        max_duration: Duration::from_secs(x.max_duration_secs),
        ping_interval: Duration::from_secs(x.ping_interval_secs),
        max_sessions: size(x.max_sessions),
        max_sessions_per_principal: size(x.max_sessions_per_principal),
        recording_dir: x.recording_dir.clone(),
        recording_bounds: Bounds {
            max_bytes: x.recording_max_bytes,
            min_free_bytes: x.recording_min_free_bytes,
        },
        impersonate: cfg.cluster.impersonate,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exec_limits_keep_the_configs_defaults() {
        assert_eq!(exec_limits(&ExecSection::default()), Limits::default());
    }

    #[test]
    fn the_configs_minimums_are_execs() {
        assert_eq!(
            crate::config::MIN_AUDIT_MAX_BYTES,
            crate::exec::audit::MIN_MAX_BYTES
        );
        assert_eq!(
            crate::config::MIN_RECORDING_MAX_BYTES,
            crate::exec::record::MIN_MAX_BYTES
        );
    }

    #[test]
    fn the_exec_settings_are_the_configured_ones() {
        let cfg = Config::parse(
            "[cluster]\nmode = \"sim\"\nmanaged_by = \"team\"\n[exec]\nmax_command_args = 2\nidle_timeout_secs = 7\nmax_sessions = 3\n",
            std::path::Path::new("/etc/kubegate"),
        )
        .unwrap();
        let s = exec_settings(&cfg);
        assert_eq!(s.limits.max_command_args, 2);
        assert_eq!(s.ownership.managed_by, "team");
        assert_eq!(s.ownership.uid_label, cfg.exec.workspace_uid_label);
        assert_eq!(s.idle_timeout, Duration::from_secs(7));
        assert_eq!(s.max_sessions, 3);
        let d = ExecSection::default();
        assert_eq!(s.max_duration, Duration::from_secs(d.max_duration_secs));
        assert_eq!(s.ping_interval, Duration::from_secs(d.ping_interval_secs));
        assert_eq!(s.recording_bounds.max_bytes, d.recording_max_bytes);
        assert_eq!(
            s.recording_bounds.min_free_bytes,
            d.recording_min_free_bytes
        );
    }
}
