//! A panic inside a protocol core (or the checker) ends its seed, not the
//! sweep: the seed is reported failed with the panic's message, and the
//! other seeds run on.

use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    /// This thread is inside [`catch`]: its panics are reported, not printed.
    static CATCHING: Cell<bool> = const { Cell::new(false) };
    /// Where the last caught panic happened (`file:line`).
    static LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Runs `f`; a panic becomes `Err("message (at file:line)")`. On this thread
/// and while `f` runs, the default hook's report is replaced by that text,
/// which the seed's failure report prints; panics anywhere else are printed
/// as before.
pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if CATCHING.with(Cell::get) {
                let at = info
                    .location()
                    .map(|l| format!("{}:{}", l.file(), l.line()));
                LOCATION.with(|w| *w.borrow_mut() = at);
            } else {
                previous(info);
            }
        }));
    });
    let outer = CATCHING.with(|c| c.replace(true));
    // The world that panicked is dropped, never used again.
    let r = panic::catch_unwind(AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(outer));
    r.map_err(|payload| {
        let msg = (payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(a panic without a message)".into());
        match LOCATION.with(|w| w.borrow_mut().take()) {
            Some(at) => format!("{msg} (at {at})"),
            None => msg,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_its_message_and_location() {
        assert_eq!(catch(|| 7), Ok(7));
        let e = catch(|| -> u32 { panic!("boom {}", 3) }).unwrap_err();
        assert!(e.starts_with("boom 3 (at "), "{e}");
        assert!(e.contains("panics.rs:"), "{e}");
        let nested = catch(|| catch(|| panic!("inner")).unwrap_err());
        assert!(nested.unwrap().starts_with("inner"));
        assert!(!CATCHING.with(Cell::get), "restored after use");
    }
}
