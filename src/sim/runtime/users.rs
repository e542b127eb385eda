//! Host users for pod processes: the credentials a process runs with, and
//! whether this sim may hand them out at all.
//!
//! The sim switches users only when it holds every capability the job
//! needs (as root it does): setting the credentials (CAP_SETUID,
//! CAP_SETGID), giving pod folders and ptys to a pod's user (CAP_CHOWN,
//! CAP_FOWNER), removing a pod's folder whatever its files' modes
//! (CAP_DAC_OVERRIDE) and signalling the pod's processes (CAP_KILL).
//! Without them, every process runs with the sim's own uid and the sim
//! isolates nothing between pods (docs/sim.md, "Pod users").

/// The credentials of one process: uid, primary gid and supplementary
/// groups (`setgroups`, then `setresgid`, then `setresuid`, all three ids).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct User {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

impl User {
    /// The shim's arguments that carry this user.
    pub(super) fn shim_args(&self) -> Vec<String> {
        let groups: Vec<String> = self.groups.iter().map(u32::to_string).collect();
        vec![
            "--uid".into(),
            self.uid.to_string(),
            "--gid".into(),
            self.gid.to_string(),
            "--groups".into(),
            groups.join(","),
        ]
    }
}

/// The capabilities (bit, name) the sim needs to run pods as their own
/// users.
const NEEDED: [(u32, &str); 6] = [
    (0, "CAP_CHOWN"),
    (1, "CAP_DAC_OVERRIDE"),
    (3, "CAP_FOWNER"),
    (5, "CAP_KILL"),
    (6, "CAP_SETGID"),
    (7, "CAP_SETUID"),
];

/// The needed capabilities missing from this process's effective set
/// (empty: it can switch users). An unreadable `/proc/self/status` counts
/// as none held.
pub fn missing_capabilities() -> Vec<&'static str> {
    let eff = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| parse_cap_eff(&s))
        .unwrap_or(0);
    NEEDED
        .iter()
        .filter(|(bit, _)| eff & (1u64 << bit) == 0)
        .map(|(_, name)| *name)
        .collect()
}

/// Whether this process may run pod processes as other users.
pub fn can_switch_users() -> bool {
    missing_capabilities().is_empty()
}

fn parse_cap_eff(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line["CapEff:".len()..].trim(), 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_effective_set() {
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t00000000000000e1\n";
        assert_eq!(parse_cap_eff(status), Some(0xe1));
        assert_eq!(parse_cap_eff("Name:\tx\n"), None);
    }

    #[test]
    fn shim_arguments() {
        let u = User {
            uid: 200001,
            gid: 200001,
            groups: vec![200001, 5],
        };
        assert_eq!(
            u.shim_args(),
            ["--uid", "200001", "--gid", "200001", "--groups", "200001,5"]
        );
    }
}
