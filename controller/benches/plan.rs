//! One plan of a CloneSet with 1k, 10k and 100k pods (issue 2, item 6): mixed revisions
//! (a rollout under way), some pods not ready, weight priority and a scatter term set,
//! update type InPlaceIfPossible. Targets on the 2-core machine: ≤ 5 ms at 10k pods on
//! one core, and time(100k) / time(10k) ≤ 12.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "support/mod.rs"]
mod support;

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use inplace_controller::plan::plan;
use support::{input, snapshot};

fn bench_plan(c: &mut Criterion) {
    let mut group = c.benchmark_group("plan");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(8));
    for n in [1_000usize, 10_000, 100_000] {
        let input = input(n);
        // The plan must do real work: an update step over the candidates.
        let first = plan(snapshot(&input)).unwrap();
        assert!(!first.actions.is_empty(), "the benchmark plan does nothing");
        group.bench_with_input(BenchmarkId::from_parameter(n), &input, |b, input| {
            b.iter(|| black_box(plan(black_box(snapshot(input))).unwrap()));
        });
    }
    group.finish();
}

criterion_group!(benches, bench_plan);
criterion_main!(benches);
