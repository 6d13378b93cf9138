//! The scale/update arithmetic: percents resolved to pod counts ([`resolve`]) and the
//! reference's `calculateDiffsWithExpectation` ([`calculate`]).
//!
//! Percent rounding (OpenKruise `sync/cloneset_sync_utils.go`, docs "Partition",
//! "MaxUnavailable", "MaxSurge", "Scale up with rate limit"):
//!
//! | setting | rounding |
//! |---|---|
//! | `partition` | up; a percent other than `"100%"` that reaches `replicas` with `replicas > 1` becomes `replicas - 1` (at least one pod updated); clamped to `[0, replicas]` |
//! | `maxSurge` | up; forced to 0 while `paused` |
//! | `maxUnavailable` (default `20%`) | up when the effective maxSurge is 0, else down |
//! | `scaleStrategy.maxUnavailable` | up; unset = unlimited (`i32::MAX`) |
//!
//! An unparsable value (`"abc"`, `"5"` without `%`) counts as 0, as in the reference, which
//! ignores the error; [`resolve_checked`] reports it so that the CLI can warn.
//!
//! v1alpha1 has no "nil rollingUpdate" (the reference rounds maxUnavailable down only for a
//! nil v1beta1 `rollingUpdate`); an absent `updateStrategy` here means all defaults.

use inplace_proto::{CloneSet, LifecycleState};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::model::{Diffs, PlanContext, Resolved};

/// `maxUnavailable` when unset.
pub const DEFAULT_MAX_UNAVAILABLE: &str = "20%";

/// Why a number-or-percent setting was not understood.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {value:?} is neither an integer nor a percent like \"20%\"; counted as 0")]
pub struct PercentWarning {
    pub field: &'static str,
    pub value: String,
}

/// Kubernetes' `GetScaledValueFromIntOrPercent`: an integer as is, a percent of `total`
/// rounded up or down. `None` for a string that is not `<integer>%`.
pub fn scaled_value(value: &IntOrString, total: i32, round_up: bool) -> Option<i64> {
    match value {
        IntOrString::Int(v) => Some(i64::from(*v)),
        IntOrString::String(s) => {
            let percent: i64 = s.strip_suffix('%')?.parse().ok()?;
            // float64(value) * float64(total) / 100, like the reference.
            let exact = percent as f64 * f64::from(total) / 100.0;
            let rounded = if round_up {
                exact.ceil()
            } else {
                exact.floor()
            };
            // `as` saturates; percents beyond i64 are nonsense anyway.
            Some(rounded as i64)
        }
    }
}

fn clamp_i32(v: i64) -> i32 {
    i32::try_from(v.clamp(i64::from(i32::MIN), i64::from(i32::MAX))).unwrap_or(0)
}

/// `CalculatePartitionReplicas`: the absolute partition for `replicas`.
pub fn partition_replicas(partition: &IntOrString, replicas: i32) -> Option<i32> {
    let mut value = scaled_value(partition, replicas, true)?;
    let replicas = i64::from(replicas);
    if let IntOrString::String(s) = partition
        && replicas > 1
        && value == replicas
        && s != "100%"
    {
        value = replicas - 1;
    }
    Some(clamp_i32(value.min(replicas).max(0)))
}

/// Resolves every percent of `cloneset` to a pod count (see the module table).
pub fn resolve(cloneset: &CloneSet) -> Resolved {
    resolve_checked(cloneset).0
}

