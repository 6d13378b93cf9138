//! One plan of a CloneSet with 1k, 10k and 100k pods (issue 2, item 6; issue 15, item 5):
//! mixed revisions (a rollout under way), some pods not ready, weight priority and a
//! scatter term set, update type InPlaceIfPossible. Targets on the 2-core machine, with
//! the machine otherwise idle: median ≤ 5 ms at 10k pods, and median(100k) / median(10k)
//! ≤ 12 in the same run.
//!
//! `cargo bench -p inplace-controller --bench plan` prints the median of each size, the
//! ratio, the targets, and the load average (`/proc/loadavg`) before and after: the
//! figures only count when the machine was idle, that is when the load averages stay well
//! below 1 (on 2 cores, 1 means one core busy with something else on average).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    clippy::print_stdout
)]

#[path = "support/mod.rs"]
mod support;

use std::hint::black_box;
use std::time::{Duration, Instant};

use inplace_controller::plan::plan;
use support::{input, snapshot};

/// Pod counts and how many plans are timed for each.
const SIZES: [(usize, usize); 3] = [(1_000, 1_000), (10_000, 300), (100_000, 30)];

/// The three load averages (1, 5 and 15 minutes) and the running/total tasks, as the
/// kernel prints them; a note when they cannot be read.
fn load_average() -> String {
    match std::fs::read_to_string("/proc/loadavg") {
        Ok(text) => {
            let fields: Vec<&str> = text.split_whitespace().take(4).collect();
            format!("{} (1/5/15 min; running/all tasks)", fields.join(" "))
        }
        Err(e) => format!("unknown (/proc/loadavg: {e})"),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The median of `times`, which it sorts.
fn median(times: &mut [Duration]) -> Duration {
    times.sort_unstable();
    let mid = times.len() / 2;
    if times.len().is_multiple_of(2) {
        (times[mid - 1] + times[mid]) / 2
    } else {
        times[mid]
    }
}

fn main() {
    println!(
        "load average before: {}\n  (the machine is idle when these stay well below 1; \
         check with `cat /proc/loadavg` before a run)",
        load_average()
    );
    let mut medians = Vec::new();
    for (n, samples) in SIZES {
        let input = input(n);
        // The plan must do real work: an update step over the candidates.
        let first = plan(snapshot(&input)).unwrap();
        assert!(!first.actions.is_empty(), "the benchmark plan does nothing");
        // Warm up: caches, allocator, CPU frequency.
        let warm_until = Instant::now() + Duration::from_millis(500);
        while Instant::now() < warm_until {
            black_box(plan(black_box(snapshot(&input))).unwrap());
        }
        let mut times: Vec<Duration> = (0..samples)
            .map(|_| {
                let start = Instant::now();
                black_box(plan(black_box(snapshot(&input))).unwrap());
                start.elapsed()
            })
            .collect();
        let med = median(&mut times);
        println!(
            "plan/{n}: median {:.3} ms (min {:.3}, max {:.3}; {samples} plans)",
            ms(med),
            ms(times[0]),
            ms(times[times.len() - 1]),
        );
        medians.push((n, med));
    }
    let of = |n: usize| {
        medians
            .iter()
            .find(|(m, _)| *m == n)
            .map(|(_, d)| ms(*d))
            .unwrap()
    };
    let (ten, hundred) = (of(10_000), of(100_000));
    let ratio = hundred / ten;
    let verdict = |met: bool| if met { "met" } else { "NOT met" };
    println!(
        "plan/10000 median {ten:.3} ms: target <= 5 ms, {}",
        verdict(ten <= 5.0)
    );
    println!(
        "plan/100000 / plan/10000 = {ratio:.2}: target <= 12, {}",
        verdict(ratio <= 12.0)
    );
    println!("load average after: {}", load_average());
}
