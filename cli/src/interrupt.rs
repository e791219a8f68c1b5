//! Ctrl-C and SIGTERM. A member that vanishes looks like a crash to the others, and in a
//! domain of two that costs the one left its majority (it shuts down). So the first
//! signal only asks the running command to stop: `pub`, `sub` and `status` see
//! [`interrupted`] at their next step and leave the domain (a view change without this
//! member), then exit with [`EXIT_INTERRUPTED`]. A second signal exits at once.

use std::sync::atomic::{AtomicBool, Ordering};

/// Exit code after an interrupt (128 + SIGINT, as shells report it).
pub const EXIT_INTERRUPTED: u8 = 130;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Installs the handler (once; a failure to install leaves the default behaviour).
pub fn install() {
    let installed = ctrlc::set_handler(|| {
        if INTERRUPTED.swap(true, Ordering::AcqRel) {
            std::process::exit(i32::from(EXIT_INTERRUPTED));
        }
        eprintln!("spindle: stopping: leaving the domain (again to quit at once)");
    });
    if let Err(e) = installed {
        eprintln!("spindle: Ctrl-C will not leave the domain cleanly: {e}");
    }
}

/// True once Ctrl-C or SIGTERM arrived.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Acquire)
}

/// The failure an interrupted command ends with: `what` it had done, and the exit code
/// of an interrupt.
pub fn stopped(what: impl std::fmt::Display) -> crate::Fail {
    crate::Fail {
        code: EXIT_INTERRUPTED,
        message: format!("interrupted: {what}; left the domain"),
    }
}

/// The longest a command sleeps before it looks at [`interrupted`] again.
const SLEEP_SLICE: std::time::Duration = std::time::Duration::from_millis(50);

/// Sleeps `d`, looking at [`interrupted`] at least every 50 ms; true if interrupted
/// (before or during the sleep), which ends it early.
pub fn sleep(d: std::time::Duration) -> bool {
    let until = std::time::Instant::now() + d;
    loop {
        if interrupted() {
            return true;
        }
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return false;
        }
        std::thread::sleep(left.min(SLEEP_SLICE));
    }
}