/// [`resolve`], plus a warning for every value that could not be parsed.
pub fn resolve_checked(cloneset: &CloneSet) -> (Resolved, Vec<PercentWarning>) {
    let mut warnings = Vec::new();
    let replicas = cloneset.replicas().max(0);
    let strategy = cloneset.spec.update_strategy.clone().unwrap_or_default();
    let partition = match &strategy.partition {
        Some(p) => partition_replicas(p, replicas).unwrap_or_else(|| {
            warnings.push(PercentWarning {
                field: "spec.updateStrategy.partition",
                value: display(p),
            });
            0
        }),
        None => 0,
    };
    let mut read = |field: &'static str, value: &IntOrString, up: bool| {
        scaled_value(value, replicas, up).unwrap_or_else(|| {
            warnings.push(PercentWarning {
                field,
                value: display(value),
            });
            0
        })
    };

    let mut max_surge = strategy
        .max_surge
        .as_ref()
        .map_or(0, |v| read("spec.updateStrategy.maxSurge", v, true));
    if strategy.paused {
        max_surge = 0;
    }
    let default_unavailable = IntOrString::String(DEFAULT_MAX_UNAVAILABLE.into());
    let max_unavailable = read(
        "spec.updateStrategy.maxUnavailable",
        strategy
            .max_unavailable
            .as_ref()
            .unwrap_or(&default_unavailable),
        max_surge == 0,
    );
    let scale_max_unavailable = cloneset
        .spec
        .scale_strategy
        .as_ref()
        .and_then(|s| s.max_unavailable.as_ref())
        .map_or(i64::from(i32::MAX), |v| {
            read("spec.scaleStrategy.maxUnavailable", v, true)
        });

    let resolved = Resolved {
        replicas,
        partition,
        max_surge: clamp_i32(max_surge),
        max_unavailable: clamp_i32(max_unavailable),
        scale_max_unavailable: clamp_i32(scale_max_unavailable),
    };
    (resolved, warnings)
}

fn display(v: &IntOrString) -> String {
    match v {
        IntOrString::Int(i) => i.to_string(),
        IntOrString::String(s) => s.clone(),
    }
}

/// Whether PreparingDelete pods are left out of the pod totals: the CloneSet label
/// `apps.kruise.io/cloneset-scaling-exclude-preparing-delete: "true"` or the controller-wide
/// option (docs "Scaling with PreparingDelete").
pub fn excludes_preparing_delete(ctx: &PlanContext<'_>) -> bool {
    ctx.cloneset().excludes_preparing_delete() || ctx.options().exclude_preparing_delete
}

/// Pod counts by revision side, over active pods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    /// All active pods of this side.
    total: i64,
    /// Not in PreparingDelete.
    active: i64,
    /// In PreparingDelete.
    preparing_delete: i64,
    /// Not PreparingDelete and specified for deletion.
    to_delete: i64,
    /// Not PreparingDelete, not specified for deletion, and not available.
    unavailable: i64,
}

