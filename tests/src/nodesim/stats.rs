//! Counters shared by the simulator's tasks, and its one-line report.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Live counters (relaxed atomics: they are only reported).
#[derive(Debug, Default)]
pub struct Stats {
    pub nodes: AtomicU64,
    pub pods: AtomicI64,
    pub ready: AtomicI64,
    pub status_writes: AtomicU64,
    /// Status writes of the resync: the API server's copy had been changed by another
    /// writer (counted in `status_writes` too).
    pub resyncs: AtomicU64,
    pub conflicts: AtomicU64,
    /// In-place completions the simulated node daemon wrote, and those rejected with a
    /// conflict (judged on a stale snapshot).
    pub daemon_writes: AtomicU64,
    pub daemon_conflicts: AtomicU64,
    pub write_errors: AtomicU64,
    pub deletes: AtomicU64,
    pub lease_renewals: AtomicU64,
    pub lease_errors: AtomicU64,
}

fn get_u(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

fn get_i(a: &AtomicI64) -> i64 {
    a.load(Ordering::Relaxed)
}

impl Stats {
    pub fn inc(a: &AtomicU64) {
        a.fetch_add(1, Ordering::Relaxed);
    }

    pub fn add(a: &AtomicI64, d: i64) {
        a.fetch_add(d, Ordering::Relaxed);
    }

    /// `nodesim: nodes=… pods=… ready=… rss_mib=… cpu_s=… …`
    pub fn line(&self) -> String {
        let (cpu, rss) = super::procstat::current();
        format!(
            "nodesim: nodes={} pods={} ready={} rss_mib={} cpu_s={} status_writes={} resyncs={} conflicts={} daemon_writes={} daemon_conflicts={} write_errors={} deletes={} lease_renewals={} lease_errors={}",
            get_u(&self.nodes),
            get_i(&self.pods),
            get_i(&self.ready),
            rss.map_or_else(|| "?".to_owned(), |r| r.to_string()),
            cpu.map_or_else(|| "?".to_owned(), |c| format!("{c:.1}")),
            get_u(&self.status_writes),
            get_u(&self.resyncs),
            get_u(&self.conflicts),
            get_u(&self.daemon_writes),
            get_u(&self.daemon_conflicts),
            get_u(&self.write_errors),
            get_u(&self.deletes),
            get_u(&self.lease_renewals),
            get_u(&self.lease_errors),
        )
    }
}

/// The values of a report line by key (for tests and tools that read the simulator's
/// stderr).
pub fn parse_line(line: &str) -> Option<Vec<(String, String)>> {
    let rest = line.trim().strip_prefix("nodesim:")?;
    Some(
        rest.split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_round_trips() {
        let s = Stats::default();
        Stats::add(&s.pods, 3);
        Stats::add(&s.ready, 2);
        Stats::inc(&s.nodes);
        let parsed = parse_line(&s.line()).unwrap_or_default();
        let get = |k: &str| {
            parsed
                .iter()
                .find(|(kk, _)| kk == k)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(get("nodes").as_deref(), Some("1"));
        assert_eq!(get("pods").as_deref(), Some("3"));
        assert_eq!(get("ready").as_deref(), Some("2"));
        assert!(get("rss_mib").is_some_and(|v| v.parse::<u64>().is_ok()));
        assert!(get("cpu_s").is_some_and(|v| v.parse::<f64>().is_ok()));
    }
}
