//! One plan of a CloneSet with 1k, 10k and 100k pods (issue 2, item 6; issue 15, item 5):
//! mixed revisions (a rollout under way), some pods not ready, weight priority and a
//! scatter term set, update type InPlaceIfPossible. Targets on the 2-core machine, with
//! the machine otherwise idle: median ≤ 5 ms at 10k pods, and median(100k) / median(10k)
//! ≤ 12 in the same run.
//!
//! `cargo bench -p inplace-plan --bench plan` prints the median of each size, the
//! ratio, the targets, and the load average (`/proc/loadavg`) before and after: the
//! figures only count when the machine was idle, that is when the load averages stay well
//! below 1 (on 2 cores, 1 means one core busy with something else on average).
//!
//! It also plans ten different 10k snapshots in turn (`plan/10000-in-turn`): each plan then
//! finds its pods out of the cache, as the 100k plan does, where the repeated 10k plan finds
//! them where its previous run left them. The two quotients it prints split the ratio in
//! two: what the 10k figure owes to the cache (in turn / repeated), and what the 100k plan
//! costs beyond ten cold 10k plans (100k / (10 × in turn)).
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
use inplace_plan::plan;
use support::{Input, input, snapshot};

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
/// How many different 10k snapshots `plan/10000-in-turn` plans in turn: as many pods as
/// the 100k plan reads.
const IN_TURN: usize = 10;

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

/// The per-plan times of each case, by its name (`plan/<name>`).
type PerPlan = RefCell<Vec<(String, Vec<Duration>)>>;

/// Criterion measures `inputs` planned in turn under `name`; each of its samples is also
/// kept in `per_plan` as the time of one plan.
fn bench_case(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    per_plan: &PerPlan,
    name: &str,
    inputs: &[Input],
) {
    for input in inputs {
        // The plan must do real work: an update step over the candidates.
        let first = plan(snapshot(input)).unwrap();
        assert!(
            !first.actions().is_empty(),
            "the benchmark plan does nothing"
        );
    }
    per_plan.borrow_mut().push((name.to_owned(), Vec::new()));
    group.bench_with_input(BenchmarkId::from_parameter(name), inputs, |b, inputs| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for (_, input) in (0..iters).zip(inputs.iter().cycle()) {
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

/// Criterion measures; each of its samples (a batch of plans) is also kept in `per_plan` as
/// the time of one plan, so that the medians and their ratios can be printed side by side
/// once criterion is done (criterion reports each case alone).
fn bench_plan(c: &mut Criterion, per_plan: &PerPlan) {
    let mut group = c.benchmark_group("plan");
    group.sample_size(SAMPLES);
    group.measurement_time(Duration::from_secs(8));
    for n in SIZES {
        bench_case(&mut group, per_plan, &n.to_string(), &[input(n)]);
    }
    let in_turn: Vec<Input> = (0..IN_TURN).map(|_| input(10_000)).collect();
    bench_case(&mut group, per_plan, "10000-in-turn", &in_turn);
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
    for (name, all) in per_plan.into_inner() {
        if all.is_empty() {
            continue; // filtered out on the command line
        }
        let mut samples = all[all.len().saturating_sub(SAMPLES)..].to_vec();
        let med = median(&mut samples);
        println!(
            "plan/{name}: median {:.3} ms per plan (min {:.3}, max {:.3}; {} samples)",
            ms(med),
            ms(samples[0]),
            ms(samples[samples.len() - 1]),
            samples.len()
        );
        medians.push((name, ms(med)));
    }
    let of = |name: &str| medians.iter().find(|(m, _)| m == name).map(|(_, d)| *d);
    let verdict = |met: bool| if met { "met" } else { "NOT met" };
    if let Some(ten) = of("10000") {
        println!(
            "plan/10000 median {ten:.3} ms: target <= 5 ms, {}",
            verdict(ten <= 5.0)
        );
        if let Some(hundred) = of("100000") {
            let ratio = hundred / ten;
            println!(
                "plan/100000 / plan/10000 = {ratio:.2}: target <= 12, {}",
                verdict(ratio <= 12.0)
            );
        }
        if let Some(cold) = of("10000-in-turn") {
            println!(
                "plan/10000-in-turn / plan/10000 = {:.2}: what the repeated 10k plan gains \
                 from finding its pods in the cache",
                cold / ten
            );
            if let Some(hundred) = of("100000") {
                println!(
                    "plan/100000 / ({IN_TURN} x plan/10000-in-turn) = {:.2}: what the 100k plan \
                     costs beyond as many pods planned in ten cold 10k plans",
                    hundred / (IN_TURN as f64 * cold)
                );
            }
        }
    }
    println!("load average after: {}", load_average());
}
