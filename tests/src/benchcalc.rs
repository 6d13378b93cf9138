//! Pure arithmetic of `inplace-rollout-bench`: budgets and batches, the theoretical
//! minimum of a rollout, percentiles, rollout milestones, /proc figures of a child
//! process and the target verdicts. No I/O here; unit tested.

use std::time::Duration;

pub use crate::nodesim::procstat::{cpu_seconds, rss_kib};

/// `maxUnavailable` ("20%" or "200") scaled to `total` pods the way a CloneSet without
/// maxSurge does: a percentage rounds down, and the budget is at least one pod.
pub fn max_unavailable(total: u32, value: &str) -> Result<u32, String> {
    let value = value.trim();
    let n = match value.strip_suffix('%') {
        Some(pct) => {
            let pct: u64 = pct
                .trim()
                .parse()
                .map_err(|_| format!("bad percentage {value:?}"))?;
            if pct > 100 {
                return Err(format!("percentage over 100: {value:?}"));
            }
            u64::from(total) * pct / 100
        }
        None => value
            .parse::<u64>()
            .map_err(|_| format!("bad count {value:?}"))?,
    };
    let n = u32::try_from(n.min(u64::from(total))).unwrap_or(total);
    Ok(n.max(1))
}

/// How many waves of at most `per_batch` pods update `total` pods: ceil(total / per_batch).
pub fn batches(total: u32, per_batch: u32) -> u32 {
    if total == 0 {
        return 0;
    }
    total.div_ceil(per_batch.max(1))
}

/// The fastest possible rollout: every wave takes exactly one per-pod latency.
pub fn theoretical_min(batches: u32, per_pod: Duration) -> Duration {
    per_pod * batches
}

/// `actual / minimum` (infinite when the minimum is zero).
pub fn ratio(actual: Duration, minimum: Duration) -> f64 {
    if minimum.is_zero() {
        return f64::INFINITY;
    }
    actual.as_secs_f64() / minimum.as_secs_f64()
}

/// Nearest-rank percentile (`q` in 0..=1) of an ascending slice.
pub fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let q = q.clamp(0.0, 1.0);
    // Rank ceil(q * n), 1-based; q = 0 is the minimum.
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.max(1) - 1).copied()
}

/// min / p50 / p90 / p99 / max of a sample (seconds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub n: usize,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Summary {
    pub fn of(mut values: Vec<f64>) -> Option<Summary> {
        values.retain(|v| v.is_finite());
        values.sort_by(f64::total_cmp);
        Some(Summary {
            n: values.len(),
            min: *values.first()?,
            p50: percentile(&values, 0.5)?,
            p90: percentile(&values, 0.9)?,
            p99: percentile(&values, 0.99)?,
            max: *values.last()?,
        })
    }

    pub fn line(&self) -> String {
        format!(
            "n={} min={:.2}s p50={:.2}s p90={:.2}s p99={:.2}s max={:.2}s",
            self.n, self.min, self.p50, self.p90, self.p99, self.max
        )
    }
}

/// The moments (seconds after the start) at which every `step`-th pod finished, and the
/// last one: `finished` are the pods' finishing times, in any order.
pub fn milestones(finished: &[f64], step: usize) -> Vec<(usize, f64)> {
    let mut sorted: Vec<f64> = finished.iter().copied().filter(|v| v.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    let step = step.max(1);
    let mut out: Vec<(usize, f64)> = sorted
        .iter()
        .enumerate()
        .filter(|(i, _)| (i + 1) % step == 0)
        .map(|(i, t)| (i + 1, *t))
        .collect();
    if let Some(last) = sorted.last()
        && out.last().is_none_or(|(n, _)| *n != sorted.len())
    {
        out.push((sorted.len(), *last));
    }
    out
}

/// A `Vm…:` line of /proc/<pid>/status in KiB (`VmRSS`, `VmHWM`).
pub fn status_kib(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// Resident memory and CPU time of a process, from the text of its /proc files.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Usage {
    pub rss_kib: u64,
    /// Peak resident memory (VmHWM).
    pub hwm_kib: u64,
    /// utime + stime, seconds.
    pub cpu_s: f64,
}

impl Usage {
    pub fn parse(status: &str, stat: &str) -> Option<Usage> {
        Some(Usage {
            rss_kib: status_kib(status, "VmRSS")?,
            hwm_kib: status_kib(status, "VmHWM")?,
            cpu_s: cpu_seconds(stat)?,
        })
    }

    pub fn rss_mib(&self) -> f64 {
        self.rss_kib as f64 / 1024.0
    }

    pub fn hwm_mib(&self) -> f64 {
        self.hwm_kib as f64 / 1024.0
    }
}

/// CPU share (1.0 = one core) of `cpu_s` CPU seconds spent over `wall`.
pub fn cpu_share(cpu_s: f64, wall: Duration) -> f64 {
    if wall.is_zero() {
        return 0.0;
    }
    cpu_s / wall.as_secs_f64()
}

/// "met" / "NOT met" for `value <= limit`.
pub fn verdict(value: f64, limit: f64) -> &'static str {
    if value.is_finite() && value <= limit {
        "met"
    } else {
        "NOT met"
    }
}