/// The reference's `calculateDiffsWithExpectation` over the active pods of `ctx`.
///
/// Rules it encodes (docs "MaxSurge", "MaxUnavailable", "Partition", "Scaling with
/// PreparingDelete"; OpenKruise `sync/cloneset_sync_utils.go`):
///
/// - A pod is *new* when its revision label names the update revision. PreparingDelete
///   pods count as unavailable; specified-delete pods (label or `podsToDelete`) are counted
///   apart and not as unavailable.
/// - `update = oldActive - partition` or `-(newActive - (replicas - partition))`, whichever
///   is smaller in magnitude; without rollback (option `partition_rollback` off, or current
///   = update revision) it only moves pods forward (never negative).
/// - Surge (maxSurge > 0) is used either for specified deletes that the unavailability
///   budget cannot absorb, or for updating, whichever needs more — never both.
/// - `scaleUp = replicas + useSurge - pods`; its old-revision part fills the partition;
///   `scaleUpLimit` is `scaleStrategy.maxUnavailable - unavailable`.
/// - `scaleDown = pods - toDelete - (replicas + useSurge)`, old revision first.
/// - `deleteReadyLimit = maxUnavailable + (pods - replicas) - unavailable`, only when
///   something is to be deleted; `updateMaxUnavailable = maxUnavailable + pods - replicas`
///   when something is to be updated.
/// - With the exclude-PreparingDelete switch, PreparingDelete pods are not counted in the
///   totals, so replacements are created while their hooks run.
///
/// Consequence worth knowing when checking partition bounds: surge used for a specified
/// delete creates the replacement *before* the specified pod leaves, so for a while the
/// update revision may hold `replicas - partition` pods plus the specified-delete ones
/// (e.g. replicas 4, partition 3, maxSurge 1, one specified-delete pod on the update
/// revision: 3 old pods and 1 new replacement are created, 2 new pods exist until the
/// specified one is deleted). This is the reference's arithmetic, kept as is.
///
/// `scaling` selects how a pod is judged new: by [`PlanContext::is_updated_for_scale`]
/// for the scale step, by [`PlanContext::is_updated`] for the update step (they differ
/// only with `PreparingUpdateAsUpdate`, as in the reference).
pub fn calculate(ctx: &PlanContext<'_>, scaling: bool) -> Diffs {
    let resolved = ctx.resolved;
    let replicas = i64::from(resolved.replicas);
    let partition = i64::from(resolved.partition);
    let max_surge = i64::from(resolved.max_surge);
    let max_unavailable = i64::from(resolved.max_unavailable);
    let scale_max_unavailable = i64::from(resolved.scale_max_unavailable);
    let min_ready = ctx.cloneset().min_ready_seconds();
    let now = ctx.now();

    let (mut new, mut old) = (Counts::default(), Counts::default());
    for pod in ctx.active_pods() {
        let new_side = if scaling {
            ctx.is_updated_for_scale(pod)
        } else {
            ctx.is_updated(pod)
        };
        let side = if new_side { &mut new } else { &mut old };
        side.total += 1;
        if pod.lifecycle == Some(LifecycleState::PreparingDelete) {
            side.preparing_delete += 1;
            continue;
        }
        side.active += 1;
        if pod.specified_delete {
            side.to_delete += 1;
        } else if !pod.is_available(min_ready, now) {
            side.unavailable += 1;
        }
    }
    let pod_count = new.total + old.total;

    let mut update_old_diff = old.active - partition;
    let mut update_new_diff = new.active - (replicas - partition);
    let total_unavailable =
        new.preparing_delete + old.preparing_delete + new.unavailable + old.unavailable;
    if ctx.update_revision == ctx.current_revision || !ctx.options().partition_rollback {
        update_old_diff = update_old_diff.max(0);
        update_new_diff = update_new_diff.min(0);
    }

    let mut res = Wide::default();
    if max_surge > 0 {
        // Surge for specified deletes that maxUnavailable cannot absorb.
        let (mut scale_surge, mut scale_old_surge) = (0, 0);
        let to_delete = new.to_delete + old.to_delete;
        if to_delete > 0 {
            scale_surge = ((total_unavailable + to_delete) - max_unavailable)
                .max(0)
                .min(to_delete);
            if scale_surge > new.to_delete {
                scale_old_surge = scale_surge - new.to_delete;
            }
        }
        // Surge for updating: only when one side has too many and the other too few.
        let (mut update_surge, mut update_old_surge) = (0, 0);
        if (update_old_diff > 0 && update_new_diff < 0)
            || (update_old_diff < 0 && update_new_diff > 0)
        {
            if update_old_diff.abs() <= update_new_diff.abs() {
                update_surge = update_old_diff.abs();
                if update_old_diff < 0 {
                    update_old_surge = update_surge;
                }
            } else {
                update_surge = update_new_diff.abs();
                if update_new_diff > 0 {
                    update_old_surge = update_surge;
                }
            }
        }
        // One reconcile never scales and updates at once, so surge serves one of them.
        if scale_surge >= update_surge {
            res.use_surge = max_surge.min(scale_surge);
            res.use_surge_old_revision = res.use_surge.min(scale_old_surge);
        } else {
            res.use_surge = max_surge.min(update_surge);
            res.use_surge_old_revision = res.use_surge.min(update_old_surge);
        }
    }

    let mut current_total = pod_count;
    let mut current_old = old.total;
    if excludes_preparing_delete(ctx) {
        current_total -= old.preparing_delete + new.preparing_delete;
        current_old -= old.preparing_delete;
    }
    let expected_total = replicas + res.use_surge;
    let expected_old = partition + res.use_surge_old_revision;

    let up = expected_total - current_total;
    if up > 0 {
        res.scale_up = up;
        res.scale_up_old_revision = (expected_old - current_old).max(0);
        res.scale_up_limit = up.min((scale_max_unavailable - total_unavailable).max(0));
    }
    let down = current_total - old.to_delete - new.to_delete - expected_total;
    if down > 0 {
        res.scale_down = down;
        res.scale_down_old_revision = (current_old - old.to_delete - expected_old).max(0);
    }
    if new.to_delete > 0 || old.to_delete > 0 || res.scale_down > 0 {
        res.delete_ready_limit =
            (max_unavailable + (pod_count - replicas) - total_unavailable).max(0);
    }
    res.update = if update_old_diff.abs() <= update_new_diff.abs() {
        update_old_diff
    } else {
        -update_new_diff
    };
    if res.update != 0 {
        res.update_max_unavailable = max_unavailable + pod_count - replicas;
    }
    res.narrow()
}

