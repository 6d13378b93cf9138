use super::*;

/// The exposition with a series in every family (empty families print nothing).
fn every_family_touched() -> String {
    let m = Metrics::new();
    let cs = CloneSetLabels::new("ns", "demo");
    for counters in m.per_cloneset_counters() {
        counters.get_or_create(&cs).inc();
    }
    m.record_status(&cs, &inplace_proto::CloneSetStatus::default());
    m.reconcile_errors
        .get_or_create(&ErrorLabels { reason: "x".into() })
        .inc();
    m.expectation_timeouts
        .get_or_create(&ExpectationLabels { kind: "x".into() })
        .inc();
    m.reconcile_duration.observe(0.1);
    m.record_api_request("patch", "200", Duration::from_millis(3));
    let t0 = std::time::Instant::now();
    m.queue_add("ns/demo", t0);
    m.queue_start("ns/demo", t0 + Duration::from_millis(5));
    m.encode().unwrap_or_default()
}

#[test]
fn the_work_queue_counts_each_triggered_cloneset_once_until_its_reconcile_starts()
-> Result<(), std::fmt::Error> {
    let m = Metrics::new();
    let t0 = std::time::Instant::now();
    m.queue_add("ns/a", t0);
    m.queue_add("ns/a", t0 + Duration::from_millis(10)); // the same item
    m.queue_add("ns/b", t0 + Duration::from_millis(20));
    m.queue_add("ns/gone", t0 + Duration::from_millis(20));
    assert_eq!(m.workqueue_depth.get(), 3);
    m.queue_drop("ns/gone");
    assert_eq!(m.workqueue_depth.get(), 2);
    // a waited 250 ms since its first trigger
    m.queue_start("ns/a", t0 + Duration::from_millis(250));
    assert_eq!(m.workqueue_depth.get(), 1);
    // a requeue nobody triggered: nothing waited
    m.queue_start("ns/c", t0 + Duration::from_millis(300));
    m.queue_start("ns/b", t0 + Duration::from_millis(20));
    assert_eq!(m.workqueue_depth.get(), 0);
    let text = m.encode()?;
    assert!(text.contains("inplace_workqueue_depth 0"), "{text}");
    assert!(
        text.contains("inplace_workqueue_queue_duration_seconds_count 2"),
        "{text}"
    );
    assert!(
        text.contains("inplace_workqueue_queue_duration_seconds_sum 0.25\n"),
        "{text}"
    );
    Ok(())
}

#[test]
fn build_info_revision_is_the_given_one_or_unknown() {
    assert_eq!(build_revision(Some("0123abcd")), "0123abcd");
    assert_eq!(build_revision(Some("")), "unknown");
    assert_eq!(build_revision(Some("  ")), "unknown");
    assert_eq!(build_revision(None), "unknown");
}

/// The shipped dashboard and alert rules use only metrics the controller exports
/// (the daemon's, `inplace_daemon_*`, are checked by the daemon's tests).
#[test]
fn the_dashboard_and_alerts_use_only_exported_metrics() {
    let exported = inplace_proto::monitoring::sample_names(&every_family_touched());
    let missing =
        inplace_proto::monitoring::missing(&exported, "inplace_", Some("inplace_daemon_"));
    assert!(
        missing.is_empty(),
        "not exported: {missing:?}\nexported: {exported:?}"
    );
}

#[test]
fn the_standard_process_metrics_are_exported_unprefixed() {
    let m = Metrics::new();
    let text = m.encode().unwrap_or_default();
    assert!(text.contains("\nprocess_resident_memory_bytes "), "{text}");
    assert!(text.contains("inplace_build_info{version=\""), "{text}");
}

/// Every registered family is in the exposition under the name docs/operations.md gives it.
#[test]
fn every_metric_is_exported() {
    let text = every_family_touched();
    let families: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let want = [
        "process_cpu_seconds",
        "process_virtual_memory_bytes",
        "process_start_time_seconds",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "inplace_api_requests",
        "inplace_api_request_duration_seconds",
        "inplace_build_info",
        "inplace_workqueue_depth",
        "inplace_workqueue_queue_duration_seconds",
        "inplace_reconciles",
        "inplace_reconcile_duration_seconds",
        "inplace_reconcile_errors",
        "inplace_reconciles_waiting_expectations",
        "inplace_pods_created",
        "inplace_pods_deleted",
        "inplace_pods_updated_in_place",
        "inplace_pods_recreated",
        "inplace_expectation_timeouts",
        "inplace_cloneset_replicas",
        "inplace_cloneset_updated_replicas",
        "inplace_cloneset_updated_ready_replicas",
        "inplace_cloneset_expected_updated_replicas",
        "inplace_leader",
        "inplace_cached_pods",
    ];
    assert_eq!(families, want, "{text}");
    let readme = include_str!("../../../docs/operations.md");
    for name in want {
        let documented = readme.contains(&format!("`{name}"))
            || readme.contains(&format!("`{}", name.trim_start_matches("inplace_")))
            || (name.starts_with("inplace_pods_") && readme.contains("inplace_pods_{created"))
            || (name.starts_with("inplace_cloneset_")
                && readme.contains("inplace_cloneset_{replicas"));
        assert!(documented, "{name} is not in docs/operations.md");
    }
}

#[test]
fn encodes_registered_metrics() -> Result<(), std::fmt::Error> {
    let m = Metrics::new();
    let l = CloneSetLabels::new("ns", "demo");
    m.pods_created.get_or_create(&l).inc();
    m.expectation_timeouts
        .get_or_create(&ExpectationLabels {
            kind: "pod_create".into(),
        })
        .inc();
    let text = m.encode()?;
    assert!(text.contains("inplace_pods_created_total{namespace=\"ns\",cloneset=\"demo\"} 1"));
    assert!(text.contains("inplace_expectation_timeouts_total{kind=\"pod_create\"} 1"));
    assert!(text.contains("inplace_reconcile_duration_seconds_bucket"));
    Ok(())
}

#[test]
fn a_deleted_clonesets_series_are_all_removed() -> Result<(), std::fmt::Error> {
    let m = Metrics::new();
    let gone = CloneSetLabels::new("ns", "gone");
    let kept = CloneSetLabels::new("ns", "kept");
    for l in [&gone, &kept] {
        for counters in m.per_cloneset_counters() {
            counters.get_or_create(l).inc();
        }
        m.rollout_replicas.get_or_create(l).set(1);
    }
    m.forget(&gone);
    let text = m.encode()?;
    assert!(!text.contains("cloneset=\"gone\""), "{text}");
    assert!(text.contains("inplace_pods_recreated_total{namespace=\"ns\",cloneset=\"kept\"} 1"));
    Ok(())
}
