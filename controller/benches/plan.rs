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

use std::cell::RefCell;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use inplace_controller::plan::plan;
use support::{input, snapshot};

/// The controller binary's allocator (jemalloc, with the options compiled in from
/// `.cargo/config.toml`): a plan allocates megabytes (the facts of every pod), and under
/// glibc's malloc, which the bench would otherwise run on, those come from freshly mapped
/// pages on some plans and not on others (a page fault per 4 KiB: the same plan took
/// 2 ms or 6 ms by the luck of the heap's layout). Measured here is what the product runs.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The pod counts planned.
const SIZES: [usize; 3] = [1_000, 10_000, 100_000];
/// Criterion's samples per size: its measurement calls the routine this many times, after
/// the warm-up calls (so the last this many calls are the measured ones).
const SAMPLES: usize = 20;

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

/// Criterion measures; each of its samples (a batch of plans) is also kept here as the
/// time of one plan, so that the medians and their ratio can be printed side by side
/// once criterion is done (criterion reports each size alone).
fn bench_plan(c: &mut Criterion, per_plan: &RefCell<Vec<(usize, Vec<Duration>)>>) {
    let mut group = c.benchmark_group("plan");
    group.sample_size(SAMPLES);
    group.measurement_time(Duration::from_secs(8));
    for n in SIZES {
        let input = input(n);
        // The plan must do real work: an update step over the candidates.
        let first = plan(snapshot(&input)).unwrap();
        assert!(!first.actions.is_empty(), "the benchmark plan does nothing");
        per_plan.borrow_mut().push((n, Vec::new()));
        group.bench_with_input(BenchmarkId::from_parameter(n), &input, |b, input| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(plan(black_box(snapshot(input))).unwrap());
                }
                let took = start.elapsed();
                if let Some((_, samples)) = per_plan.borrow_mut().last_mut()
                    && iters > 0
                {
                    samples.push(took / u32::try_from(iters).unwrap_or(u32::MAX));
                }
                took
            });
        });
    }
    group.finish();
}

fn main() {
    println!(
        "load average before: {}\n  (the machine is idle when these stay well below 1; \
         check with `cat /proc/loadavg` before a run)",
        load_average()
    );
    let per_plan = RefCell::new(Vec::new());
    let mut criterion = Criterion::default().configure_from_args();
    bench_plan(&mut criterion, &per_plan);
    criterion.final_summary();

    let mut medians = Vec::new();
    for (n, all) in per_plan.into_inner() {
        if all.is_empty() {
            continue; // filtered out on the command line
        }
        let mut samples = all[all.len().saturating_sub(SAMPLES)..].to_vec();
        let med = median(&mut samples);
        println!(
            "plan/{n}: median {:.3} ms per plan (min {:.3}, max {:.3}; {} samples)",
            ms(med),
            ms(samples[0]),
            ms(samples[samples.len() - 1]),
            samples.len()
        );
        medians.push((n, ms(med)));
    }
    let of = |n: usize| medians.iter().find(|(m, _)| *m == n).map(|(_, d)| *d);
    let verdict = |met: bool| if met { "met" } else { "NOT met" };
    if let Some(ten) = of(10_000) {
        println!(
            "plan/10000 median {ten:.3} ms: target <= 5 ms, {}",
            verdict(ten <= 5.0)
        );
        if let Some(hundred) = of(100_000) {
            let ratio = hundred / ten;
            println!(
                "plan/100000 / plan/10000 = {ratio:.2}: target <= 12, {}",
                verdict(ratio <= 12.0)
            );
        }
    }
    println!("load average after: {}", load_average());
}