/// [`Diffs`] in `i64` while computing, so that `i32::MAX` limits cannot overflow.
#[derive(Default)]
struct Wide {
    scale_up: i64,
    scale_up_old_revision: i64,
    scale_down: i64,
    scale_down_old_revision: i64,
    scale_up_limit: i64,
    delete_ready_limit: i64,
    use_surge: i64,
    use_surge_old_revision: i64,
    update: i64,
    update_max_unavailable: i64,
}

impl Wide {
    fn narrow(self) -> Diffs {
        Diffs {
            scale_up: clamp_i32(self.scale_up),
            scale_up_old_revision: clamp_i32(self.scale_up_old_revision),
            scale_down: clamp_i32(self.scale_down),
            scale_down_old_revision: clamp_i32(self.scale_down_old_revision),
            scale_up_limit: clamp_i32(self.scale_up_limit),
            delete_ready_limit: clamp_i32(self.delete_ready_limit),
            use_surge: clamp_i32(self.use_surge),
            use_surge_old_revision: clamp_i32(self.use_surge_old_revision),
            update: clamp_i32(self.update),
            update_max_unavailable: clamp_i32(self.update_max_unavailable),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::fixtures::{Fixture, PodBuilder, cloneset, pod};

    fn pct(s: &str) -> IntOrString {
        IntOrString::String(s.into())
    }

    fn resolved(spec: serde_json::Value) -> Resolved {
        resolve(&cloneset(spec))
    }

    // ---- resolve ----

    #[test]
    fn partition_percent_rounds_up_but_updates_at_least_one_pod() {
        // 90% of 5 = 4.5 → 5 = replicas → 4, so one pod is updated.
        assert_eq!(partition_replicas(&pct("90%"), 5), Some(4));
        // 50% of 5 = 2.5 → 3.
        assert_eq!(partition_replicas(&pct("50%"), 5), Some(3));
        assert_eq!(
            resolved(json!({"replicas": 5, "updateStrategy": {"partition": "90%"}})).partition,
            4
        );
    }

    #[test]
    fn partition_of_100_percent_keeps_every_pod_on_the_old_revision() {
        assert_eq!(partition_replicas(&pct("100%"), 5), Some(5));
    }

    #[test]
    fn partition_at_least_one_rule_needs_more_than_one_replica() {
        assert_eq!(partition_replicas(&pct("50%"), 1), Some(1));
        assert_eq!(partition_replicas(&pct("99%"), 2), Some(1));
    }

    #[test]
    fn partition_number_is_clamped_to_replicas_without_the_at_least_one_rule() {
        assert_eq!(partition_replicas(&IntOrString::Int(5), 5), Some(5));
        assert_eq!(partition_replicas(&IntOrString::Int(8), 5), Some(5));
        assert_eq!(partition_replicas(&IntOrString::Int(-2), 5), Some(0));
        assert_eq!(partition_replicas(&pct("150%"), 4), Some(4));
    }

    #[test]
    fn max_unavailable_defaults_to_20_percent_rounded_up() {
        assert_eq!(resolved(json!({"replicas": 10})).max_unavailable, 2);
        assert_eq!(resolved(json!({"replicas": 3})).max_unavailable, 1);
        assert_eq!(resolved(json!({"replicas": 0})).max_unavailable, 0);
    }

    #[test]
    fn max_unavailable_rounds_down_when_max_surge_is_set() {
        let spec = |surge: serde_json::Value| json!({"replicas": 5, "updateStrategy": {"maxUnavailable": "30%", "maxSurge": surge}});
        assert_eq!(resolved(spec(json!(0))).max_unavailable, 2);
        let r = resolved(spec(json!("10%")));
        assert_eq!(r.max_surge, 1);
        assert_eq!(r.max_unavailable, 1);
    }

    #[test]
    fn max_surge_percent_rounds_up() {
        let r = resolved(json!({"replicas": 10, "updateStrategy": {"maxSurge": "15%"}}));
        assert_eq!(r.max_surge, 2);
    }

    #[test]
    fn paused_forces_max_surge_to_zero_and_max_unavailable_rounds_up_again() {
        let r = resolved(json!({"replicas": 5, "updateStrategy": {
            "paused": true, "maxSurge": 2, "maxUnavailable": "30%"}}));
        assert_eq!(r.max_surge, 0);
        assert_eq!(r.max_unavailable, 2);
    }

    #[test]
    fn scale_max_unavailable_unset_is_unlimited_and_percent_rounds_up() {
        assert_eq!(resolved(json!({})).scale_max_unavailable, i32::MAX);
        let r = resolved(json!({"replicas": 10, "scaleStrategy": {"maxUnavailable": "25%"}}));
        assert_eq!(r.scale_max_unavailable, 3);
    }

    #[test]
    fn unparsable_percents_count_as_zero_with_a_warning() {
        let cs = cloneset(json!({"updateStrategy": {"maxSurge": "lots", "partition": "3"}}));
        let (r, warnings) = resolve_checked(&cs);
        assert_eq!((r.max_surge, r.partition), (0, 0));
        let fields: Vec<_> = warnings.iter().map(|w| w.field).collect();
        assert_eq!(
            fields,
            vec![
                "spec.updateStrategy.partition",
                "spec.updateStrategy.maxSurge"
            ]
        );
    }

    // ---- calculate ----

    fn fixture(spec: serde_json::Value, pods: Vec<PodBuilder>) -> Fixture {
        let cs = cloneset(spec);
        let mut f = Fixture::new(cs, pods);
        f.resolved = resolve(&f.cloneset);
        f
    }

    fn diffs(f: &Fixture) -> Diffs {
        calculate(&f.ctx(), false)
    }

    fn olds(n: usize) -> Vec<PodBuilder> {
        (0..n)
            .map(|i| pod(&format!("demo-o{i}"), "demo-old"))
            .collect()
    }

    fn news(n: usize) -> Vec<PodBuilder> {
        (0..n)
            .map(|i| pod(&format!("demo-n{i}"), "demo-new"))
            .collect()
    }

    #[test]
    fn scale_up_creates_the_missing_pods_on_the_update_revision() {
        let mut f = fixture(json!({"replicas": 5}), news(2));
        f.current_revision = "demo-new".into();
        let d = diffs(&f);
        assert_eq!(
            (d.scale_up, d.scale_up_old_revision, d.scale_up_limit),
            (3, 0, 3)
        );
        assert_eq!(d.update, 0);
    }

    #[test]
    fn scale_up_with_rate_limit_counts_unavailable_pods_against_scale_max_unavailable() {
        // Docs "Scale up with rate limit": maxUnavailable 1 and one pod not ready yet →
        // the next pod waits.
        let pods = vec![
            pod("demo-a", "demo-new"),
            pod("demo-b", "demo-new").not_ready(),
        ];
        let mut f = fixture(
            json!({"replicas": 5, "scaleStrategy": {"maxUnavailable": 1}}),
            pods,
        );
        f.current_revision = "demo-new".into();
        let d = diffs(&f);
        assert_eq!((d.scale_up, d.scale_up_limit), (3, 0));
        let mut f = fixture(
            json!({"replicas": 5, "scaleStrategy": {"maxUnavailable": 2}}),
            vec![
                pod("demo-a", "demo-new"),
                pod("demo-b", "demo-new").not_ready(),
            ],
        );
        f.current_revision = "demo-new".into();
        assert_eq!(diffs(&f).scale_up_limit, 1);
    }

    #[test]
    fn min_ready_seconds_makes_recently_ready_pods_unavailable() {
        let mut f = fixture(
            json!({"replicas": 3, "minReadySeconds": 60, "scaleStrategy": {"maxUnavailable": 1}}),
            vec![pod("demo-a", "demo-new").ready_since(crate::fixtures::t(990))],
        );
        f.current_revision = "demo-new".into();
        assert_eq!(diffs(&f).scale_up_limit, 0);
    }

    #[test]
    fn scale_down_deletes_the_extra_pods_within_the_delete_ready_limit() {
        let mut f = fixture(json!({"replicas": 3}), news(5));
        f.current_revision = "demo-new".into();
        let d = diffs(&f);
        assert_eq!(d.scale_down, 2);
        // maxUnavailable 20% of 3 → 1, plus 2 extra pods, none unavailable.
        assert_eq!(d.delete_ready_limit, 3);
    }

    /// `PreparingUpdateAsUpdate` (reference `IsPodUpdate`): a PreparingUpdate pod of the
    /// old revision counts as updated when scaling, not when updating.
    #[test]
    fn preparing_update_as_update_table() {
        // (partition, gate, scaling) -> (scale_up, scale_up_old_revision, update)
        let cases = [
            // Gate off: 3 old pods fill partition 3, the missing pod is new.
            (3, false, true, (1, 0, 0)),
            // Gate on: the PreparingUpdate pod is about to be new, so only 2 old pods
            // count against partition 3: the missing pod is created on the old revision.
            (3, true, true, (1, 1, 0)),
            // The update step counts by label either way.
            (3, true, false, (1, 0, 0)),
            // Partition 2: one of the 3 old pods is to move; with the gate the
            // PreparingUpdate pod already counts as that one.
            (2, false, true, (1, 0, 1)),
            (2, true, true, (1, 0, 0)),
            (2, true, false, (1, 0, 1)),
        ];
        for (partition, gate, scaling, want) in cases {
            let mut pods = olds(3);
            pods[0] = pod("demo-o0", "demo-old").lifecycle("PreparingUpdate");
            let mut f = fixture(
                json!({"replicas": 4, "updateStrategy": {"partition": partition}}),
                pods,
            );
            f.options.preparing_update_as_update = gate;
            let d = calculate(&f.ctx(), scaling);
            assert_eq!(
                (d.scale_up, d.scale_up_old_revision, d.update),
                want,
                "partition {partition}, gate {gate}, scaling {scaling}"
            );
        }
        // Scale down: with the gate the PreparingUpdate pod is on the new side, so fewer
        // old pods are to go.
        for (gate, want) in [(false, (1, 1)), (true, (1, 0))] {
            let mut pods = olds(3);
            pods[0] = pod("demo-o0", "demo-old").lifecycle("PreparingUpdate");
            let mut f = fixture(
                json!({"replicas": 2, "updateStrategy": {"partition": 2}}),
                pods,
            );
            f.options.preparing_update_as_update = gate;
            let d = calculate(&f.ctx(), true);
            assert_eq!(
                (d.scale_down, d.scale_down_old_revision),
                want,
                "gate {gate}"
            );
        }
    }

    #[test]
    fn scale_down_takes_old_revision_pods_first() {
        let mut pods = olds(3);
        pods.extend(news(2));
        let f = fixture(
            json!({"replicas": 3, "updateStrategy": {"partition": 1}}),
            pods,
        );
        let d = diffs(&f);
        assert_eq!((d.scale_down, d.scale_down_old_revision), (2, 2));
    }

    #[test]
    fn partition_number_updates_replicas_minus_partition_pods() {
        // Docs "Partition": replicas 5, partition 3 → two pods updated.
        let f = fixture(
            json!({"replicas": 5, "updateStrategy": {"partition": 3}}),
            olds(5),
        );
        let d = diffs(&f);
        assert_eq!(d.update, 2);
        assert_eq!(d.update_max_unavailable, 1);
        assert_eq!((d.scale_up, d.scale_down), (0, 0));
    }

    #[test]
    fn max_surge_creates_new_revision_pods_before_updating_old_ones() {
        // Docs "MaxSurge": extra pods of the latest revision first.
        let f = fixture(
            json!({"replicas": 5, "updateStrategy": {"maxSurge": 2, "maxUnavailable": 0}}),
            olds(5),
        );
        let d = diffs(&f);
        assert_eq!((d.use_surge, d.use_surge_old_revision), (2, 0));
        assert_eq!((d.scale_up, d.scale_up_old_revision), (2, 0));
    }

    #[test]
    fn surge_pods_are_removed_once_all_but_partition_are_updated() {
        // 5 new + 2 surplus old, partition 0: no more update, scale down the 2 old ones.
        let mut pods = olds(2);
        pods.extend(news(5));
        let f = fixture(
            json!({"replicas": 5, "updateStrategy": {"maxSurge": 2}}),
            pods,
        );
        let d = diffs(&f);
        assert_eq!(d.use_surge, 0);
        assert_eq!((d.scale_down, d.scale_down_old_revision), (2, 2));
    }

    /// Docs "MaxSurge", the three examples of surge for specified deletes.
    #[test]
    fn specified_delete_uses_surge_only_when_max_unavailable_is_exhausted() {
        let pods = |victim: &str| {
            let mut v = vec![pod("demo-a", "demo-new").not_ready()];
            for name in ["demo-b", "demo-c", "demo-d"] {
                let p = pod(name, "demo-new");
                v.push(if name == victim {
                    p.label("apps.kruise.io/specified-delete", "true")
                } else {
                    p
                });
            }
            if victim == "demo-a" {
                v[0] = pod("demo-a", "demo-new")
                    .not_ready()
                    .label("apps.kruise.io/specified-delete", "true");
            }
            v
        };
        let spec = |mu: i32| json!({"replicas": 4, "updateStrategy": {"maxUnavailable": mu, "maxSurge": 1}});
        // maxUnavailable=2, pod-a unavailable, pod-b specified: delete directly.
        let mut f = fixture(spec(2), pods("demo-b"));
        f.current_revision = "demo-new".into();
        let d = diffs(&f);
        assert_eq!((d.use_surge, d.scale_up), (0, 0));
        assert_eq!(d.delete_ready_limit, 1);
        // maxUnavailable=1: create a surge pod first, delete pod-b later.
        let mut f = fixture(spec(1), pods("demo-b"));
        f.current_revision = "demo-new".into();
        let d = diffs(&f);
        assert_eq!((d.use_surge, d.scale_up, d.scale_up_limit), (1, 1, 1));
        assert_eq!(d.delete_ready_limit, 0);
        // maxUnavailable=1, pod-a itself specified: no surge (it is deleted directly).
        let mut f = fixture(spec(1), pods("demo-a"));
        f.current_revision = "demo-new".into();
        let d = diffs(&f);
        assert_eq!((d.use_surge, d.scale_up), (0, 0));
    }

    #[test]
    fn surge_for_a_specified_delete_creates_the_replacement_before_the_pod_leaves() {
        // replicas 4, partition 3, maxSurge 1 (maxUnavailable 20% rounds down to 0): the
        // only pod, on the update revision, is specified for deletion.
        let mut f = fixture(
            json!({"replicas": 4, "updateStrategy": {"partition": 3, "maxSurge": 1}}),
            vec![pod("demo-n0", "demo-new").label("apps.kruise.io/specified-delete", "true")],
        );
        f.current_revision = "demo-old".into();
        let d = diffs(&f);
        assert_eq!((d.use_surge, d.use_surge_old_revision), (1, 0));
        assert_eq!((d.scale_up, d.scale_up_old_revision), (4, 3));
    }

    #[test]
    fn specified_delete_without_replica_change_replaces_the_pod() {
        // Docs "Selective Pod deletion": a pod in podsToDelete is deleted and recreated.
        let mut f = fixture(
            json!({"replicas": 3, "scaleStrategy": {"podsToDelete": ["demo-n0"]}}),
            news(3),
        );
        f.current_revision = "demo-new".into();
        let d = diffs(&f);
        assert_eq!(d.scale_down, 0);
        assert_eq!(d.delete_ready_limit, 1);
    }

    #[test]
    fn preparing_delete_pods_count_in_replicas_unless_excluded() {
        let pods = || {
            let mut v = news(2);
            v.push(pod("demo-x", "demo-new").lifecycle("PreparingDelete"));
            v
        };
        let mut f = fixture(json!({"replicas": 3}), pods());
        f.current_revision = "demo-new".into();
        assert_eq!(diffs(&f).scale_up, 0);

        let mut f = fixture(json!({"replicas": 3}), pods());
        f.current_revision = "demo-new".into();
        f.cloneset.metadata.labels = Some(
            [(
                "apps.kruise.io/cloneset-scaling-exclude-preparing-delete".to_owned(),
                "true".to_owned(),
            )]
            .into(),
        );
        assert_eq!(diffs(&f).scale_up, 1);

        let mut f = fixture(json!({"replicas": 3}), pods());
        f.current_revision = "demo-new".into();
        f.options.exclude_preparing_delete = true;
        assert_eq!(diffs(&f).scale_up, 1);
    }

    #[test]
    fn raising_partition_does_nothing_without_partition_rollback() {
        // Docs "Rollback by partition": partition 3 → 5 with two updated pods.
        let mut pods = olds(3);
        pods.extend(news(2));
        let f = fixture(
            json!({"replicas": 5, "updateStrategy": {"partition": 5}}),
            pods,
        );
        assert_eq!(diffs(&f).update, 0);
    }

    #[test]
    fn raising_partition_rolls_pods_back_with_partition_rollback() {
        let mut pods = olds(3);
        pods.extend(news(2));
        let mut f = fixture(
            json!({"replicas": 5, "updateStrategy": {"partition": 5}}),
            pods,
        );
        f.options.partition_rollback = true;
        let d = diffs(&f);
        assert_eq!(d.update, -2);
        assert_eq!(d.update_max_unavailable, 1);
    }

    #[test]
    fn terminating_pods_are_not_counted() {
        let mut pods = news(3);
        pods.push(pod("demo-t", "demo-new").terminating());
        let mut f = fixture(json!({"replicas": 3}), pods);
        f.current_revision = "demo-new".into();
        assert_eq!(diffs(&f), Diffs::default());
    }

    proptest! {
        /// Whatever the pods, the arithmetic never plans more than replicas + maxSurge
        /// pods, and never both scales up and down.
        #[test]
        fn diffs_stay_within_replicas_plus_surge(
            replicas in 0i32..12,
            surge in 0i32..4,
            partition in 0i32..12,
            old in 0usize..12,
            new in 0usize..12,
            not_ready in 0usize..4,
        ) {
            let mut pods = olds(old);
            pods.extend(news(new));
            for p in pods.iter_mut().take(not_ready) {
                *p = p.clone().not_ready();
            }
            let f = fixture(json!({"replicas": replicas,
                "updateStrategy": {"maxSurge": surge, "partition": partition}}), pods);
            let d = diffs(&f);
            let total = (old + new) as i32;
            prop_assert!(d.scale_up == 0 || d.scale_down == 0);
            prop_assert!(total + d.scale_up <= replicas.max(total) + surge);
            prop_assert!(d.scale_up_limit <= d.scale_up);
            prop_assert!(d.use_surge <= surge);
            prop_assert!(d.scale_down <= total);
            prop_assert!(d.update >= 0);
        }
    }
}
