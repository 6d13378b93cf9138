//! Where a leg's CPU went: the machine's busy time (from `/proc/stat`) and each process's
//! own seconds (from `/proc/PID/stat`), taken when the leg starts and when it is done.
//!
//! A leg that runs well over its floor while the machine is nearly all busy is held by
//! the machine (the API server and etcd share its cores with everything else), not by a
//! workload controller's pace alone; the line says which.

use super::cpu_seconds;

/// Clock ticks per second of `/proc/stat` (USER_HZ, 100 on every Linux ABI).
const USER_HZ: f64 = 100.0;

/// The machine's CPU time so far, all cores together, in clock ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MachineTicks {
    /// Ticks some core spent running anything (user, nice, system, irq, softirq, steal).
    pub busy: u64,
    /// Every tick of every core, idle and I/O wait included.
    pub total: u64,
}

/// The aggregate `cpu` line of `/proc/stat`'s text.
pub fn machine_ticks(stat: &str) -> Option<MachineTicks> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    // user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is
    // already counted in user and nice.
    let field = |i: usize| fields.get(i).copied().unwrap_or(0);
    let idle = field(3) + field(4);
    let total: u64 = (0..8).map(field).sum();
    (fields.len() >= 4).then_some(MachineTicks {
        busy: total - idle,
        total,
    })
}

/// One reading: the machine, and the CPU seconds of each named process that could be
/// read (a process that is gone or not there reads as absent).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CpuSample {
    pub machine: Option<MachineTicks>,
    pub processes: Vec<(String, f64)>,
}

impl CpuSample {
    /// A reading from the texts of `/proc/stat` and of each process's `/proc/PID/stat`.
    pub fn parse(machine: Option<&str>, processes: &[(String, Option<String>)]) -> Self {
        CpuSample {
            machine: machine.and_then(machine_ticks),
            processes: processes
                .iter()
                .filter_map(|(name, stat)| Some((name.clone(), cpu_seconds(stat.as_deref()?)?)))
                .collect(),
        }
    }
}

/// The line for a leg of `wall_s` seconds on `cores` cores between `before` and `after`:
/// the machine's busy seconds and share, then each process read both times, most first.
pub fn cpu_line(before: &CpuSample, after: &CpuSample, wall_s: f64, cores: usize) -> String {
    let machine = match (before.machine, after.machine) {
        (Some(b), Some(a)) if a.total > b.total => {
            let busy = a.busy.saturating_sub(b.busy) as f64 / USER_HZ;
            let total = (a.total - b.total) as f64 / USER_HZ;
            format!(
                "machine busy {busy:.1} s of {total:.1} s ({:.0} % of {cores} cores)",
                100.0 * busy / total
            )
        }
        _ => "machine busy unknown".to_owned(),
    };
    let mut used: Vec<(&str, f64)> = after
        .processes
        .iter()
        .filter_map(|(name, a)| {
            let (_, b) = before.processes.iter().find(|(n, _)| n == name)?;
            Some((name.as_str(), (a - b).max(0.0)))
        })
        .collect();
    used.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(y.0)));
    let each: Vec<String> = used
        .iter()
        .map(|(name, s)| format!("{name} {s:.1} s"))
        .collect();
    format!(
        "CPU during the leg's {wall_s:.2} s: {machine}; {}",
        if each.is_empty() {
            "no process read".to_owned()
        } else {
            each.join(", ")
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  100 5 50 800 20 3 2 0 7 0\ncpu0 50 2 25 400 10 1 1 0 0 0\nintr 1\n";

    #[test]
    fn the_machine_line_counts_idle_and_iowait_as_not_busy() {
        // Guest (7) is inside user already: not added again.
        assert_eq!(
            machine_ticks(STAT),
            Some(MachineTicks {
                busy: 160,
                total: 980
            })
        );
        assert_eq!(machine_ticks("intr 1\n"), None);
        assert_eq!(machine_ticks("cpu  1 x 3 4\n"), None);
        assert_eq!(machine_ticks("cpu  1 2\n"), None);
    }

    fn proc_stat(ticks: u64) -> String {
        // utime is the 14th field, stime the 15th; the name has a space in it.
        format!("42 (kube apiserver) S 1 1 1 0 -1 0 0 0 0 0 {ticks} 0 0 0 20 0")
    }

    #[test]
    fn a_leg_line_gives_the_machine_share_and_each_process_most_first() {
        let sample = |busy, total, api, etcd: Option<u64>| {
            CpuSample::parse(
                Some(&format!("cpu  {busy} 0 0 {} 0 0 0 0\n", total - busy)),
                &[
                    ("kube-apiserver".to_owned(), Some(proc_stat(api))),
                    ("etcd".to_owned(), etcd.map(proc_stat)),
                    ("gone".to_owned(), None),
                ],
            )
        };
        let before = sample(1000, 5000, 300, Some(100));
        let after = sample(2800, 7000, 1200, Some(400));
        assert_eq!(
            cpu_line(&before, &after, 10.0, 2),
            "CPU during the leg's 10.00 s: machine busy 18.0 s of 20.0 s (90 % of 2 cores); kube-apiserver 9.0 s, etcd 3.0 s"
        );
        // A process read only once is left out; no machine reading says so.
        let after = sample(2800, 7000, 1200, None);
        let no_machine = CpuSample {
            machine: None,
            ..before.clone()
        };
        assert_eq!(
            cpu_line(&no_machine, &after, 10.0, 2),
            "CPU during the leg's 10.00 s: machine busy unknown; kube-apiserver 9.0 s"
        );
        assert_eq!(
            cpu_line(&CpuSample::default(), &CpuSample::default(), 1.0, 2),
            "CPU during the leg's 1.00 s: machine busy unknown; no process read"
        );
    }
}
