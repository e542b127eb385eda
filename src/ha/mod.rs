//! Several daemons with Kubernetes as the engine (docs/ha.md): the sans-IO
//! cores first. `lease` holds the rules of one Lease per daemon (acting
//! within the renew deadline, fenced by a 409, peers judged by how long
//! their record was seen unchanged); `claim` decides which survivor takes
//! which session of an expired peer; `clock` is the suspend-counting clock
//! they run on. Not wired into the daemon yet: `[ha]` does not exist in the
//! configuration until it is.

pub mod claim;
pub mod clock;
pub mod lease;
