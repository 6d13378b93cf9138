//! The simulator's own CPU time and resident memory, from /proc.

/// Clock ticks per second of /proc/*/stat times (USER_HZ, 100 on every Linux ABI).
const USER_HZ: f64 = 100.0;

/// User + system CPU seconds from the text of /proc/self/stat.
pub fn cpu_seconds(stat: &str) -> Option<f64> {
    // The command name (field 2) is in parentheses and may contain spaces: count the
    // fields after the last ')'. Field 3 (state) is then index 0; utime (14) index 11,
    // stime (15) index 12.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / USER_HZ)
}

/// VmRSS in KiB from the text of /proc/self/status.
pub fn rss_kib(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// (CPU seconds, RSS MiB) of this process, if /proc can be read.
pub fn current() -> (Option<f64>, Option<u64>) {
    let cpu = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| cpu_seconds(&s));
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| rss_kib(&s))
        .map(|k| k / 1024);
    (cpu, rss)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_text() {
        let stat = "4242 (inplace nodesim) S 1 4242 4242 0 -1 4194560 1000 0 0 0 1234 566 0 0 20 0 9 0 100 1000000 2000 18446744073709551615";
        assert_eq!(cpu_seconds(stat), Some(18.0));
        assert_eq!(cpu_seconds("garbage"), None);
        let status = "Name:\tx\nVmPeak:\t  9999 kB\nVmRSS:\t   89600 kB\nThreads: 3\n";
        assert_eq!(rss_kib(status), Some(89_600));
        assert_eq!(rss_kib("Name: x\n"), None);
    }

    #[test]
    fn reads_own_process() {
        let (cpu, rss) = current();
        assert!(cpu.is_some_and(|c| c >= 0.0));
        assert!(rss.is_some());
    }
}
