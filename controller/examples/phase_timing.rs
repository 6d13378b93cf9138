//! Per-phase timing of one plan over the bench's snapshot (same fixture as the plan
//! crate's `benches/plan.rs`, from its `benches/support`), under the controller's
//! allocator. Usage: `cargo run --release -p inplace-controller --example phase_timing -- [pods] [iterations]`.
//! Under `valgrind --tool=callgrind` pass a small iteration count.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    clippy::print_stdout
)]

#[path = "../../plan/benches/support/mod.rs"]
mod support;

use std::hint::black_box;
use std::time::{Duration, Instant};

use inplace_controller::plan::{
    PlanContext, PodFacts, action_write, completion_write, diffs, housekeeping, inplace_write,
    lifecycle_write, plan, pod_conditions, revision, scale, status, update, write_inputs,
};

/// The controller binary's allocator (jemalloc, with the options compiled in from
/// `.cargo/config.toml`): a plan allocates megabytes (the facts of every pod), and under
/// glibc's malloc, which the bench would otherwise run on, those come from freshly mapped
/// pages on some plans and not on others (a page fault per 4 KiB: the same plan took
/// 2 ms or 6 ms by the luck of the heap's layout). Measured here is what the product runs.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(10_000, |a| a.parse().unwrap());
    let iterations: u32 = args.next().map_or(50, |a| a.parse().unwrap());
    let input = support::input(n);
    let mut phases = [Duration::ZERO; 11];
    let names = [
        "facts",
        "revisions",
        "diffs",
        "scale+update",
        "status",
        "housekeeping",
        "gate conds",
        "lifecycle",
        "in-place wr",
        "other writes",
        "whole plan",
    ];
    // Actions, initial gate conditions, lifecycle and completion writes, in-place writes,
    // other writes: of the last plan.
    let mut counts = [0usize; 5];
    for _ in 0..iterations {
        let snapshot = support::snapshot(&input);
        let t0 = Instant::now();
        let pods = PodFacts::extract_all(&snapshot);
        let t1 = Instant::now();
        let revisions = revision::plan_revisions(&snapshot, &pods).unwrap();
        let t2 = Instant::now();
        let ctx = PlanContext {
            snapshot,
            pods,
            update_revision: revisions.update_revision.clone(),
            current_revision: revisions.current_revision.clone(),
            resolved: diffs::resolve(snapshot.cloneset),
        };
        let d = diffs::calculate(&ctx, false);
        let t3 = Instant::now();
        let mut actions = housekeeping::pvc_cleanup(&ctx);
        let scaled = scale::plan_scale(&ctx, &d);
        if scaled.is_empty() {
            actions.extend(update::plan_update(&ctx, &d).actions);
        } else {
            actions.extend(scaled);
        }
        let t4 = Instant::now();
        black_box(status::compute(&ctx, &revisions));
        let t5 = Instant::now();
        actions.extend(housekeeping::prune_pods_to_delete(
            &ctx,
            &inplace_controller::plan::pods_to_delete::check(&ctx, d.scale_down).kept(),
        ));
        actions.extend(housekeeping::backfill_template_hash(&ctx));
        let t6 = Instant::now();
        let conditions = pod_conditions::initial(&ctx.pods, &actions);
        let t7 = Instant::now();
        let mut lifecycle = lifecycle_write::all(ctx.snapshot.cloneset, &actions);
        let completions = completion_write::all(ctx.snapshot.pods, &actions, &mut lifecycle);
        let t8 = Instant::now();
        let (in_place_inputs, action_inputs) = write_inputs(&ctx);
        let in_place = inplace_write::all(&in_place_inputs, &ctx.pods, &actions);
        let t9 = Instant::now();
        let others = action_write::all(&action_inputs, &ctx.pods, &actions);
        let t10 = Instant::now();
        black_box(plan(black_box(support::snapshot(&input))).unwrap());
        let t11 = Instant::now();
        counts = [
            actions.len(),
            conditions.len(),
            lifecycle.len() + completions.len(),
            in_place.len(),
            others.len(),
        ];
        let spans = [
            (t0, t1),
            (t1, t2),
            (t2, t3),
            (t3, t4),
            (t4, t5),
            (t5, t6),
            (t6, t7),
            (t7, t8),
            (t8, t9),
            (t9, t10),
            (t10, t11),
        ];
        for (i, (a, b)) in spans.into_iter().enumerate() {
            phases[i] += b - a;
        }
    }
    println!(
        "{n} pods, {iterations} iterations, mean per plan ({} bytes of facts per pod):",
        std::mem::size_of::<PodFacts>()
    );
    println!(
        "  (last plan: {} actions, {} initial gate-condition writes, {} lifecycle and completion writes, {} in-place writes, {} other writes)",
        counts[0], counts[1], counts[2], counts[3], counts[4]
    );
    for (name, total) in names.iter().zip(phases) {
        println!(
            "  {name:<13} {:>9.3} ms",
            total.as_secs_f64() * 1e3 / f64::from(iterations)
        );
    }
}
