//! The binary's memory allocator: mimalloc when the process is the sidecar, the system's
//! (glibc's, tuned by `main`) for every other subcommand.
//!
//! Why two: the sidecar allocates and frees a few hundred small blocks per call, and glibc's
//! malloc and free were a fifth of its instructions; mimalloc takes 14 % off the whole call. The
//! controller holds many long-lived objects instead, and there mimalloc's arenas cost a quarter
//! more resident memory (85 → 111 MiB at 1,000 McpServers) against the chart's limit. The
//! figures are in `bench/profile.sh` and `bench/memory.sh`.
//!
//! Every block must go back to the allocator that gave it, so the choice is made once, before
//! the first allocation, and never changes: the C runtime runs `.init_array` entries before
//! Rust's own start-up code and hands them the arguments; `choose_at_load` picks mimalloc when
//! its subcommand is `sidecar`. An allocation that
//! comes first anyway (another platform, another loader) settles the choice on the system's.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU8, Ordering};

use mimalloc::MiMalloc;

const UNDECIDED: u8 = 0;
const SYSTEM: u8 = 1;
const MIMALLOC: u8 = 2;

static CHOICE: AtomicU8 = AtomicU8::new(UNDECIDED);

/// The global allocator: routes every call by [`CHOICE`].
pub struct ByRole;

impl ByRole {
    #[inline]
    fn mimalloc() -> bool {
        match CHOICE.load(Ordering::Relaxed) {
            MIMALLOC => true,
            SYSTEM => false,
            _ => {
                // Nothing chose before this first allocation: the system's, for good.
                let _ = CHOICE.compare_exchange(
                    UNDECIDED,
                    SYSTEM,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
                CHOICE.load(Ordering::Relaxed) == MIMALLOC
            }
        }
    }
}

// SAFETY: each method forwards to one allocator, the same one for the whole process (CHOICE
// is set once, before the first allocation, and never changes), so a block is always freed or
// resized by the allocator that made it.
unsafe impl GlobalAlloc for ByRole {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, forwarded.
        unsafe {
            if Self::mimalloc() {
                MiMalloc.alloc(layout)
            } else {
                System.alloc(layout)
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, forwarded.
        unsafe {
            if Self::mimalloc() {
                MiMalloc.alloc_zeroed(layout)
            } else {
                System.alloc_zeroed(layout)
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, forwarded to the allocator that made the block.
        unsafe {
            if Self::mimalloc() {
                MiMalloc.dealloc(ptr, layout)
            } else {
                System.dealloc(ptr, layout)
            }
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract, forwarded to the allocator that made the block.
        unsafe {
            if Self::mimalloc() {
                MiMalloc.realloc(ptr, layout, new_size)
            } else {
                System.realloc(ptr, layout, new_size)
            }
        }
    }
}

/// Run by the C runtime before `main` and before any Rust allocation, with the process's
/// arguments (glibc passes them to `.init_array` entries).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[used]
#[unsafe(link_section = ".init_array")]
static CHOOSE_AT_LOAD: unsafe extern "C" fn(
    libc::c_int,
    *const *const libc::c_char,
    *const *const libc::c_char,
) = choose_at_load;

#[cfg(all(target_os = "linux", target_env = "gnu"))]
unsafe extern "C" fn choose_at_load(
    argc: libc::c_int,
    argv: *const *const libc::c_char,
    _env: *const *const libc::c_char,
) {
    if argv.is_null() {
        return;
    }
    let count = usize::try_from(argc).unwrap_or(0);
    let args = (1..count).map_while(|i| {
        // SAFETY: glibc passes argc entries of argv, each a NUL-terminated string (or null).
        unsafe {
            let arg = *argv.add(i);
            (!arg.is_null()).then(|| std::ffi::CStr::from_ptr(arg).to_bytes())
        }
    });
    if runs_the_sidecar(args) {
        let _ = CHOICE.compare_exchange(UNDECIDED, MIMALLOC, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// Whether the arguments (after the program's name) run the `sidecar` subcommand: the first
/// one that is neither an option nor the value of the one global option that takes a separate
/// value (`--log-format json sidecar …`). Allocates nothing.
fn runs_the_sidecar<'a>(args: impl Iterator<Item = &'a [u8]>) -> bool {
    let mut value_next = false;
    for arg in args {
        if std::mem::take(&mut value_next) {
            continue;
        }
        if arg == b"--log-format" {
            value_next = true;
        } else if !arg.starts_with(b"-") {
            return arg == b"sidecar";
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::runs_the_sidecar;

    fn runs(args: &[&str]) -> bool {
        runs_the_sidecar(args.iter().map(|a| a.as_bytes()))
    }

    #[test]
    fn the_sidecar_is_told_by_its_subcommand_wherever_the_global_option_stands() {
        assert!(runs(&["sidecar", "--agent=a", "--log-format=json"]));
        assert!(runs(&["--log-format", "json", "sidecar", "--agent=a"]));
        assert!(runs(&["--log-format=json", "sidecar"]));
        assert!(!runs(&["controller", "--identity", "sidecar"]));
        assert!(!runs(&["--log-format", "sidecar", "controller"]));
        assert!(!runs(&["bridge", "--", "sidecar"]));
        assert!(!runs(&["--help"]));
        assert!(!runs(&[]));
    }
}
