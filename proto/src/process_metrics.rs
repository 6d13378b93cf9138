//! The Prometheus standard process metrics, as every Prometheus client library exports them
//! (names and types of the Go and Python clients), for both binaries:
//!
//! | metric | type | from |
//! |---|---|---|
//! | `process_cpu_seconds_total` | counter | `/proc/self/stat` utime + stime |
//! | `process_resident_memory_bytes` | gauge | `/proc/self/status` VmRSS |
//! | `process_virtual_memory_bytes` | gauge | `/proc/self/stat` vsize |
//! | `process_start_time_seconds` | gauge | `/proc/self/stat` starttime + boot time (`/proc/stat` btime) |
//! | `process_open_fds` | gauge | entries of `/proc/self/fd` |
//! | `process_max_fds` | gauge | `/proc/self/limits` "Max open files" (soft) |
//!
//! [`ProcessCollector`] reads them at every scrape; register it in a registry without a
//! prefix (the names are standard, unprefixed). On systems without `/proc` it exports
//! nothing. The parsing is pure ([`parse_stat`], [`parse_vm_rss`], [`parse_btime`],
//! [`parse_max_fds`]).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Clock ticks per second of the times in `/proc` (`USER_HZ`, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// What `/proc/self/stat` says of the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    /// utime + stime, in clock ticks.
    pub cpu_ticks: u64,
    /// Start after boot, in clock ticks.
    pub start_ticks: u64,
    /// Virtual memory size, bytes.
    pub vsize: u64,
}

/// Fields 14, 15 (utime, stime), 22 (starttime) and 23 (vsize) of
/// `/proc/self/stat`; the command name (field 2) may hold spaces and parentheses, so fields
/// are counted after its last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name, field 3 is at index 0: field N is at index N - 3.
    let num = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        cpu_ticks: num(14)?.checked_add(num(15)?)?,
        start_ticks: num(22)?,
        vsize: num(23)?,
    })
}

/// `VmRSS` in bytes from the text of `/proc/self/status`.
pub fn parse_vm_rss(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut parts = line["VmRSS:".len()..].split_whitespace();
    let value: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") | None => value.checked_mul(1024),
        Some(_) => None,
    }
}

/// `btime` (boot time, seconds since the epoch) of `/proc/stat`.
pub fn parse_btime(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The soft limit of "Max open files" in `/proc/self/limits` (`None` when unlimited).
pub fn parse_max_fds(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The standard process metrics, read at every scrape.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessCollector;

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: f64,
) -> Result<(), std::fmt::Error> {
    let metric = ConstGauge::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let read = |path: &str| std::fs::read_to_string(path).ok();
        if let Some(stat) = read("/proc/self/stat").as_deref().and_then(parse_stat) {
            let cpu = ConstCounter::new(stat.cpu_ticks as f64 / TICKS_PER_SECOND);
            cpu.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                cpu.metric_type(),
            )?)?;
            gauge(
                &mut encoder,
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                stat.vsize as f64,
            )?;
            if let Some(boot) = read("/proc/stat").as_deref().and_then(parse_btime) {
                gauge(
                    &mut encoder,
                    "process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds.",
                    boot as f64 + stat.start_ticks as f64 / TICKS_PER_SECOND,
                )?;
            }
        }
        if let Some(rss) = read("/proc/self/status").as_deref().and_then(parse_vm_rss) {
            gauge(
                &mut encoder,
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                rss as f64,
            )?;
        }
        if let Ok(entries) = std::fs::read_dir("/proc/self/fd") {
            // The directory handle being read is one of the entries: not counted.
            let open = entries.count().saturating_sub(1);
            gauge(
                &mut encoder,
                "process_open_fds",
                "Number of open file descriptors.",
                open as f64,
            )?;
        }
        if let Some(max) = read("/proc/self/limits").as_deref().and_then(parse_max_fds) {
            gauge(
                &mut encoder,
                "process_max_fds",
                "Maximum number of open file descriptors.",
                max as f64,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_name() {
        // A command name with spaces and a parenthesis must not shift the fields.
        let stat = "4242 (inplace (ctl) x) S 1 4242 4242 0 -1 4194560 1200 0 0 0 \
                    250 50 0 0 20 0 9 0 123456 30000000 5000 18446744073709551615";
        assert_eq!(
            parse_stat(stat),
            Some(Stat {
                cpu_ticks: 300,
                start_ticks: 123_456,
                vsize: 30_000_000,
            })
        );
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 1 2"), None);
        let live = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        assert!(live.is_empty() || parse_stat(&live).is_some(), "{live}");
    }

    #[test]
    fn vm_rss_is_read_in_bytes() {
        let status = "Name:\tinplace\nVmPeak:\t  9000 kB\nVmRSS:\t   2048 kB\nThreads:\t9\n";
        assert_eq!(parse_vm_rss(status), Some(2048 * 1024));
        assert_eq!(parse_vm_rss("VmRSS: 12 MB"), None);
        assert_eq!(parse_vm_rss("Name: x"), None);
    }

    #[test]
    fn boot_time_and_fd_limit() {
        assert_eq!(
            parse_btime("cpu  1 2 3\nbtime 1700000000\nprocesses 9\n"),
            Some(1_700_000_000)
        );
        assert_eq!(parse_btime("cpu 1\n"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max cpu time              unlimited            unlimited            seconds\n\
                      Max open files            1048576              1048576              files\n";
        assert_eq!(parse_max_fds(limits), Some(1_048_576));
        assert_eq!(
            parse_max_fds("Max open files            unlimited            unlimited  files\n"),
            None
        );
    }

    /// The exposition has every standard name with its type, unprefixed.
    #[test]
    fn the_collector_exports_the_standard_names() {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for (family, kind) in [
            ("process_cpu_seconds", "counter"),
            ("process_resident_memory_bytes", "gauge"),
            ("process_virtual_memory_bytes", "gauge"),
            ("process_start_time_seconds", "gauge"),
            ("process_open_fds", "gauge"),
            ("process_max_fds", "gauge"),
        ] {
            assert!(
                text.contains(&format!("# TYPE {family} {kind}\n")),
                "{family}: {text}"
            );
        }
        assert!(text.contains("\nprocess_cpu_seconds_total "), "{text}");
        let rss: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(rss > 1_000_000.0, "{rss}");
        let open: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("process_open_fds "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(open >= 3.0, "stdin, stdout, stderr at least: {open}");
    }
}
