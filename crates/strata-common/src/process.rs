//! Process-wide settings every Strata binary applies when it starts.
//!
//! **Transparent huge pages off.** With THP enabled for the allocator's arenas (mimalloc
//! asks for them where the kernel's mode is `madvise`), a fresh 1 MiB buffer faults in a
//! whole 2 MiB page that the kernel zeroes first. A cold point read into a columnar level
//! allocates such buffers for every column's dictionary page; zeroing them was a quarter of
//! its CPU (docs/BENCHMARKS.md, "cold point reads without transparent huge pages"). With THP
//! off, cold reads cost about a fifth less CPU on average and vary far less (p99 21-33 ms
//! against 20-76 ms), with no change beyond the noise to warm scans or the write path's
//! tail. Databases with churning heaps advise the same (Redis, MongoDB).
//! `STRATA_TRANSPARENT_HUGE_PAGES=on` keeps the kernel's setting.

/// The environment variable that keeps transparent huge pages as the kernel has them
/// (`on`); unset or `off` turns them off for the process.
pub const THP_ENV: &str = "STRATA_TRANSPARENT_HUGE_PAGES";

/// What [`huge_pages`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HugePages {
    /// Turned off for this process (and the processes it starts).
    Off,
    /// Left as the kernel has them (`on` was asked for).
    Kept,
    /// Not supported here (not Linux, or the kernel refused): left as they are.
    Unsupported,
}

/// Applies the transparent huge page setting `setting` (the value of [`THP_ENV`], if set):
/// `None` or `off` turns them off, `on` leaves them; anything else is an error naming the
/// accepted values, and changes nothing.
pub fn huge_pages(setting: Option<&str>) -> Result<HugePages, String> {
    match setting.map(str::trim) {
        Some("on") => Ok(HugePages::Kept),
        None | Some("off") | Some("") => Ok(off()),
        Some(other) => Err(format!(
            "{THP_ENV}={other:?}: expected `on` (keep the kernel's transparent huge pages) or `off` (the default)"
        )),
    }
}

/// Applies [`THP_ENV`] from the environment (see [`huge_pages`]); a bad value is reported
/// on stderr and THP are turned off, as by default.
pub fn huge_pages_from_env() -> HugePages {
    let value = std::env::var(THP_ENV).ok();
    match huge_pages(value.as_deref()) {
        Ok(done) => done,
        Err(e) => {
            eprintln!("warning: {e}; turning them off");
            off()
        }
    }
}

#[cfg(target_os = "linux")]
fn off() -> HugePages {
    // PR_SET_THP_DISABLE: a flag of the process's address space, checked at each fault,
    // inherited by children.
    match rustix::thread::disable_transparent_huge_pages(true) {
        Ok(()) => HugePages::Off,
        Err(_) => HugePages::Unsupported,
    }
}

#[cfg(not(target_os = "linux"))]
fn off() -> HugePages {
    HugePages::Unsupported
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_value_is_refused_with_the_accepted_ones_named() {
        let e = huge_pages(Some("maybe")).unwrap_err();
        assert!(e.contains(THP_ENV) && e.contains("`on`"), "{e}");
    }

    // One test, in this order: the flag is the process's, and only this test touches it.
    #[cfg(target_os = "linux")]
    #[test]
    fn on_and_a_bad_value_change_nothing_and_the_default_turns_them_off() {
        let before = rustix::thread::transparent_huge_pages_are_disabled().unwrap();
        assert_eq!(huge_pages(Some("on")), Ok(HugePages::Kept));
        assert!(huge_pages(Some("maybe")).is_err());
        assert_eq!(
            rustix::thread::transparent_huge_pages_are_disabled().unwrap(),
            before
        );
        assert_eq!(huge_pages(None), Ok(HugePages::Off));
        assert!(rustix::thread::transparent_huge_pages_are_disabled().unwrap());
        assert_eq!(huge_pages(Some("off")), Ok(HugePages::Off));
    }
}