/// Splits `total` pods over `sets` CloneSets as evenly as possible (the first ones get
/// the remainder).
pub fn split(total: u32, sets: u32) -> Vec<u32> {
    let sets = sets.max(1);
    let (base, rem) = (total / sets, total % sets);
    (0..sets).map(|i| base + u32::from(i < rem)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_and_batches() {
        assert_eq!(max_unavailable(1000, "20%"), Ok(200));
        assert_eq!(max_unavailable(200, "20%"), Ok(40));
        assert_eq!(max_unavailable(7, "20%"), Ok(1)); // 1.4 rounds down
        assert_eq!(max_unavailable(3, "20%"), Ok(1)); // 0 → at least one
        assert_eq!(max_unavailable(10, "25"), Ok(10)); // a count is capped at the total
        assert_eq!(max_unavailable(10, " 3 "), Ok(3));
        assert!(max_unavailable(10, "x%").is_err());
        assert!(max_unavailable(10, "120%").is_err());
        assert!(max_unavailable(10, "-1").is_err());
        assert_eq!(batches(1000, 200), 5);
        assert_eq!(batches(1001, 200), 6);
        assert_eq!(batches(7, 1), 7);
        assert_eq!(batches(0, 200), 0);
        assert_eq!(batches(5, 0), 5);
    }

    #[test]
    fn minimum_and_ratio() {
        let min = theoretical_min(5, Duration::from_millis(3_000));
        assert_eq!(min, Duration::from_secs(15));
        assert!((ratio(Duration::from_secs(18), min) - 1.2).abs() < 1e-9);
        assert!(ratio(Duration::from_secs(1), Duration::ZERO).is_infinite());
        assert_eq!(verdict(1.2, 1.2), "met");
        assert_eq!(verdict(1.21, 1.2), "NOT met");
        assert_eq!(verdict(f64::INFINITY, 1.2), "NOT met");
        assert_eq!(verdict(f64::NAN, 1.2), "NOT met");
    }

    #[test]
    fn percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), Some(50.0));
        assert_eq!(percentile(&v, 0.9), Some(90.0));
        assert_eq!(percentile(&v, 0.99), Some(99.0));
        assert_eq!(percentile(&v, 1.0), Some(100.0));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&[], 0.5), None);
        assert_eq!(percentile(&[7.0], 0.5), Some(7.0));
        let s = Summary::of(vec![3.0, 1.0, f64::NAN, 2.0]);
        assert_eq!(
            s,
            Some(Summary {
                n: 3,
                min: 1.0,
                p50: 2.0,
                p90: 3.0,
                p99: 3.0,
                max: 3.0
            })
        );
        assert_eq!(Summary::of(vec![]), None);
        assert!(s.is_some_and(|s| s.line().contains("p50=2.00s")));
    }

    #[test]
    fn milestones_every_batch_and_the_last() {
        let t = [5.0, 1.0, 2.0, 4.0, 3.0];
        assert_eq!(milestones(&t, 2), vec![(2, 2.0), (4, 4.0), (5, 5.0)]);
        assert_eq!(milestones(&t, 5), vec![(5, 5.0)]);
        assert_eq!(milestones(&[], 5), vec![]);
        assert_eq!(milestones(&[1.0], 0), vec![(1, 1.0)]);
    }

    #[test]
    fn proc_text() {
        let status = "Name:\tinplace-contr\nVmPeak:\t 900000 kB\nVmHWM:\t   70000 kB\nVmRSS:\t   52224 kB\nVmRSSx: 1 kB\n";
        let stat = "77 (inplace-controller) S 1 77 77 0 -1 0 0 0 0 0 250 50 0 0 20 0 9 0 1 2 3";
        let u = Usage::parse(status, stat);
        assert_eq!(
            u,
            Some(Usage {
                rss_kib: 52_224,
                hwm_kib: 70_000,
                cpu_s: 3.0
            })
        );
        assert!(u.is_some_and(|u| (u.rss_mib() - 51.0).abs() < 1e-9));
        assert_eq!(status_kib(status, "VmPeak"), Some(900_000));
        assert_eq!(status_kib(status, "VmSwap"), None);
        assert_eq!(Usage::parse("Name: x\n", stat), None);
        assert!((cpu_share(3.0, Duration::from_secs(30)) - 0.1).abs() < 1e-9);
        assert_eq!(cpu_share(3.0, Duration::ZERO), 0.0);
    }

    #[test]
    fn splits_evenly() {
        assert_eq!(split(10_000, 10), vec![1000; 10]);
        assert_eq!(split(10, 3), vec![4, 3, 3]);
        assert_eq!(split(5, 0), vec![5]);
        assert_eq!(split(10, 3).iter().sum::<u32>(), 10);
    }
}
