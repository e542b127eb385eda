//! The exec gateway's part of a Deployment's TCP tunnel
//! (docs/api.md#tunnels): the same validation and workspace check as an
//! exec, before any cluster call, then the Deployment resolved to a
//! running pod with its IP; the audit line when the tunnel ends. The
//! tunnel itself (the route, the pod connection, the splice) is the
//! daemon's (`server::routes`).

use super::audit::TunnelRecord;
use super::frames::Target;
use super::gateway::{check_workspace, Gateway};
use super::resolve::resolve_pod;
use super::validate::ExecSpec;
use crate::api::{ApiError, Identity};
use crossbeam_channel::Receiver;

impl Gateway {
    /// Checks `spec` (its command is not looked at) and the principal's
    /// workspace. Nothing may reach the cluster before this passed; a
    /// refusal here is answered and counted, not audited (as an exec's).
    pub fn check_tunnel(&self, who: &Identity, spec: &ExecSpec) -> Result<(), ApiError> {
        spec.validate_target()?;
        check_workspace(who, spec)
    }

    /// Resolves a checked `spec`'s Deployment to a running pod: the target
    /// and the pod's IP. From here on every outcome is audited (a
    /// Deployment of another workspace included).
    pub fn tunnel_target(
        &self,
        who: &Identity,
        spec: &ExecSpec,
    ) -> Result<(Target, String), ApiError> {
        let acting = self.as_principal(who)?;
        resolve_pod(acting.client(self), &self.settings.ownership, spec)
    }

    /// Disconnected when the daemon stops (tunnels end with 1001).
    pub fn stop_signal(&self) -> Receiver<()> {
        self.stop_rx.clone()
    }

    /// Writes a tunnel's audit line (when the audit log is on).
    pub fn audit_tunnel(&self, r: &TunnelRecord<'_>) {
        if let Some(a) = &self.audit {
            // A failure is logged (once) and counted by the audit log.
            let _ = a.record(r);
        }
    }
}
