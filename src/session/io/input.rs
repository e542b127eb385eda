//! The input side of an [`AppIo`]: the current attach's stdin writer and
//! resize controller ([`AppIo::set_input`]), written by viewers through
//! [`AppIo::stdin`] and [`AppIo::resize`]; the last size asked for is
//! kept for the next attach.

use super::ring::AppIo;
use crate::kube::remote::{Controller, StdinWriter, TermSize};
use parking_lot::Mutex;
use std::sync::Arc;

/// The current attach's input side (see [`AppIo::set_input`]).
pub struct AttachInput {
    pub stdin: StdinWriter,
    pub controller: Controller,
    /// Resizes reach only a tty app.
    pub tty: bool,
}

/// The installed input of the current attach.
pub(super) struct CurrentInput {
    pub(super) id: u64,
    pub(super) stdin: Arc<Mutex<StdinWriter>>,
    pub(super) controller: Controller,
    pub(super) tty: bool,
}

/// The current attach's input, if any, and the last size asked for.
#[derive(Default)]
pub(super) struct InputSlot {
    pub(super) current: Option<CurrentInput>,
    pub(super) next_id: u64,
    /// The last size a viewer asked for: the next tty attach starts with it.
    pub(super) size: Option<TermSize>,
}

impl AppIo {
    /// Installs (or with None removes) the current attach's input. Returns
    /// an id [`AppIo::clear_input`] takes, so a late teardown of an old
    /// attach never removes its successor's input.
    pub fn set_input(&self, input: Option<AttachInput>) -> u64 {
        let mut slot = self.input.lock();
        slot.next_id += 1;
        let id = slot.next_id;
        slot.current = input.map(|i| CurrentInput {
            id,
            stdin: Arc::new(Mutex::new(i.stdin)),
            controller: i.controller,
            tty: i.tty,
        });
        id
    }

    /// Removes the input installed with `id`, if it is still the current one.
    pub fn clear_input(&self, id: u64) {
        let mut slot = self.input.lock();
        if slot.current.as_ref().is_some_and(|c| c.id == id) {
            slot.current = None;
        }
    }

    /// Whether an attach's input is installed.
    pub fn has_input(&self) -> bool {
        self.input.lock().current.is_some()
    }

    /// Writes to the current attach's stdin, waiting while its queue is full
    /// (backpressure on the caller only: output and other viewers go on).
    /// False when there is no attach (the bytes are dropped) or it ended.
    pub fn stdin(&self, data: &[u8]) -> bool {
        if data.is_empty() {
            return true;
        }
        let writer = match &self.input.lock().current {
            Some(c) => c.stdin.clone(),
            None => return false,
        };
        // Outside the slot's lock: a write may wait, and must not hold up
        // set_input/clear_input or resizes.
        let ok = writer.lock().write(data).is_ok();
        ok
    }

    /// Resizes the app's terminal (tty apps only; ignored otherwise). The
    /// size is kept for the next attach. False when nothing was sent.
    pub fn resize(&self, cols: u16, rows: u16) -> bool {
        if cols == 0 || rows == 0 {
            return false;
        }
        let size = TermSize {
            width: cols,
            height: rows,
        };
        let controller = {
            let mut slot = self.input.lock();
            slot.size = Some(size);
            match &slot.current {
                Some(c) if c.tty => c.controller.clone(),
                _ => return false,
            }
        };
        controller.resize(size).is_ok()
    }

    /// The last size a viewer asked for.
    pub fn term_size(&self) -> Option<TermSize> {
        self.input.lock().size
    }
}
