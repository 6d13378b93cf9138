//! The controller's memory allocator: jemalloc, set up for a small resident set.
//!
//! The controller's heap churns: every watch event replaces a cached pod, every reconcile
//! builds and drops its plan, and creating 10,000 pods sends each one through several
//! events. glibc's malloc gives each contending thread an arena and returns freed memory
//! to the kernel only from the top of a heap, so freed memory stayed resident (109 MiB
//! steady with 10,000 pods cached) unless the process re-executed itself with one arena
//! and called `malloc_trim` (an FFI call, which the workspace lints forbid). jemalloc
//! purges freed pages itself (`madvise`), anywhere in its heap, once they have
//! been unused for the decay time, from a background thread even while the process idles.
//!
//! The binary sets jemalloc as its global allocator; the options are compiled into
//! jemalloc (`JEMALLOC_SYS_WITH_MALLOC_CONF` in `.cargo/config.toml`, and the
//! `background_threads` feature), so no environment or start-up code is needed, and
//! `_RJEM_MALLOC_CONF` can still override them for an experiment. [`Settings::read`]
//! reports what the running jemalloc uses; a unit test checks the build applied them.

use tikv_jemalloc_ctl::{Access as _, AsName as _, background_thread, config, opt};

/// The jemalloc options this build is meant to run with (the suggestion of jemalloc's
/// TUNING.md for a low resource consumption application, plus background purging):
/// one arena, so that every thread reuses the same free memory; a small thread cache;
/// dirty pages purged within a second of being freed; no lazily purged (muzzy) stage.
pub const MALLOC_CONF: &str = "narenas:1,tcache_max:1024,dirty_decay_ms:1000,muzzy_decay_ms:0";

/// What the running jemalloc is configured with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The compile-time options string (`--with-malloc-conf`).
    pub malloc_conf: &'static str,
    pub narenas: u32,
    pub background_thread: bool,
    pub dirty_decay_ms: isize,
    pub muzzy_decay_ms: isize,
}

impl Settings {
    /// Reads the settings through `mallctl`.
    pub fn read() -> Result<Self, tikv_jemalloc_ctl::Error> {
        Ok(Self {
            // mallctl hands the C string over with its terminating NUL
            malloc_conf: config::malloc_conf::read()?.trim_end_matches('\0'),
            narenas: opt::narenas::read()?,
            background_thread: background_thread::read()?,
            dirty_decay_ms: b"opt.dirty_decay_ms\0".name().read()?,
            muzzy_decay_ms: b"opt.muzzy_decay_ms\0".name().read()?,
        })
    }
}

/// The heap as jemalloc accounts it, in bytes (jemalloc's statistics are compiled in by
/// the `heap-stats` feature only).
#[cfg(feature = "heap-stats")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeapStats {
    /// Bytes in live allocations.
    pub allocated: usize,
    /// Bytes in pages holding live allocations.
    pub active: usize,
    /// Bytes of physically resident pages jemalloc maps (active, dirty, metadata).
    pub resident: usize,
    /// Bytes jemalloc keeps mapped but purged (virtual only).
    pub retained: usize,
}

#[cfg(feature = "heap-stats")]
impl HeapStats {
    /// Refreshes jemalloc's cached statistics and reads them.
    pub fn read() -> Result<Self, tikv_jemalloc_ctl::Error> {
        use tikv_jemalloc_ctl::{epoch, stats};
        epoch::advance()?;
        Ok(Self {
            allocated: stats::allocated::read()?,
            active: stats::active::read()?,
            resident: stats::resident::read()?,
            retained: stats::retained::read()?,
        })
    }
}

/// Logs [`HeapStats`] at debug level every `period`, forever.
#[cfg(feature = "heap-stats")]
pub async fn log_heap_stats(period: std::time::Duration) {
    const MIB: f64 = 1024.0 * 1024.0;
    let mut tick = tokio::time::interval(period);
    loop {
        tick.tick().await;
        let s = match HeapStats::read() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "reading jemalloc's statistics failed");
                return;
            }
        };
        tracing::debug!(
            allocated_mib = s.allocated as f64 / MIB,
            active_mib = s.active as f64 / MIB,
            resident_mib = s.resident as f64 / MIB,
            retained_mib = s.retained as f64 / MIB,
            "heap"
        );
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    fn conf_value<'a>(conf: &'a str, key: &str) -> Option<&'a str> {
        conf.split(',')
            .filter_map(|kv| kv.split_once(':'))
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| v)
            .next_back()
    }

    #[test]
    fn the_build_compiles_the_options_into_jemalloc() {
        let s = Settings::read().expect("mallctl");
        for kv in MALLOC_CONF.split(',') {
            let (k, v) = kv.split_once(':').expect("key:value");
            assert_eq!(
                conf_value(s.malloc_conf, k),
                Some(v),
                "{k} in --with-malloc-conf {:?} (JEMALLOC_SYS_WITH_MALLOC_CONF in .cargo/config.toml)",
                s.malloc_conf
            );
        }
        assert_eq!(conf_value(s.malloc_conf, "background_thread"), Some("true"));
    }

    #[test]
    fn the_running_jemalloc_uses_them() {
        // `_RJEM_MALLOC_CONF` may override them on purpose; then this says nothing.
        if std::env::var_os("_RJEM_MALLOC_CONF").is_some() {
            return;
        }
        let s = Settings::read().expect("mallctl");
        assert_eq!(s.narenas, 1);
        assert!(s.background_thread);
        assert_eq!(s.dirty_decay_ms, 1000);
        assert_eq!(s.muzzy_decay_ms, 0);
    }

    #[test]
    fn conf_value_takes_the_last_setting_of_a_key() {
        assert_eq!(conf_value("a:1,b:2,a:3", "a"), Some("3"));
        assert_eq!(conf_value("a:1", "b"), None);
    }
}
